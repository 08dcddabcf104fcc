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


# objective.directions: what a multi-objective sweep optimises besides the return
OBJECTIVE_METRICS = {
    "return": "the seeds' returns, aggregated by objective.aggregate",
    "spread": "the standard deviation of the seeds' returns",
    "train_seconds": "the mean wall time a seed trained for",
}


def objective_values(
    names: list[str], aggregate: Callable[[list[float]], float], returns: list[float], train_seconds: list[float]
) -> list[float]:
    """A trial's value for each name of :data:`OBJECTIVE_METRICS`, in order."""
    by_name = {
        "return": lambda: aggregate(returns),
        "spread": lambda: statistics.pstdev(returns) if len(returns) > 1 else 0.0,
        "train_seconds": lambda: statistics.fmean(train_seconds) if train_seconds else math.nan,
    }
    return [by_name[n]() for n in names]


def pareto_front(points: list[tuple[int, list[float]]], maximize: list[bool]) -> list[int]:
    """The ids of the points no other point dominates (at least as good in every value, better in one)."""

    def better_or_equal(a: list[float], b: list[float]) -> bool:
        return all((x >= y) if up else (x <= y) for x, y, up in zip(a, b, maximize, strict=True))

    return [i for i, v in points if not any(better_or_equal(w, v) and w != v for j, w in points if j != i)]
