"""Stability signals, detectors and verdicts for RL training runs.

Usable without the rest of rlsweep (it never imports ``sweeps``)::

    from stability import StabilityCallback, diagnose, classify, History

``import stability`` stays light: torch and SB3 load only when the callback is used.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
RLSWEEP = True  # tells this package apart from the unrelated PyPI distribution named 'stability'
from stability.signals import CANONICAL, History  # noqa: E402
from stability.thresholds import ThresholdError, Thresholds  # noqa: E402
from stability.verdict import PRIORITY, Finding, Verdict, classify  # noqa: E402

# Every verdict a run can get: healthy, or a failure class named by its detector (stability.detectors).
VERDICTS = ("healthy", *PRIORITY)

__all__ = [
    "CANONICAL",
    "Finding",
    "History",
    "StabilityCallback",
    "ThresholdError",
    "Thresholds",
    "VERDICTS",
    "Verdict",
    "classify",
    "diagnose",
]


def __getattr__(name: str) -> Any:
    if name == "StabilityCallback":
        from stability.callback import StabilityCallback

        return StabilityCallback
    if name == "diagnose":
        from stability.diagnose import diagnose

        return diagnose
    raise AttributeError(f"module 'stability' has no attribute {name!r}")
