"""``entropy_collapse``: the policy became near-deterministic early, and its returns stall.

Certain once ``min_progress`` of the budget is done (or at the end of a run of unknown budget) when:
- the policy became near-deterministic: discrete policies' entropy below ``entropy_fraction`` of
  the uniform policy's (known to the callback; from a plain log, the first recorded entropy stands
  in, as an untrained policy is near uniform, floored at ln 2); Gaussian policies' mean std
  (``std``) below ``std_max``, or, without ``std``, entropy fallen by at least ``entropy_drop``
  nats from its first value;
- it got there in the first ``by_progress`` of the run and stayed near it since: under
  ``stay_factor`` times the entropy fraction or the std bar (a policy that only hovers between
  the two still explores; one that dipped under once and climbed back is not collapsed), under
  the same bar for an entropy drop;
- and the returns stall: the last window's median is neither ``min_gain`` of their size above the
  first few returns (the untrained policy's) nor ``min_gain_spread`` times the early returns' own
  spread above them (a return with a large offset, e.g. a reward paid every step, gains little in
  proportion when it learns, but clearly against its episode-to-episode noise), or it has fallen
  back by more than half of what the run gained at its best. A policy that converged by learning
  (a solved task) is not entropy collapse: neither is one whose recent episodes all pay the best
  total the run has seen (a sparse reward paid on reaching a goal caps the return, so it cannot
  rise further).

A policy that never explored, near-deterministic from its first record to its last (a log std
started and held low, logits saturated by the first update), is judged once the run has ended, on
a stricter bar and from ``never_explored_min_updates`` records on (the whole run is the evidence,
and a slow learner has until its last update): its returns must rise by ``never_explored_gain`` of
their own size. Such a policy can only drift its mean, and small drifts move returns a little (a
continuous action penalty shrinks as the mean settles), which the stall test above reads as
learning; a run that got half the way to a healthy return rises by about 40% or more on the usual
benchmarks (Pendulum, Acrobot) and by far more on CartPole or MountainCar.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from stability import advice
from stability.detectors._base import (
    Detector,
    determinism_limit,
    determinism_series,
    is_continuous,
    median,
    progress,
    window_size,
)
from stability.findings import Finding
from stability.signals import History


class EntropyCollapse(Detector):
    name = "entropy_collapse"

    def detect(self, history: History, t: dict[str, Any], final: bool) -> Finding | None:
        n = len(history)
        if n < min(t["min_updates"], t["never_explored_min_updates"]) or not history.has("entropy"):
            return None
        done = progress(history)
        if not final and (done is None or done < t["min_progress"]):
            return None
        w = window_size(history, t)
        continuous = is_continuous(history)
        collapsed = self._collapsed_from(history, t, continuous)
        if collapsed is None:
            return None
        start, reached, never_explored, evidence = collapsed
        if n < t["min_updates"] and not (never_explored and final):
            return None
        if history.step_of(reached) > t["by_progress"] * max(history.total_steps or history.last_step, 1):
            return None
        stall = _stalled(history, w, t) if n >= t["min_updates"] else None
        if stall is None and never_explored and final:  # a slow learner has until its last update
            stall = _short_of_learning(history, w, t)
        if stall is None:
            return None
        evidence.update(stall)
        if never_explored:
            evidence["never_explored"] = True
        evidence["window_updates"] = w
        ctx = history.context
        lr = history.values("learning_rate")
        ent_coef = ctx.get("ent_coef")
        causes = []
        if isinstance(ent_coef, (int, float)) and ent_coef < 0:
            causes.append(f"ent_coef {ent_coef:g} is negative: it rewards lower entropy")
        kl = history.values("approx_kl")
        if kl and median(kl[: max(3, n // 5)]) > 0.05:
            causes.append(f"early updates were large (approx_kl median {median(kl[: max(3, n // 5)]):.3g})")
        # the config started the Gaussian's std under the stay bar: the first fix is to start it at 1,
        # whether or not the first record was already under the bar (gSDE's first one may not be)
        first_log_std = ctx.get("log_std_init")
        started_low = (
            continuous
            and isinstance(first_log_std, (int, float))
            and math.exp(first_log_std) < t["std_max"] * t["stay_factor"]
        )
        if started_low or (continuous and evidence.get("std_first", math.inf) < t["std_max"]):
            causes.append("the Gaussian's std started near 0 (log_std_init or log_std_bounds keep it there)")
        head = ctx.get("policy_head_weight_std")
        large_head = isinstance(head, (int, float)) and head > t["policy_head_std_max"]
        if large_head:
            kind = "means" if continuous else "logits"
            causes.insert(0, f"the policy head starts large (weight std {head:.2g}): its {kind} saturate at once")
        first_lr, slower = (lr[0] if lr else None), "smaller steps commit to an action more slowly"
        far = advice.far_above_default(ctx, first_lr)
        if far is not None:  # first: the likeliest cause of a policy that saturates at once
            causes.insert(0, f"{far}: each update moves the policy far")
        patches = advice.collect(
            advice.back_to_default_lr(ctx, first_lr, slower),
            advice.make(ctx, "init_gains", {"policy": 0.01}, "start the policy head at SB3's scale")
            if large_head
            else None,
            _start_exploring(ctx) if (never_explored or started_low) and continuous else None,
            advice.make(
                ctx, "ent_coef", 0.01 if continuous is False else 0.0, "an entropy bonus keeps the policy exploring"
            )
            if not (isinstance(ent_coef, (int, float)) and ent_coef >= 0.01)
            else None,
            advice.lower_lr(ctx, first_lr, 3.0, slower),
            advice.make(ctx, "log_std_bounds", [-5, 2], "let the Gaussian's std grow back") if continuous else None,
        )
        return Finding(
            self.name,
            history.step_of(start),
            "the policy was near-deterministic from its first update and its returns did not rise"
            if never_explored
            else "the policy became near-deterministic early and its returns stall",
            evidence,
            advice.texts(patches),
            causes,
            patches=patches,
        )

    def _collapsed_from(
        self, history: History, t: dict[str, Any], continuous: bool
    ) -> tuple[int, int, bool, dict] | None:
        """The update index from which the policy has stayed near-deterministic (under the stay bar),
        the first index of that stretch under the bar it had to reach, whether it was there from
        its first record (it never explored), and the evidence."""
        found = determinism_limit(history, t["entropy_fraction"], t["std_max"], t["entropy_drop"])
        if found is None:
            return None
        name, limit = found
        # an entropy fraction or a std scales; an entropy drop in nats does not
        stay = limit if name == "entropy" and continuous else limit * t["stay_factor"]
        at, series = determinism_series(history, name)
        indices, values = at.tolist(), series.tolist()
        hold = [math.isfinite(v) and v < stay for v in values]
        if not hold[-1]:
            return None
        k = len(hold) - 1
        while k > 0 and hold[k - 1]:
            k -= 1
        reached = next((j for j in range(k, len(values)) if values[j] < limit), None)
        if reached is None:
            return None
        evidence = {
            f"{name}_first": values[0],
            f"{name}_last": values[-1],
            f"{name}_limit": limit,
            f"{name}_stay_limit": stay,
        }
        return indices[k], indices[reached], k == reached == 0, evidence


def _start_exploring(ctx: dict[str, Any]) -> dict[str, Any] | None:
    """For a Gaussian that never explored: start its std at 1 (log std 0), with bounds that let it
    be there where the run's own bounds do not. None when the run already started there."""
    why = "the policy never explored: start its std at 1"
    bounds = ctx.get("log_std_bounds")
    if isinstance(bounds, list) and len(bounds) == 2 and not bounds[0] <= 0.0 <= bounds[1]:
        return {"patch": {"log_std_init": 0.0, "log_std_bounds": [-5, 2]}, "why": why + ", inside bounds that allow it"}
    return advice.make(ctx, "log_std_init", 0.0, why)


