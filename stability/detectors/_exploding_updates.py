"""``exploding_updates``: updates far larger than the run's own early updates.

The baseline is the run itself: the median of the first ``baseline_fraction`` of updates, never
taken below ``grad_norm_floor`` / ``value_loss_floor`` (an early level of about 0 is no scale). A
pre-clip gradient norm ``grad_ratio`` times that median, a value loss ``value_loss_ratio``
times it, an update that moved the weights by more than ``update_ratio_max`` of their own norm
(the callback's ``update_ratio``; absent from plain logs), or an approx_kl above ``kl_max`` (the
new policy barely resembles the old one) count as hits; ``min_hits`` of them make it certain, and
so does one update that moved the weights by ``update_ratio_certain`` of their norm: it multiplied
that norm by at least ``update_ratio_certain - 1`` (the weights blew up in one step, which a run of
a few updates has no time to repeat).
In PPO-style runs (approx_kl logged) an update_ratio hit counts only where that update's
approx_kl reached ``update_ratio_min_kl``: the clipped objective bounds the policy's move, not
the weights', and a large weight move under a small KL is not an explosion.
Conversely an approx_kl hit counts only where the update moved the weights (``kl_min_update_ratio``
of their norm) or, in a plain log of a Gaussian policy, its std (``kl_min_std_change``): behind an
output layer of a large scale a tiny update moves the mean by many std (see ``_weights_moved``).
An approx_kl or update_ratio hit at an update where the policy was already near-deterministic
does not count: between two near-deterministic policies (saturated logits, a Gaussian std near
0) a small move is a huge KL, the logits grow with every step that sharpens them further, and
the collapse that caused both is ``entropy_collapse``'s to name. The run's first update is the
exception: it moved the untrained policy, and where that move was ``kl_max`` nats or more and the
policy stayed near-deterministic at every record after it, one update blew it up (certain once
the run has ended: a saturated policy's gradient is ~0, so no later update can show more, and a
plain log has no weights' norm to). Healthy runs do
see gradient norms grow as returns grow, by 10-100x; three orders of magnitude is beyond that.

Where the callback recorded the weights' norm (``param_norm``, and ``param_norm_start`` in the
context: their norm when training began), that decides: the weights grew ``param_growth``-fold
over their start (certain, live or at the end, from the first update that took them there), or
they did not, and the hits above are a warning. Large gradients, value losses and KLs are how an
explosion shows in a plain log; updates that blew up are weights that blew up, and a huge
learning rate that sharpens a policy to one action (its logits grow, its KL jumps) moves them by
a few times their size, not tenfold. The start is never taken under the norm every weight matrix
would have at an orthogonal gain of 1 (``param_norm_unit``): from init gains far under the usual
scale, weights that grow tenfold are learning (SB3's default init starts at 1.4 times that norm).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from stability import advice
from stability.detectors._base import (
    Detector,
    clipping_off,
    median,
    near_deterministic,
    near_deterministic_since,
    weights_start,
)
from stability.findings import Finding
from stability.signals import History


class ExplodingUpdates(Detector):
    name = "exploding_updates"

    def detect(self, history: History, t: dict[str, Any], final: bool) -> Finding | None:
        n = len(history)
        base_n = max(3, int(n * t["baseline_fraction"]))
        if n < base_n + 1:
            return None
        hits: list[tuple[int, str]] = []
        evidence: dict[str, Any] = {}
        for name, ratio, floor in (
            ("grad_norm", t["grad_ratio"], t["grad_norm_floor"]),
            ("value_loss", t["value_loss_ratio"], t["value_loss_floor"]),
        ):
            base = median(history.before(name, base_n))
            if not math.isfinite(base) or base <= 0:  # a signal never off 0 early has no scale at all
                continue
            indices, values = history.arrays(name)
            # An early level of about 0 (nothing to learn yet: a constant reward fitted exactly, a
            # sparse reward not yet found) counts as the floor: from there any first real gradient
            # or error is "thousands of times" the start without anything exploding. The floor
            # only raises the bar: it can take a hit away, never add one.
            with np.errstate(invalid="ignore"):
                late = (indices >= base_n) & np.isfinite(values) & (values > ratio * max(base, floor))
            if late.any():
                hits.extend((int(i), name) for i in indices[late])
                evidence[f"{name}_baseline_median"] = base
                evidence[f"{name}_max"] = float(values[late].max())
        collapsed: set[int] | None = None
        first = 0  # the run's first update (its index)
        # The update's own size against the weights it moved (the callback's update_ratio): no
        # baseline, since a healthy update moves the weights by a few percent of their norm at most.
        # approx_kl: the new policy barely resembles the old one.
        for name, limit in (("update_ratio", t["update_ratio_max"]), ("approx_kl", t["kl_max"])):
            indices, values = history.arrays(name)
            with np.errstate(invalid="ignore"):
                big = np.isfinite(values) & (values > limit)
            if not big.any():
                continue
            if collapsed is None:
                collapsed = near_deterministic(
                    history,
                    t["deterministic_entropy_fraction"],
                    t["deterministic_std"],
                    t["deterministic_entropy_drop"],
                )
            # the run's first update moved the untrained policy, which no near-determinism excuses
            keep = np.array([int(i) not in collapsed or int(i) == first for i in indices]) & big
            if (big & ~keep).any():
                evidence[f"{name}_hits_near_deterministic"] = int((big & ~keep).sum())
            if name == "update_ratio" and history.has("approx_kl"):
                moved = _policy_moved(history, indices, t["update_ratio_min_kl"])
                if (keep & ~moved).any():
                    evidence["update_ratio_hits_small_kl"] = int((keep & ~moved).sum())
                keep &= moved
            if name == "approx_kl":
                moved = _weights_moved(history, indices, t["kl_min_update_ratio"], t["kl_min_std_change"])
                if (keep & ~moved).any():
                    evidence["approx_kl_hits_weights_still"] = int((keep & ~moved).sum())
                keep &= moved
            if keep.any():
                hits.extend((int(i), name) for i in indices[keep])
                evidence[f"{name}_max"] = float(values[keep].max())
            if final and name == "approx_kl" and keep.any() and int(indices[keep][0]) == first:
                # near-deterministic at the first update and at every record since
                if first in collapsed and near_deterministic_since(
                    history,
                    first,
                    t["deterministic_entropy_fraction"],
                    t["deterministic_std"],
                    t["deterministic_entropy_drop"],
                ):
                    evidence["first_update_saturated"] = float(values[keep][0])
        growth = _weights_growth(history, t["param_growth"])
        crossed = growth[1] if growth is not None else None  # the update the weights reached the limit at
        if crossed is not None:
            hits.append((crossed, "param_norm"))
        if not hits:
            return None
        hits.sort()
        evidence["hits"] = len(hits)
        if growth is not None:  # the weights' own norm, where the callback recorded it, decides
            evidence["param_norm_growth"] = growth[0]
            certain = crossed is not None
        else:
            # one update that moved the weights by update_ratio_certain of their norm multiplied
            # that norm by at least update_ratio_certain - 1: a blow-up on its own, however short the run
            blowup = evidence.get("update_ratio_max", 0.0) >= t["update_ratio_certain"]
            # likewise, once the run has ended, one first update that moved the untrained policy by
            # kl_max nats and left it near-deterministic at every record since: one step saturated
            # it, and the run had no later move left to show (a saturated policy's gradient is ~0)
            blowup = blowup or "first_update_saturated" in evidence
            certain = len({i for i, _ in hits}) >= t["min_hits"] or blowup
        signals = sorted({name for _, name in hits})
        ctx, lr = history.context, history.values("learning_rate")
        first_lr = lr[0] if lr else None
        patches = advice.collect(
            advice.back_to_own_optimizer(ctx, first_lr, "updates far larger than the run's own early ones"),
            advice.lower_lr(ctx, first_lr, 10.0, "updates far larger than the run's own early ones"),
            advice.clip_grads(ctx, "cap the size of each update"),
            advice.make(ctx, "normalize", {"reward": True}, "large returns make large value-loss gradients")
            if not ctx.get("norm_reward")
            else None,
        )
        causes = _causes(history, first_lr)
        if growth is not None and crossed is None:  # first: it is why the finding is a warning
            causes.insert(
                0,
                f"the weights' norm grew {growth[0]:.2g}-fold at most, under {t['param_growth']:g}-fold: "
                "large updates that have not blown the weights up",
            )
        message = (
            f"the weights' norm grew {growth[0]:.3g}-fold over its start"
            if growth is not None and crossed is not None
            else f"update size exploded ({', '.join(signals)} far above the run's own early level)"
        )
        return Finding(
            self.name,
            history.step_of(hits[0][0]),
            message,
            evidence,
            advice.texts(patches),
            causes,
            certain=certain,
            patches=patches,
        )


def _weights_growth(history: History, limit: float) -> tuple[float, int | None] | None:
    """(The largest norm of the weights over their start, the first update at which it reached
    ``limit``-fold or None), from the callback's ``param_norm``; None where it was not recorded.
    The start is the context's ``param_norm_start`` (else the first record), never under
    ``param_norm_unit`` where that is known. An infinite norm is a growth past any limit."""
    at, norms = history.arrays("param_norm")
    if not len(norms):
        return None
    start = weights_start(history, norms)
    if start is None:
        return None
    unit = history.context.get("param_norm_unit")
    if isinstance(unit, (int, float)) and math.isfinite(unit):
        start = max(start, float(unit))
    with np.errstate(invalid="ignore"):
        ratio = norms / start
        over = ratio >= limit  # NaN (a weight NaN) is nan_scale's, never a growth
    known = ratio[~np.isnan(ratio)]
    if not len(known):
        return None
    return float(known.max()), (int(at[over][0]) if over.any() else None)


def _policy_moved(history: History, indices: np.ndarray, min_kl: float) -> np.ndarray:
    """Whether each update's approx_kl reached ``min_kl`` (True where it was not logged).

    A PPO-style update is clipped in what it does to the policy's outputs, not to its weights: an
    LSTM or a small-init layer can move by most of its own norm in one update while the policy it
    computes moves by a hundredth of a nat. Such a move is the weights' parametrisation settling,
    and the runs that did it learned; a weight move that comes with a policy move of a nat or more
    is an update out of control."""
    return _reached(history, "approx_kl", indices, min_kl)


def _weights_moved(history: History, indices: np.ndarray, min_ratio: float, min_std_change: float) -> np.ndarray:
    """Whether the update behind each approx_kl moved the weights at all (True where it cannot be told).

    The mirror of :func:`_policy_moved`. A Gaussian policy's KL is its mean's move in units of its
    std; behind an output layer of a large scale (a large init gain, saturated outputs), a weight
    move of under a percent of the weights' norm moves the mean by many std while its std stands
    still. The action bound clips such a mean to a constant action, and no update was large: that
    is a KL of thousands with nothing exploding. So an approx_kl hit counts only where the update
    moved the weights by ``min_ratio`` of their norm (the callback's update_ratio), or, in a plain
    log of a Gaussian policy (no update_ratio, a std logged), where the std moved by
    ``min_std_change`` (a fraction) from the update before; a first update, with nothing before
    it to compare, counts."""
    if history.has("update_ratio"):
        return _reached(history, "update_ratio", indices, min_ratio)
    if not history.has("std"):
        return np.ones(len(indices), dtype=bool)
    std_at, std = history.arrays("std")
    before = {int(i): float(s) for i, s in zip(std_at, std, strict=True)}
    moved = []
    for i in indices:
        now, last = before.get(int(i), math.nan), before.get(int(i) - 1, math.nan)
        still = math.isfinite(now) and math.isfinite(last) and last > 0 and abs(now / last - 1) < min_std_change
        moved.append(not still)
    return np.array(moved, dtype=bool)


def _reached(history: History, name: str, indices: np.ndarray, floor: float) -> np.ndarray:
    """Whether signal ``name`` reached ``floor`` at each update of ``indices`` (True where not logged)."""
    at = dict(zip(*history.arrays(name), strict=True))
    return np.array([not (at.get(int(i), math.inf) < floor) for i in indices], dtype=bool)


def _causes(history: History, first_lr: float | None) -> list[str]:
    ctx = history.context
    far = advice.far_above_default(ctx, first_lr)
    causes = [far] if far is not None else []
    if clipping_off(history):
        causes.append("gradient clipping is off")
    if not ctx.get("norm_reward"):
        stds = [v for v in history.values("return_std") if math.isfinite(v)]
        if stds and max(stds) > 100:
            causes.append(f"unnormalised returns (spread up to {max(stds):.3g})")
    return causes
