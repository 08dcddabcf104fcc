"""Small environments and spec builders for the test suite (entry points name this module)."""
from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import gymnasium as gym

REPO = Path(__file__).resolve().parents[1]


class _Faulty(gym.Wrapper):
    """CartPole that fails on purpose after ``at_step`` steps: raises, or kills its own process."""

    def __init__(self, env: gym.Env, at_step: int | None, how: str) -> None:
        super().__init__(env)
        self.at_step, self.how, self.steps = at_step, how, 0

    def step(self, action: Any):
        self.steps += 1
        if self.at_step is not None and self.steps >= self.at_step:
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.how == "keyboard":
                raise KeyboardInterrupt
            if self.how == "oom":  # what torch raises when CUDA runs out of memory
                import torch

                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (simulated)")
            raise RuntimeError(f"env exploded at step {self.steps}")
        return self.env.step(action)


def faulty_cartpole(fail_at_step: int | None = None, how: str = "raise") -> gym.Env:
    return _Faulty(gym.make("CartPole-v1"), fail_at_step, how)


def tiny_spec(name: str = "tiny", **overrides: Any) -> dict[str, Any]:
    """A valid spec that trains in about a second per seed."""
    spec: dict[str, Any] = {
        "name": name,
        "env": {"id": "CartPole-v1", "n_envs": 2},
        "algo": "PPO",
        "total_timesteps": 512,
        "hyperparams": {"n_steps": 64, "batch_size": 64, "n_epochs": 2, "policy_kwargs": {"net_arch": [8]}},
        "space": {"learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-2}},
        "seeds": 2,
        "trials": 3,
        "sampler": {"kind": "random", "seed": 0},
        "objective": {"eval_episodes": 2},
    }
    for key, value in overrides.items():
        spec[key] = value
    return spec


def subprocess_env() -> dict[str, str]:
    """Environment for CLI subprocesses: the repo importable (for tests.helpers entry points)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "200"
    return env
