"""Linear schedules, spelled as rl-zoo3 does: ``"lin_0.2"`` is linear from 0.2 to 0 over training.

A leaf: the knobs, the algorithm registry, the spec checks, export and repair all read and write
``lin_`` strings through these functions. ``LinearSchedule`` is a module-level class so saved
models unpickle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

PREFIX = "lin_"


@dataclass(frozen=True)
class LinearSchedule:
    """``initial`` at the start of training (progress_remaining=1) to ``final`` at the end (0)."""

    initial: float
    final: float = 0.0

    def __call__(self, progress_remaining: float) -> float:
        return self.final + progress_remaining * (self.initial - self.final)


def parse(value: Any) -> float | None:
    """The starting value of a ``lin_X`` string (X finite and > 0), else None."""
    if not (isinstance(value, str) and value.startswith(PREFIX)):
        return None
    try:
        rate = float(value[len(PREFIX) :])
    except ValueError:
        return None
    return rate if math.isfinite(rate) and rate > 0 else None


def text(initial: float) -> str:
    """``lin_X`` for a schedule that starts at ``initial``."""
    return f"{PREFIX}{initial:g}"
