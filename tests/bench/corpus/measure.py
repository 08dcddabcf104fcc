"""Privileged measurements for labelling corpus runs. The detectors never see any of these.

They look at the policy and the critic directly, as networks, on data the training run never
produced:

* policy snapshots: the action distribution on a fixed set of probe states (collected once per
  run by a uniform-random policy on a separately seeded env), taken before training and at every
  5% of the budget. KL between snapshots says how much the policy really changed; its entropy
  says how deterministic it became.
* critic fit: fresh rollouts of the current policy on a separately seeded env; the critic's
  predictions against the discounted returns actually obtained (bootstrapped only where an
  episode is cut by a time limit), in the critic's own reward units, compared with the best
  constant predictor (R^2).
* returns of the policy on fresh episodes, and the raw reward spread seen there.
* parameter norms (for updates that blow the weights up) and finiteness.

Label rules that use these numbers live in ``conf/corpus/README.md`` and ``labels.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PROBES = 256


@dataclass
class Snapshot:
    step: int
    kind: str  # "categorical" | "normal"
    probs: list[np.ndarray] = field(default_factory=list)  # categorical heads, each [N, A]
    mean: np.ndarray | None = None  # normal: [N, D]
    std: np.ndarray | None = None
    param_norm: float = math.nan
    params_finite: bool = True

    def finite(self) -> bool:
        arrays = self.probs if self.kind == "categorical" else [self.mean, self.std]
        return self.params_finite and all(a is not None and np.all(np.isfinite(a)) for a in arrays)


def kl(p: Snapshot, q: Snapshot) -> float:
    """Mean over probe states of KL(p || q) (summed over action heads / dimensions)."""
    if not (p.finite() and q.finite()):
        return math.inf
    if p.kind == "categorical":
        total = 0.0
        for a, b in zip(p.probs, q.probs, strict=False):
            a, b = np.clip(a, 1e-12, 1.0), np.clip(b, 1e-12, 1.0)
            total += float(np.mean(np.sum(a * (np.log(a) - np.log(b)), axis=-1)))
        return total
    sp, sq = np.maximum(p.std, 1e-30), np.maximum(q.std, 1e-30)
    value = np.log(sq / sp) + (sp**2 + (p.mean - q.mean) ** 2) / (2 * sq**2) - 0.5
    return float(np.mean(np.sum(value, axis=-1)))


def determinism(s: Snapshot) -> float:
    """Categorical: mean entropy over probes as a fraction of the uniform policy's (1 = uniform,
    0 = deterministic). Normal: the mean std over probes and dimensions."""
    if not s.finite():
        return math.nan
    if s.kind == "categorical":
        ent = sum(
            float(np.mean(-np.sum(np.clip(a, 1e-12, 1) * np.log(np.clip(a, 1e-12, 1)), axis=-1))) for a in s.probs
        )
        top = sum(math.log(a.shape[-1]) for a in s.probs)
        return ent / top if top > 0 else math.nan
    return float(np.mean(s.std))


def critic_fit(
    values: np.ndarray, rewards: np.ndarray, ends: np.ndarray, cut_values: np.ndarray, gamma: float
) -> dict[str, float]:
    """R^2 and relative RMSE of the critic's predictions against discounted returns.

    ``ends[t]``: 0 = episode goes on, 1 = terminated after step t, 2 = cut (time limit or end of
    the measurement), in which case ``cut_values[t]`` (the critic at the next state) closes it.
    """
    targets = np.zeros(len(rewards))
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        if ends[t] == 1:
            running = 0.0
        elif ends[t] == 2:
            running = float(cut_values[t])
        running = float(rewards[t]) + gamma * running
        targets[t] = running
    ok = np.isfinite(values) & np.isfinite(targets)
    if ok.sum() < 10:
        return {"r2": math.nan, "rel_rmse": math.nan, "target_std": math.nan, "target_rms": math.nan}
    v, g = values[ok], targets[ok]
    mse = float(np.mean((v - g) ** 2))
    var = float(np.var(g))
    rms = float(np.sqrt(np.mean(g**2)))
    return {
        "r2": 1.0 - mse / var if var > 0 else math.nan,
        "rel_rmse": math.sqrt(mse) / max(rms, 1e-12),
        "target_std": math.sqrt(var),
        "target_rms": rms,
    }


def rollout(
    policy_step: Callable[[np.ndarray, Any, bool], tuple[np.ndarray, float, Any]],
    env: Any,
    steps: int,
    normalize_obs: Callable[[np.ndarray], np.ndarray],
    normalize_reward: Callable[[np.ndarray], np.ndarray],
    gamma: float,
) -> dict[str, Any]:
    """Run ``policy_step(obs, state, episode_start) -> (action, value, state)`` on a one-env
    SB3 VecEnv for ``steps`` steps; critic fit, raw reward spread and finished episode returns."""
    obs = env.reset()
    state, start = None, True
    values, rewards, ends, cut_values, raw, returns = [], [], [], [], [], []
    for t in range(steps):
        action, value, state = policy_step(normalize_obs(obs), state, start)
        obs, reward, done, info = env.step(action)
        raw.append(float(reward[0]))
        rewards.append(float(normalize_reward(reward)[0]))
        values.append(value)
        start = bool(done[0])
        if done[0]:
            if "episode" in info[0]:
                returns.append(float(info[0]["episode"]["r"]))
            truncated = info[0].get("TimeLimit.truncated", False)
            if truncated and "terminal_observation" in info[0]:
                _, last, _ = policy_step(normalize_obs(_batch_of_one(info[0]["terminal_observation"])), state, False)
                ends.append(2)
                cut_values.append(last)
            else:
                ends.append(1)
                cut_values.append(0.0)
        elif t == steps - 1:
            _, last, _ = policy_step(normalize_obs(obs), state, False)
            ends.append(2)
            cut_values.append(last)
        else:
            ends.append(0)
            cut_values.append(0.0)
    fit = critic_fit(np.asarray(values), np.asarray(rewards), np.asarray(ends), np.asarray(cut_values), gamma)
    raw_arr = np.asarray(raw)
    return fit | {
        "raw_reward_std": float(np.std(raw_arr)) if np.all(np.isfinite(raw_arr)) else math.nan,
        "episode_returns": returns,
    }


def _batch_of_one(obs: Any) -> Any:
    """One env's observation as a batch of one, as the VecEnv returns them (a Dict observation
    is a dict of arrays: each gets the batch axis)."""
    if isinstance(obs, dict):
        return {key: np.asarray(value)[None] for key, value in obs.items()}
    return np.asarray(obs)[None]
