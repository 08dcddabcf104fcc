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

import math
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np


class SpikyTargets(gym.Env):
    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        reward_scale: float = 1.0,
        precision_weight: float = 1.0,
        spike_prob: float = 0.0,
        spike: float = 50.0,
        episode_steps: int = 50,
    ) -> None:
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


# --- Wrappers and small envs for the labelled failure corpus (conf/corpus) ---------------------


class _BrokenAfter(gym.Wrapper):
    """From env step ``after`` on (counted over the wrapper's life), :meth:`broken` replaces each
    step's observation and reward: a sensor that fails part-way through a run."""

    def __init__(self, env: gym.Env, after: int = 5000) -> None:
        super().__init__(env)
        self.after, self._steps = int(after), 0

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._steps += 1
        if self._steps >= self.after:
            obs, reward = self.broken(obs, reward)
        return obs, reward, terminated, truncated, info

    def broken(self, obs: Any, reward: float) -> tuple[Any, float]:
        raise NotImplementedError


class NanObservationsAfter(_BrokenAfter):
    """From env step ``after`` on, every observation is NaN: a broken sensor or a division by zero
    in a custom env."""

    def broken(self, obs: Any, reward: float) -> tuple[Any, float]:
        return _nan_like(obs), reward


class NanRewardsAfter(_BrokenAfter):
    """From env step ``after`` on, every reward is NaN: a broken reward sensor, or a reward computed
    from a division by zero."""

    def broken(self, obs: Any, reward: float) -> tuple[Any, float]:
        return obs, math.nan


def _nan_like(obs: Any) -> Any:
    """An observation of the same structure with every float entry NaN (a Dict observation's
    float parts each; integer parts cannot hold a NaN and stay as they are)."""
    if isinstance(obs, dict):
        return {key: _nan_like(value) for key, value in obs.items()}
    obs = np.asarray(obs)
    return np.full_like(obs, np.nan) if np.issubdtype(obs.dtype, np.floating) else obs


class OverrideActions(gym.Wrapper):
    """With probability ``prob`` the env replaces the agent's action with ``action`` (a safety
    controller, a scripted phase) and says so in ``info[key]``."""

    def __init__(self, env: gym.Env, prob: float = 1.0, action: Any = 0, key: str = "intervened") -> None:
        super().__init__(env)
        self.prob, self.key = float(prob), key
        self.forced = np.asarray(action, dtype=env.action_space.dtype).reshape(env.action_space.shape)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        overridden = bool(self.np_random.random() < self.prob)
        obs, reward, terminated, truncated, info = self.env.step(self.forced if overridden else action)
        return obs, reward, terminated, truncated, {**info, self.key: overridden}


class NoisyReward(gym.Wrapper):
    """Adds zero-mean Gaussian noise of std ``std`` to every reward: high-variance returns."""

    def __init__(self, env: gym.Env, std: float = 1.0) -> None:
        super().__init__(env)
        self.std = float(std)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, float(reward) + self.std * float(self.np_random.normal()), terminated, truncated, info


class ScaledReward(gym.RewardWrapper):
    """Multiplies every reward by ``scale``: the same task paid in other units."""

    def __init__(self, env: gym.Env, scale: float = 1.0) -> None:
        super().__init__(env)
        self.scale = float(scale)

    def reward(self, reward: SupportsFloat) -> float:
        return float(reward) * self.scale


class ConstantReward(gym.Wrapper):
    """Pays ``value`` on every step and never terminates early (episodes last until the time
    limit): an env whose reward function was wired to a constant."""

    def __init__(self, env: gym.Env, value: float = 0.0) -> None:
        super().__init__(env)
        self.value = float(value)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, _, _, truncated, info = self.env.step(action)
        return obs, self.value, False, truncated, info


class DictObservation(gym.ObservationWrapper):
    """The observation as ``{"state": obs, "time": fraction of the episode left}`` (a Dict space)."""

    def __init__(self, env: gym.Env, horizon: int = 500) -> None:
        super().__init__(env)
        self.horizon, self._t = int(horizon), 0
        self.observation_space = gym.spaces.Dict(
            {"state": env.observation_space, "time": gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)}
        )

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        self._t = 0
        return super().reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self._t += 1
        return super().step(action)

    def observation(self, observation: Any) -> dict[str, np.ndarray]:
        left = max(0.0, 1.0 - self._t / self.horizon)
        return {"state": np.asarray(observation, dtype=np.float32), "time": np.array([left], dtype=np.float32)}


class SparseCorridor(gym.Env):
    """A corridor of ``length`` cells; the agent starts at the left end and is paid 1 only on
    reaching the right end (then the episode ends). A random walk reaches it now and then, so a
    learner first sees a reward some way into training: a sparse reward, found mid-run."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, length: int = 12, max_steps: int = 100) -> None:
        self.length, self.max_steps = int(length), int(max_steps)
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._pos = self._t = 0

    def _observe(self) -> np.ndarray:
        return np.array([self._pos / (self.length - 1), self._t / self.max_steps], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._pos = self._t = 0
        return self._observe(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._pos = min(self.length - 1, max(0, self._pos + (1 if int(action) == 1 else -1)))
        self._t += 1
        reached = self._pos == self.length - 1
        return self._observe(), float(reached), reached, self._t >= self.max_steps and not reached, {}


def make_sparse_corridor(**kwargs: Any) -> gym.Env:
    return SparseCorridor(**kwargs)
