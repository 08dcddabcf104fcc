"""Small envs that reproduce reported failures (see ``conf/sweeps/repro_*.yaml``).

``SpikyTargets``: the shape of the report behind ``nan_scale`` (A2C, observation of shape (3,),
action Box of shape (4,)). The action space is unbounded, a common mistake, so nothing clips
the Gaussian's samples. Two action dimensions are paid for their magnitude, so a wider
Gaussian always scores higher: their log_std is pushed up without limit, and the rewards grow
and spike with it. The other two are paid for hitting a target from the observation exactly,
so their log_std is pushed down without limit. ``log_std.exp()`` ends as ``[inf, inf, 0, 0]``
unless log_std is bounded.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class SpikyTargets(gym.Env):
    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, reward_scale: float = 1.0, precision_weight: float = 1.0, spike_prob: float = 0.0,
                 spike: float = 50.0, episode_steps: int = 50) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
        big = float(np.finfo(np.float32).max)  # "unbounded": SB3 insists on finite bounds
        self.action_space = gym.spaces.Box(-big, big, shape=(4,), dtype=np.float32)
        self.precision_weight = precision_weight
        self.reward_scale, self.spike_prob, self.spike = reward_scale, spike_prob, spike
        self.episode_steps = episode_steps
        self._t = 0
        self._obs = np.zeros(3, dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        self._obs = self.np_random.uniform(-1, 1, size=3).astype(np.float32)
        return self._obs, {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = np.asarray(action, dtype=np.float64)
        targets = 0.5 * self._obs[:2]
        reward = abs(a[0]) + abs(a[1]) - self.precision_weight * (abs(a[2] - targets[0]) + abs(a[3] - targets[1]))
        reward *= self.reward_scale
        if self.np_random.random() < self.spike_prob:
            reward += self.spike * self.reward_scale
        self._t += 1
        self._obs = self.np_random.uniform(-1, 1, size=3).astype(np.float32)
        return self._obs, float(reward), False, self._t >= self.episode_steps, {}


def make_spiky_targets(**kwargs: Any) -> gym.Env:
    return gym.wrappers.TimeLimit(SpikyTargets(**kwargs), max_episode_steps=kwargs.get("episode_steps", 50))
