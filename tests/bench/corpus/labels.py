"""Label rules: one label per run, from the privileged measurements of ``measure.py`` only.

The rules and their constants are written down in ``conf/corpus/README.md``; they were fixed
before any detector was scored and are kept apart from the detector thresholds
(``conf/stability.yaml``). Nothing here reads a detector, a verdict or a logged training signal.
"""

from __future__ import annotations

import math
import re
from statistics import fmean
from typing import Any

# The rules' constants (see conf/corpus/README.md, "Label rules").
STD_LIMITS = (1e-20, 1e10)  # a Gaussian std outside this is no longer a usable number
PARAM_GROWTH = 10.0  # weights' norm grew tenfold: updates blew them up
DEAD_KL = 0.01  # nats: the policy never moved further than this from its start
CRITIC_REL_RMSE = 0.6  # the critic's error is >= 60% of the returns' own RMS ...
CRITIC_R2 = 0.2  # ... and explains under 20% of their variance
COLLAPSE_CATEGORICAL = 0.1  # entropy under 10% of the uniform policy's
COLLAPSE_STD = 0.05  # or a Gaussian mean std under 0.05
COLLAPSE_BY = 0.6  # reached within the first 60% of the budget, and held
COLLAPSE_RETURN = 0.5  # final return below half the way from the untrained policy to the reference

_NONFINITE = re.compile(r"invalid values|nan|inf\b|non-finite|not finite", re.IGNORECASE)
ORDER = (
    "nan_scale",
    "exploding_updates",
    "degenerate_reward",
    "dead_policy_gradient",
    "stuck_value_loss",
    "entropy_collapse",
)


def mean_return(rollout: dict[str, Any] | None) -> float:
    returns = (rollout or {}).get("episode_returns") or []
    finite = [r for r in returns if math.isfinite(r)]
    return fmean(finite) if finite else math.nan


def facts(run: dict[str, Any], reference_return: float | None) -> dict[str, bool | None]:
    """Every rule's outcome for one run (True, False, or None when it cannot be measured)."""
    m = run["measurements"]
    rollouts = m["rollouts"]
    error = run.get("error") or ""
    stds = [v for v in m["std_max"] + m["std_min"] if v is not None]
    nonfinite = (
        not all(m["finite"])
        or bool(error and _NONFINITE.search(error.splitlines()[-1]))
        or any(not (STD_LIMITS[0] <= v <= STD_LIMITS[1]) for v in stds)
        or any("error" in r and _NONFINITE.search(r["error"]) for r in rollouts.values())
    )
    norms = [v for v in m["param_norm"] if math.isfinite(v)]
    exploding = bool(norms) and max(norms) >= PARAM_GROWTH * norms[0]
    degenerate = (
        all(
            r.get("raw_reward_std") == 0.0 and _same(r.get("episode_returns"))
            for r in (rollouts.get("start"), rollouts.get("end"))
            if r is not None
        )
        and "end" in rollouts
    )
    kls = [v for v in m["kl_from_start"]]
    dead = bool(kls) and all(math.isfinite(v) for v in kls) and max(kls) < DEAD_KL
    stuck = None
    half, end = rollouts.get("half", {}), rollouts.get("end", {})
    if all(math.isfinite(r.get("rel_rmse", math.nan)) for r in (half, end)):
        stuck = (
            half["rel_rmse"] >= CRITIC_REL_RMSE
            and end["rel_rmse"] >= CRITIC_REL_RMSE
            and not end.get("r2", math.nan) >= CRITIC_R2
            # a critic off its targets beside a policy that learns (got half way to the reference)
            # is the hard negative "a critic lagging a fast-improving policy", not a failure
            and not (reference_return is not None and learned(rollouts, reference_return))
        )
    reference = reference_return if reference_return is not None and math.isfinite(reference_return) else None
    collapsed = _collapsed(m)
    collapse = collapsed and reference is not None and stalled(rollouts, reference)
    return {
        "nan_scale": nonfinite,
        "exploding_updates": exploding,
        "degenerate_reward": degenerate,
        "dead_policy_gradient": dead,
        "stuck_value_loss": stuck,
        "entropy_collapse": collapse,
        "crashed": bool(error) and not nonfinite,
        # a measurement rollout that failed for another reason (a bug of the harness, not the
        # run's): the rules that read rollouts cannot be decided
        "unmeasured": not nonfinite and any("error" in r for r in rollouts.values()),
        # rule 5's excuse and rule 6's bar are measured against the env's reference return; when
        # its case has no run to measure, a critic off its targets or a collapsed policy cannot be
        # told from one that learned (labelling it healthy, or stuck, would be a guess)
        "unreferenced": reference is None and bool(stuck or collapsed),
    }


def label(run: dict[str, Any], reference_return: float | None) -> str:
    """The first rule that holds, in ``ORDER`` (causes before consequences), else healthy;
    ``crash`` for a run that raised something other than a non-finite error; ``unmeasured`` when a
    measurement rollout failed and no rule before the first that reads rollouts holds, or when
    rule 5 or 6 would need the env's reference return and it has none (the label cannot be
    decided, and defaulting to healthy would be a wrong label)."""
    found = facts(run, reference_return)
    for kind in ORDER:
        if kind == "degenerate_reward" and found["unmeasured"]:
            return "unmeasured"
        if kind == "stuck_value_loss" and found["unreferenced"]:
            return "unmeasured"
        if found[kind]:
            return kind
    return "crash" if found["crashed"] else "healthy"


def _same(returns: list[float] | None) -> bool:
    return bool(returns) and max(returns) - min(returns) <= 1e-9 * max(1.0, abs(returns[0]))


def _collapsed(m: dict[str, Any]) -> bool:
    values, steps, budget = m["determinism"], m["snapshot_steps"], m["budget"]
    limit = COLLAPSE_CATEGORICAL if m["kind"] == "categorical" else COLLAPSE_STD
    for i, (value, step) in enumerate(zip(values, steps, strict=False)):
        if step > COLLAPSE_BY * budget:
            return False
        if math.isfinite(value) and value < limit:
            return all(math.isfinite(v) and v < 2 * limit for v in values[i:])
    return False


def learned(rollouts: dict[str, Any], reference: float) -> bool:
    """The fresh rollouts' return got at least half the way from the untrained policy's to the
    reference (measured both ends: not stalled, and not unmeasurable)."""
    start, end = mean_return(rollouts.get("start")), mean_return(rollouts.get("end"))
    finite = math.isfinite(start) and math.isfinite(end) and math.isfinite(reference)
    return finite and not stalled(rollouts, reference)


def stalled(rollouts: dict[str, Any], reference: float) -> bool:
    start, end = mean_return(rollouts.get("start")), mean_return(rollouts.get("end"))
    if not (math.isfinite(start) and math.isfinite(end) and math.isfinite(reference)):
        return False
    return end < start + COLLAPSE_RETURN * (reference - start)
