"""Small envs that reproduce reported failures (see ``conf/sweeps/repro_*.yaml``).

``SpikyTargets``: the shape of the report behind ``nan_scale`` (A2C, observation of shape (3,),
action Box of shape (4,)). The action space is unbounded, a common mistake, so nothing clips
the Gaussian's samples. Two action dimensions are paid for their magnitude, so a wider
Gaussian always scores higher: their log_std is pushed up without limit, and the rewards grow
and spike with it. The other two are paid for hitting a target from the observation exactly,
so their log_std is pushed down without limit. ``log_std.exp()`` ends as ``[inf, inf, 0, 0]``
unless log_std is bounded. The observation is the episode's two targets and the fraction of the
episode left, so a critic can predict the return (a critic facing pure noise would make every
run look like a stuck value loss).
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
        self._targets = np.zeros(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        self._targets = self.np_random.uniform(-0.5, 0.5, size=2)
        return self._observe(), {}

    def _observe(self) -> np.ndarray:
        left = 1.0 - self._t / self.episode_steps
        return np.array([2 * self._targets[0], 2 * self._targets[1], left], dtype=np.float32)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = np.asarray(action, dtype=np.float64)
        targets = self._targets
        reward = abs(a[0]) + abs(a[1]) - self.precision_weight * (abs(a[2] - targets[0]) + abs(a[3] - targets[1]))
        reward *= self.reward_scale
        if self.np_random.random() < self.spike_prob:
            reward += self.spike * self.reward_scale
        self._t += 1
        return self._observe(), float(reward), False, self._t >= self.episode_steps, {}


def make_spiky_targets(**kwargs: Any) -> gym.Env:
    return gym.wrappers.TimeLimit(SpikyTargets(**kwargs), max_episode_steps=kwargs.get("episode_steps", 50))
