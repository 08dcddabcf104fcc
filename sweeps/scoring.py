"""How seeds' returns become one number: a trial's objective (``objective.aggregate``) and the
robust score export ranks configs by. A leaf: the spec checks ``objective.aggregate`` with it."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable

SCORE_RULE = "mean - std of the per-seed evaluation returns"


def robust_score(values: list[float], k: float = 1.0) -> float:
    """:data:`SCORE_RULE` (-inf for no returns): what export ranks configs by; ``k``: how many
    standard deviations of the seeds' returns to take off their mean."""
    if not values:
        return -math.inf
    return statistics.fmean(values) - k * (statistics.pstdev(values) if len(values) > 1 else 0.0)


# objective.aggregate: how a trial's per-seed returns become its objective value
AGGREGATES = "mean, median, min or 'mean - K*std' (K >= 0, e.g. 'mean - std', 'mean - 0.5*std')"
_MEAN_K_STD = re.compile(r"^mean\s*-\s*(?:(\d+(?:\.\d*)?|\.\d+)\s*\*\s*)?std$")


def aggregator(rule: str) -> Callable[[list[float]], float] | None:
    """The function ``objective.aggregate`` names, or None if it names none (see AGGREGATES)."""
    named: dict[str, Callable[[list[float]], float]] = {
        "mean": statistics.fmean,
        "median": statistics.median,
        "min": min,
    }
    if rule in named:
        return named[rule]
    match = _MEAN_K_STD.match(rule.strip())
    if match is None:
        return None
    k = float(match.group(1) or 1.0)
    return lambda values: robust_score(values, k)
