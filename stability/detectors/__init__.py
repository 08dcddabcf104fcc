"""The detectors, one module per failure class (see ``conf/stability.yaml`` for thresholds)."""

from stability.detectors._base import Detector
from stability.detectors._dead_policy_gradient import DeadPolicyGradient
from stability.detectors._degenerate_reward import DegenerateReward
from stability.detectors._entropy_collapse import EntropyCollapse
from stability.detectors._exploding_updates import ExplodingUpdates
from stability.detectors._nan_scale import NanScale
from stability.detectors._stuck_value_loss import StuckValueLoss

# The registry, in priority order: when several failures are certain, the first names the verdict
# (causes before consequences). Every verdict class is a detector's name (stability.VERDICTS).
DETECTORS: tuple[Detector, ...] = (
    NanScale(),
    ExplodingUpdates(),
    DegenerateReward(),
    DeadPolicyGradient(),
    StuckValueLoss(),
    EntropyCollapse(),
)

__all__ = [
    "DETECTORS",
    "Detector",
    "DeadPolicyGradient",
    "DegenerateReward",
    "EntropyCollapse",
    "ExplodingUpdates",
    "NanScale",
    "StuckValueLoss",
]
