"""What every detector is, and the few window helpers they share."""

from __future__ import annotations

import math
import statistics
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from stability.findings import Finding
from stability.signals import History


class Detector(ABC):
    """A small pure rule: a signal history in, a :class:`Finding` or None out."""

    name: str = ""
    # A certain finding is kept for the rest of the run (a learning rate that decays later does not
    # excuse the updates it blew up). A detector whose certain finding states a fact about the whole
    # run so far ("no rollout has paid a reward signal yet") sets this: later updates can disprove
    # such a fact, and the finding is then dropped, not kept.
    whole_run_claim: bool = False

    @abstractmethod
    def detect(self, history: History, t: dict[str, Any], final: bool) -> Finding | None:
        """``t`` holds this detector's thresholds; ``final`` says the run has ended."""


def window_size(history: History, t: dict[str, Any]) -> int:
    """The judged window: the last ``window_fraction`` of updates, at least ``min_window``."""
    return max(int(t["min_window"]), int(len(history) * float(t["window_fraction"])))


def median(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def progress(history: History) -> float | None:
    """Fraction of the planned budget done, when the budget is known."""
    if not history.total_steps:
        return None
    return history.last_step / history.total_steps


def first_index(history: History, name: str, test: Any) -> tuple[int, float] | None:
    """Update index and value of the first value of ``name`` for which the vectorised
    ``test(values) -> bool array`` holds, or None."""
    indices, values = history.arrays(name)
    if not len(values):
        return None
    with np.errstate(invalid="ignore"):
        hits = np.flatnonzero(test(values))
    return (int(indices[hits[0]]), float(values[hits[0]])) if len(hits) else None


def streak_start(history: History, name: str, test: Any) -> int | None:
    """Update index from which ``test`` has held for every value of ``name`` up to the last."""
    indices, values = history.arrays(name)
    if not len(values):
        return None
    with np.errstate(invalid="ignore"):
        misses = np.flatnonzero(~test(values))
    if not len(misses):
        return int(indices[0])
    return int(indices[misses[-1] + 1]) if misses[-1] + 1 < len(values) else None


def rel_change(values: list[float]) -> float:
    """Spread of a signal over a window relative to its size (0 for a frozen signal)."""
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < 2:
        return math.nan
    scale = max(abs(statistics.fmean(finite)), 1e-8)
    return (max(finite) - min(finite)) / scale


# The entropy of a unit-std Gaussian, per action dimension: 0.5 * ln(2 * pi * e)
UNIT_GAUSSIAN_ENTROPY = 0.5 * math.log(2 * math.pi * math.e)
# How close a log's first entropy must come to a whole number of UNIT_GAUSSIAN_ENTROPY to be read
# as a unit-std Gaussian's (see is_continuous)
_UNIT_ENTROPY_TOLERANCE = 0.01


def clipping_off(history: History) -> bool:
    """The run clips no gradient: its context's ``max_grad_norm`` is infinite (``max_grad_norm:
    off``; SB3 still calls the clip, with inf). False when the context does not say."""
    clip = history.context.get("max_grad_norm")
    return clip is not None and not math.isfinite(float(clip))


def weights_start(history: History, norms: np.ndarray) -> float | None:
    """The weights' norm when training began: the context's ``param_norm_start`` (the callback's),
    else the first finite, positive ``norms`` record; None when neither is known."""
    start = history.context.get("param_norm_start")
    if isinstance(start, (int, float)) and math.isfinite(start) and start > 0:
        return float(start)
    finite = norms[np.isfinite(norms) & (norms > 0)]
    return float(finite[0]) if len(finite) else None


def is_continuous(history: History) -> bool:
    """A Gaussian policy: as the run's context says, else from whether a std was logged, else (a
    plain log without a std: CleanRL's) from the entropy itself:

    - an entropy below 0 at any update: a discrete distribution's never is;
    - a first entropy within 1% of ``k * 0.5 * ln(2 pi e)`` (k = 1, 2, ...): the entropy of a
      k-dimensional Gaussian of std 1, where SB3 and CleanRL start their log_std (0). An
      untrained discrete policy starts near uniform, at ln(n): ln 4 is 2.3% below one unit, and
      the first entropies of the corpus's discrete runs are all 2.3% or more from any multiple.
      (A discrete space whose ln(n) lands within 1% of a multiple, 17 or 70 actions, would be
      misread; the detectors then ask a Gaussian's stricter evidence of it.)
    """
    continuous = history.context.get("continuous")
    if continuous is not None:
        return bool(continuous)
    if history.has("std"):
        return True
    entropy = [v for v in history.values("entropy") if math.isfinite(v)]
    if not entropy:
        return False
    if min(entropy) < 0:
        return True
    nearest = round(entropy[0] / UNIT_GAUSSIAN_ENTROPY) * UNIT_GAUSSIAN_ENTROPY  # k unit Gaussians
    return nearest > 0 and abs(entropy[0] - nearest) <= _UNIT_ENTROPY_TOLERANCE * nearest


def determinism_limit(
    history: History, entropy_fraction: float, std_max: float, entropy_drop: float
) -> tuple[str, float] | None:
    """The signal, and the value under which the policy is near-deterministic:

    - a Gaussian with a logged std: its spread (see :func:`determinism_series`) under ``std_max``
      (actions of unit scale);
    - a Gaussian without (CleanRL): its entropy fallen by ``entropy_drop`` nats from the first value;
    - a discrete policy: its entropy under ``entropy_fraction`` of the uniform policy's. The callback
      knows that maximum; a plain log does not, and its first entropy stands in (an untrained policy
      is near uniform), floored at ln 2, the least any discrete space of two or more actions has: a
      policy whose logits start saturated logs a tiny first entropy.
    """
    continuous = is_continuous(history)
    if continuous and history.has("std"):
        return "std", std_max
    entropies = history.values("entropy")
    if not entropies or not math.isfinite(entropies[0]):
        return None
    if continuous:
        return "entropy", entropies[0] - entropy_drop
    top = history.context.get("entropy_max") or max(entropies[0], math.log(2))
    return ("entropy", entropy_fraction * top) if top > 0 else None


def determinism_series(history: History, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Update indices and values of the signal :func:`determinism_limit` names.

    A logged std is read with the entropy logged beside it: at each update, the larger of the two
    spreads, the std and the one the entropy implies for a single action dimension,
    ``exp(entropy - ln sqrt(2 pi e))``. Where the logged std is the actions' own (SB3's
    state-independent Gaussian), the entropy implies no more once the std is under e^-1.42 = 0.24,
    whatever the number of dimensions, and the std decides alone. Under gSDE, SB3 logs the scale of
    the noise weights, and the actions spread by that times the norm of the policy's latent
    features: the entropy, taken from the actions' distribution, says how near-deterministic they
    are. With several action dimensions the entropy is read as one dimension's, so there it can
    only confirm a small std, never show one."""
    indices, values = history.arrays(name)
    if name != "std" or not history.has("entropy"):
        return indices, values
    at, entropy = history.arrays("entropy")
    with np.errstate(over="ignore", invalid="ignore"):
        implied = dict(zip(at.tolist(), np.exp(entropy - UNIT_GAUSSIAN_ENTROPY).tolist(), strict=True))
    beside = np.array([implied.get(i, math.nan) for i in indices.tolist()], dtype=np.float64)
    return indices, np.where(np.isfinite(beside), np.maximum(values, beside), values)


def near_deterministic(history: History, entropy_fraction: float, std_max: float, entropy_drop: float) -> set[int]:
    """Update indices at which the policy was near-deterministic (see :func:`determinism_limit`)."""
    found = determinism_limit(history, entropy_fraction, std_max, entropy_drop)
    if found is None:
        return set()
    name, limit = found
    indices, values = determinism_series(history, name)
    with np.errstate(invalid="ignore"):
        return {int(i) for i in indices[np.isfinite(values) & (values < limit)]}


def near_deterministic_since(
    history: History, start: int, entropy_fraction: float, std_max: float, entropy_drop: float
) -> bool:
    """The policy was near-deterministic (see :func:`determinism_limit`) at every update from index
    ``start`` on that logged its entropy or std, and at least one did."""
    found = determinism_limit(history, entropy_fraction, std_max, entropy_drop)
    if found is None:
        return False
    indices, values = determinism_series(history, found[0])
    inside = indices >= start
    with np.errstate(invalid="ignore"):
        return bool(inside.any()) and bool(np.all(values[inside] < found[1]))


def returns_rose(history: History, w: int, at_best: bool = False) -> bool:
    """Episode returns rose from the first window to the last by most of their range and by
    over 10% of their own size (noise does neither); with ``at_best``, they also sit near their best."""
    returns = [v for v in history.values("ep_return") if math.isfinite(v)]
    if len(returns) < 2 * w:
        return False
    early, late = median(returns[:w]), median(returns[-w:])
    spread, gain = max(returns) - min(returns), late - early
    rose = spread > 0 and gain > 0.5 * spread and gain > 0.1 * max(abs(early), abs(late))
    return rose and (not at_best or late >= max(returns) - 0.25 * spread)
