"""Detector thresholds: documented defaults, overridable from a YAML file.

The defaults are the values in ``conf/stability.yaml``, which gives the reasoning for each
(a test keeps the two equal). A file only needs the keys it changes; an unknown key is an
error naming the file and the key path.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stability._numbers import is_real
from stability.errors import RlsweepError

DEFAULTS: dict[str, dict[str, Any]] = {
    "nan_scale": {
        "enabled": True,
        "log_std_warn_high": 7.0,
        "log_std_warn_low": -20.0,
        "log_std_high": 23.0,
        "log_std_low": -46.0,
        "loc_high": 1.0e6,
        "env_action_abs_max": 1.0e3,
    },
    "exploding_updates": {
        "enabled": True,
        "baseline_fraction": 0.2,
        "grad_ratio": 1000.0,
        "value_loss_ratio": 1.0e4,
        "grad_norm_floor": 1.0e-3,
        "value_loss_floor": 1.0e-6,
        "update_ratio_max": 0.3,
        "update_ratio_min_kl": 1.0,
        "kl_max": 10.0,
        "kl_min_update_ratio": 0.02,
        "kl_min_std_change": 0.05,
        "min_hits": 3,
        "update_ratio_certain": 11.0,
        "param_growth": 10.0,
        "deterministic_entropy_fraction": 0.2,
    },
    "degenerate_reward": {
        "enabled": True,
        "min_updates": 10,
        "min_episodes": 10,
        "spread_eps": 1.0e-8,
    },
    "dead_policy_gradient": {
        "enabled": True,
        "min_updates": 10,
        "min_window": 5,
        "window_fraction": 0.25,
        "min_progress": 0.5,
        "kl_max": 1.0e-4,
        "window_kl_max": 1.0e-3,
        "clip_fraction_max": 0.01,
        "clip_range_tiny": 1.0e-3,
        "grad_clip_tiny": 1.0e-3,
        "entropy_rel_change_max": 0.01,
        "actor_grad_share_max": 0.01,
        "std_never_moved_max": 1.0e-4,
        "weights_shrunk": 0.1,
        "shrunk_std_drift_max": 0.1,
        "weight_decay_pins": 0.1,
        "lr_min_fraction": 0.05,
        "override_fraction": 0.5,
        "weight_decay": 0.01,
        "collapsed_fraction": 0.1,
        "min_certain_steps": 2048,
        "min_updates_final": 4,
        "drift_corr_min": 0.7,
        "drift_growth": 2.0,
    },
    "stuck_value_loss": {
        "enabled": True,
        "min_updates": 20,
        "min_certain_updates": 10,
        "min_certain_steps": 2048,
        "min_window": 5,
        "window_fraction": 0.25,
        "min_progress": 0.5,
        "fall_ratio": 0.6,
        "ev_max": 0.2,
        "relative_floor": 0.2,
        "relative_alone": 0.5,
        "relative_never_fit": 0.1,
        "relative_floor_episode": 0.1,
        "ev_pinned": 1.0e-3,
        "pinned_share": 0.6,
        "relative_fit_episode": 0.01,
        "relative_fit_episode_min": 1.0e-6,
        "relative_units_max": 10.0,
        "ev_below_mean": -0.2,
        "gaussian_ev_best_max": 0.5,
        "critic_error_off": 0.65,
        "critic_error_fit": 0.6,
        "critic_r2_max": 0.2,
        "critic_records": 3,
        "critic_records_sparse": 2,
        "value_clip_tiny": 0.01,
        "reward_scale_tiny": 1.0e-4,
        "vf_coef_untrained": 1.0e-4,
        "weight_decay": 0.01,
        "return_scale": 100.0,
        "value_head_std_max": 0.5,
        "long_horizon_gamma": 0.999,
        "learned_fraction": 0.2,
        "survival_records": 4,
        "survival_rate_tolerance": 0.25,
        "survival_length_span": 1.5,
    },
    "entropy_collapse": {
        "enabled": True,
        "min_updates": 10,
        "min_window": 5,
        "window_fraction": 0.25,
        "min_progress": 0.5,
        "by_progress": 0.6,
        "entropy_fraction": 0.1,
        "std_max": 0.05,
        "policy_head_std_max": 0.5,
        "stay_factor": 2.0,
        "entropy_drop": 3.0,
        "min_gain": 0.1,
        "min_gain_spread": 1.0,
        "never_explored_min_updates": 3,
        "never_explored_gain": 0.4,
    },
}


# Thresholds one detector reads from another's section, where the fact is the other's to define:
# "near-deterministic" is entropy_collapse's, and the detectors that defer to it read its limits
# under their own names; "a critic pinned at explained variance ~0", and the bars of a value clip
# and a reward_scale too small, are stuck_value_loss's. One home: overriding
# entropy_collapse.std_max moves all of them.
BORROWED: dict[str, dict[str, tuple[str, str]]] = {
    "exploding_updates": {
        "deterministic_std": ("entropy_collapse", "std_max"),
        "deterministic_entropy_drop": ("entropy_collapse", "entropy_drop"),
    },
    "dead_policy_gradient": {
        "deterministic_std": ("entropy_collapse", "std_max"),
        "critic_ev_pinned": ("stuck_value_loss", "ev_pinned"),
        "value_clip_tiny": ("stuck_value_loss", "value_clip_tiny"),
        "reward_scale_tiny": ("stuck_value_loss", "reward_scale_tiny"),
    },
    "stuck_value_loss": {
        "deterministic_entropy_fraction": ("entropy_collapse", "entropy_fraction"),
        "deterministic_std": ("entropy_collapse", "std_max"),
        "deterministic_entropy_drop": ("entropy_collapse", "entropy_drop"),
    },
}


class ThresholdError(RlsweepError, ValueError):
    """A thresholds file that cannot be used; the message names the file and the key path."""


class Thresholds:
    """Per-detector parameters: the defaults with a file's overrides applied."""

    def __init__(self, overrides: Mapping[str, Any] | None = None, source: str = "<thresholds>") -> None:
        self.source = source
        self.values = copy.deepcopy(DEFAULTS)
        problems: list[str] = []
        if overrides is not None and not isinstance(overrides, Mapping):
            raise ThresholdError(f"{source}: expected a mapping of detector names, got {type(overrides).__name__}")
        for name, section in (overrides or {}).items():
            if name not in DEFAULTS:
                problems.append(f"{name}: unknown detector; allowed: {', '.join(DEFAULTS)}")
                continue
            if not isinstance(section, Mapping):
                problems.append(f"{name}: expected a mapping of thresholds, got {section!r}")
                continue
            for key, value in section.items():
                problems.extend(self._set(name, key, value))
        if problems:
            raise ThresholdError(
                f"{source}: {len(problems)} error{'s' * (len(problems) > 1)}\n  " + "\n  ".join(problems)
            )

    def _set(self, name: str, key: str, value: Any) -> list[str]:
        default = DEFAULTS[name].get(key)
        if key in BORROWED.get(name, {}):
            home, own = BORROWED[name][key]
            return [f"{name}.{key}: set {home}.{own} instead (this detector reads that one)"]
        if default is None:
            return [f"{name}.{key}: unknown threshold; allowed: {', '.join(DEFAULTS[name])}"]
        if isinstance(default, bool):
            if not isinstance(value, bool):
                return [f"{name}.{key}: expected true or false, got {value!r}"]
        elif not is_real(value) or value != value:
            return [f"{name}.{key}: expected a number, got {value!r}"]
        elif isinstance(default, int) and not float(value).is_integer():
            return [f"{name}.{key}: expected an integer, got {value!r}"]
        self.values[name][key] = type(default)(value)
        return []

    @classmethod
    def load(cls, path: str | Path) -> Thresholds:
        import yaml

        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            raise ThresholdError(f"{path}: cannot read thresholds: {error}") from None
        return cls(data or {}, source=str(path))

    def of(self, name: str) -> dict[str, Any]:
        """A detector's thresholds, with those it reads from another detector's section."""
        borrowed = BORROWED.get(name)
        if not borrowed:
            return self.values[name]
        return self.values[name] | {key: self.values[home][own] for key, (home, own) in borrowed.items()}

    def enabled(self, name: str) -> bool:
        return bool(self.values.get(name, {}).get("enabled", True))

    def known_verdicts(self) -> tuple[str, ...]:
        return tuple(DEFAULTS)
