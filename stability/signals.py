"""Canonical signal names, the adapters that map library key names onto them, and the history.

Detectors only ever see canonical names. A :class:`History` holds, per signal, the values of
every update in order, each with the environment step at which the update happened.

Canonical signals (per update unless noted):

==========================  ===============================================================
``pg_loss``                 policy loss (PPO ``policy_gradient_loss``, A2C ``policy_loss``)
``value_loss``              critic loss (SAC/TD3 ``critic_loss`` maps here too)
``approx_kl``               PPO's approximate KL between old and new policy
``clip_fraction``           fraction of samples whose ratio was clipped
``entropy``                 policy entropy (SB3 logs ``-entropy`` as ``entropy_loss``; negated)
``explained_variance``      1 - Var(returns - values) / Var(returns)
``std``                     mean action std (SB3 ``train/std``)
``log_std_min|max``         smallest / largest log_std over action dimensions
``loc_abs_max``             largest |mean action| in the rollout (Gaussian policies)
``grad_norm``               pre-clip gradient norm (mean over the update's optimizer steps);
                            ``grad_norm_max``, ``grad_norm_{actor,critic,log_std,shared}``
``params_finite``           1.0 if every parameter is finite after the update, else 0.0
``update_ratio``            ||theta_new - theta_old|| / ||theta_old|| over the policy's parameters
                            (the size of the update against the weights it changes)
``param_norm``              ||theta|| over the policy's parameters after the update (callback;
                            the context's ``param_norm_start`` is their norm when training began)
``adv_std``                 spread of the rollout's advantages (before any normalisation)
``return_std``              spread of the rollout's returns (critic targets)
``return_rms``              root mean square of those returns (their scale)
``critic_error``            RMS of the critic's error against the discounted returns of the
                            episodes finished since the last record, over their RMS (callback)
``critic_r2``               the share of those returns' variance the critic explains (callback)
``reward_mean|std``         raw per-step reward of the rollout (before VecNormalize)
``reward_norm_std``         per-step reward as the algorithm saw it (after VecNormalize / scaling)
``reward_distinct``         number of distinct raw reward values in the rollout
``override_fraction``       fraction of steps whose ``info`` says the env overrode the action
``ep_return``               mean episodic return reported by the run
``ep_return_recent``        mean return of the episodes ended since the last record (callback);
                            SB3's ep_return is over the last 100 episodes and lags the policy
                            by as many (most of a run of 1000-step episodes)
``ep_length``               mean episode length reported by the run
``learning_rate``           current learning rate
==========================  ===============================================================
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

CANONICAL = (
    "pg_loss",
    "value_loss",
    "approx_kl",
    "clip_fraction",
    "entropy",
    "explained_variance",
    "std",
    "log_std_min",
    "log_std_max",
    "loc_abs_max",
    "grad_norm",
    "grad_norm_max",
    "grad_norm_actor",
    "grad_norm_critic",
    "grad_norm_log_std",
    "grad_norm_shared",
    "grad_clipped_fraction",
    "params_finite",
    "update_ratio",
    "param_norm",
    "loss",
    "adv_std",
    "return_std",
    "return_rms",
    "critic_error",
    "critic_r2",
    "reward_mean",
    "reward_std",
    "reward_norm_std",
    "reward_distinct",
    "override_fraction",
    "ep_return",
    "ep_return_recent",
    "ep_length",
    "learning_rate",
    "clip_range",
)

# stable-baselines3 / sb3-contrib logger keys -> (canonical name, sign)
SB3_KEYS: dict[str, tuple[str, float]] = {
    "train/policy_gradient_loss": ("pg_loss", 1.0),
    "train/policy_loss": ("pg_loss", 1.0),  # A2C (unnormalised advantages: far from 0)
    "train/actor_loss": ("pg_loss", 1.0),  # SAC, TD3, TQC
    "train/value_loss": ("value_loss", 1.0),
    "train/critic_loss": ("value_loss", 1.0),  # SAC, TD3, TQC
    "train/approx_kl": ("approx_kl", 1.0),
    "train/clip_fraction": ("clip_fraction", 1.0),
    "train/entropy_loss": ("entropy", -1.0),  # SB3 logs -entropy
    "train/explained_variance": ("explained_variance", 1.0),
    "train/std": ("std", 1.0),
    "train/loss": ("loss", 1.0),
    "train/learning_rate": ("learning_rate", 1.0),
    "train/clip_range": ("clip_range", 1.0),
    "train/grad_norm": ("grad_norm", 1.0),
    "train/grad_norm_max": ("grad_norm_max", 1.0),
    "train/grad_norm_actor": ("grad_norm_actor", 1.0),
    "train/grad_norm_critic": ("grad_norm_critic", 1.0),
    "train/grad_norm_log_std": ("grad_norm_log_std", 1.0),
    "train/grad_norm_shared": ("grad_norm_shared", 1.0),
    "train/grad_clipped_fraction": ("grad_clipped_fraction", 1.0),
    "rollout/ep_rew_mean": ("ep_return", 1.0),
    "rollout/ep_len_mean": ("ep_length", 1.0),
}

# CleanRL's PPO scripts (SummaryWriter tags) -> (canonical name, sign)
CLEANRL_KEYS: dict[str, tuple[str, float]] = {
    "losses/policy_loss": ("pg_loss", 1.0),
    "losses/value_loss": ("value_loss", 1.0),
    "losses/approx_kl": ("approx_kl", 1.0),
    "losses/clipfrac": ("clip_fraction", 1.0),
    "losses/entropy": ("entropy", 1.0),  # CleanRL logs +entropy
    "losses/explained_variance": ("explained_variance", 1.0),
    "losses/grad_norm": ("grad_norm", 1.0),
    "charts/episodic_return": ("ep_return", 1.0),
    "charts/episodic_length": ("ep_length", 1.0),
    "charts/learning_rate": ("learning_rate", 1.0),
}

# Names the StabilityCallback writes itself (``stability/NAME``) are canonical already.
PREFIX = "stability/"


def canonical_key(key: str) -> tuple[str, float] | None:
    """The canonical name (and sign) of a logged key, or None if it carries no known signal."""
    if key in SB3_KEYS:
        return SB3_KEYS[key]
    if key in CLEANRL_KEYS:
        return CLEANRL_KEYS[key]
    if key.startswith(PREFIX) and key[len(PREFIX) :] in CANONICAL:
        return key[len(PREFIX) :], 1.0
    return None


@dataclass
class History:
    """Per-update signal values. ``steps[i]`` is the env step of update ``i``. Each signal keeps
    the update indices it was logged on and its values (two parallel lists), so signals logged
    on different updates stay aligned.

    ``context`` holds facts about the run that do not change per update (algorithm, weight
    decay, whether rewards are normalised, ...); ``error`` the text of a crash, if any.
    """

    steps: list[int] = field(default_factory=list)
    series: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    total_steps: int | None = None  # the planned budget, when known

    def add(self, step: int, values: Mapping[str, float]) -> None:
        """Append one update: ``values`` maps canonical names to numbers (non-finite kept)."""
        index = len(self.steps)
        self.steps.append(int(step))
        for name, value in values.items():
            indices, numbers = self.series.setdefault(name, ([], []))
            indices.append(index)
            numbers.append(float(value))

    def __len__(self) -> int:
        return len(self.steps)

    def has(self, name: str) -> bool:
        return name in self.series and bool(self.series[name][0])

    def values(self, name: str, last: int | None = None) -> list[float]:
        """The signal's values, optionally only those from the last ``last`` updates."""
        if name not in self.series:
            return []
        indices, numbers = self.series[name]
        if last is None:
            return list(numbers)
        return numbers[bisect.bisect_left(indices, len(self.steps) - last) :]

    def before(self, name: str, index: int) -> list[float]:
        """The signal's values from updates before ``index``."""
        if name not in self.series:
            return []
        indices, numbers = self.series[name]
        return numbers[: bisect.bisect_left(indices, index)]

    def indexed(self, name: str) -> list[tuple[int, float]]:
        """``(update_index, value)`` pairs of one signal."""
        return list(zip(*self.series[name], strict=False)) if name in self.series else []

    def arrays(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Update indices and values of one signal as numpy arrays (for vectorised rules)."""
        if name not in self.series:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        indices, numbers = self.series[name]
        return np.asarray(indices, dtype=np.int64), np.asarray(numbers, dtype=np.float64)

    def points(self, name: str) -> list[tuple[int, float]]:
        """``(env_step, value)`` pairs of one signal."""
        return [(self.steps[i], v) for i, v in self.indexed(name)]

    def step_of(self, index: int) -> int:
        return self.steps[min(max(index, 0), len(self.steps) - 1)] if self.steps else 0

    @property
    def last_step(self) -> int:
        return self.steps[-1] if self.steps else 0

    @classmethod
    def from_scalars(
        cls,
        scalars: Mapping[str, Iterable[tuple[int, float]]],
        context: Mapping[str, Any] | None = None,
        error: str | None = None,
    ) -> History:
        """Build a history from logged scalars keyed by their library names (SB3, CleanRL or
        ``stability/*``), each a sequence of ``(step, value)``. Values logged at the same step
        form one update; unknown keys are ignored."""
        by_step: dict[int, dict[str, float]] = {}
        episodic: list[tuple[int, float, str]] = []
        for key, points in scalars.items():
            known = canonical_key(key)
            if known is None:
                continue
            name, sign = known
            for step, value in points:
                value = sign * float(value) if math.isfinite(value) else float(value)
                if name in ("ep_return", "ep_length"):
                    episodic.append((int(step), value, name))
                    continue
                slot = by_step.setdefault(int(step), {})
                if name not in slot or key.startswith(PREFIX):  # the callback's own value wins
                    slot[name] = value
        history = cls(context=dict(context or {}), error=error)
        steps = sorted(by_step)
        if not steps:  # only returns were logged: one update per logged return
            steps = sorted({s for s, _, name in episodic if name == "ep_return"})
            by_step = {s: {} for s in steps}
        # Episodic returns are logged when episodes end, not per update: each joins the first
        # update at or after its step (the mean if several), so updates are counted right.
        episodes: dict[tuple[int, str], list[float]] = {}
        for step, value, name in episodic:
            if steps:
                at = steps[min(bisect.bisect_left(steps, step), len(steps) - 1)]
                episodes.setdefault((at, name), []).append(value)
        for step in steps:
            values = by_step[step]
            for name in ("ep_return", "ep_length"):
                if (step, name) in episodes:
                    values[name] = sum(episodes[(step, name)]) / len(episodes[(step, name)])
            history.add(step, values)
        return history

    def prefix(self, n: int) -> History:
        """The history as it stood after its first ``n`` updates (same context and budget)."""
        series = {}
        for name, (indices, numbers) in self.series.items():
            cut = bisect.bisect_left(indices, n)
            if cut:
                series[name] = (indices[:cut], numbers[:cut])
        return History(
            self.steps[:n], series, self.context, self.error if n >= len(self.steps) else None, self.total_steps
        )

    def regroup(self, min_steps: int) -> History:
        """Updates merged so that each record spans at least ``min_steps`` env steps, the way the
        StabilityCallback groups small updates: values averaged, maxima kept, finiteness ANDed."""
        if min_steps <= 1 or len(self.steps) < 2:
            return self
        out = History(context=dict(self.context), error=self.error, total_steps=self.total_steps)
        group: dict[str, list[float]] = {}
        last = -1
        for i, step in enumerate(self.steps):
            for name, (indices, numbers) in self.series.items():
                j = bisect.bisect_left(indices, i)
                if j < len(indices) and indices[j] == i:
                    group.setdefault(name, []).append(numbers[j])
            if step - last >= min_steps or i == len(self.steps) - 1:
                out.add(step, {name: _merge(name, values) for name, values in group.items()})
                group, last = {}, step
        return out

    def to_scalars(self) -> dict[str, list[tuple[int, float]]]:
        return {f"{PREFIX}{name}": self.points(name) for name in self.series}


def _merge(name: str, values: list[float]) -> float:
    if name.endswith("_max") or name == "loc_abs_max":
        return max(values, key=lambda v: v if math.isfinite(v) else math.inf)
    if name.endswith("_min") or name == "params_finite":
        return min(values, key=lambda v: v if math.isfinite(v) else -math.inf)
    if name in ("ep_return", "ep_length"):
        return values[-1]
    if not all(math.isfinite(v) for v in values):
        return next(v for v in values if not math.isfinite(v))
    return sum(values) / len(values)


def group_steps(budget: int, on_policy: bool = True) -> int:
    """Env steps one recorded update spans at least: coarse enough to be cheap, fine enough for
    ~100 records a run (shared by the callback and by ``diagnose``, so both judge the same records)."""
    return max(1, min(256 if on_policy else 1000, budget // 100))
