"""Vectorised-env wrappers the knobs use (imports stable-baselines3: load lazily)."""

from __future__ import annotations

from typing import Any

from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper


class ScaleReward(VecEnvWrapper):
    """Multiplies rewards by ``scale``. Monitor wraps each env inside, so logged episode returns stay raw."""

    def __init__(self, venv: VecEnv, scale: float) -> None:
        super().__init__(venv)
        self.scale = float(scale)

    def reset(self) -> Any:
        return self.venv.reset()

    def step_wait(self) -> Any:
        obs, rewards, dones, infos = self.venv.step_wait()
        return obs, rewards * self.scale, dones, infos