def _short_of_learning(history: History, w: int, t: dict[str, Any]) -> dict[str, float] | None:
    """Evidence that a policy that never explored did not learn: its latest returns are not
    ``never_explored_gain`` of their own size above its first ones. None when they are, when fewer
    than two returns are logged, or when the returns never varied (see :func:`_stalled`)."""
    returns = [v for v in history.values("ep_return") if math.isfinite(v)]
    if len(returns) < 2 or min(returns) == max(returns):
        return None
    k = max(1, min(3, len(returns) // 3))
    first = median(returns[:k])
    late = median(returns[-max(1, min(w, len(returns) // 3)) :])
    if late - first >= t["never_explored_gain"] * max(abs(first), 1e-8):
        return None
    return {"return_first": first, "return_last": late, "return_gain_needed": t["never_explored_gain"]}


def _stalled(history: History, w: int, t: dict[str, Any]) -> dict[str, float] | None:
    """Evidence that the returns stall, or None when they show learning (or are not logged)."""
    returns = [v for v in history.values("ep_return") if math.isfinite(v)]
    if len(returns) < 4:
        return None
    tail = returns[-min(w, len(returns) // 2) :]
    first, late = median(returns[:3]), median(tail)
    k = max(3, min(w, len(returns) // 4))
    best = max(median(returns[i : i + k]) for i in range(0, len(returns) - k + 1))
    if min(tail) == max(tail) == max(returns) > first:
        return None  # every recent episode pays the best total the run has seen: a solved task
    if min(returns) == max(returns):
        # the same total from the first record to the last (a goal reached in every episode, or in
        # none): no better level and no early trend the returns could stall below
        return None
    early = np.asarray(returns[:k])
    q1, q3 = np.percentile(early, [25, 75])
    spread = max(float(q3 - q1), float(early.std()))  # the untrained policy's episode-to-episode noise
    no_gain = late < first + t["min_gain"] * max(abs(first), 1e-8) and not (
        spread > 0 and late - first >= t["min_gain_spread"] * spread
    )
    fell_back = best > first and late < best - 0.5 * (best - first)
    if not (no_gain or fell_back):
        return None
    return {"return_first": first, "return_best": best, "return_last": late, "return_early_spread": spread}
