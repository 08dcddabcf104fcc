"""Trivial jobs the backend conformance tests inject in place of a training (see
``sweeps.backends._base.JOB``); imported by the backends' worker processes."""

from __future__ import annotations

import os
import time
from typing import Any

from sweeps.trial import TrialConfig, TrialResult


def job(config: TrialConfig, reporter: Any) -> TrialResult:
    """``config.hyperparams``: ``updates`` metric reports ``sleep`` seconds apart, then ``end``:
    "finish" (a result), "raise" (a ValueError) or "exit" (the worker process dies)."""
    plan = config.hyperparams
    for step in range(1, int(plan.get("updates", 3)) + 1):
        reporter.metrics(step, {"update": float(step)})
        time.sleep(float(plan.get("sleep", 0.01)))
    end = plan.get("end", "finish")
    if end == "raise":
        raise ValueError(f"job {config.key} raised on purpose")
    if end == "exit":
        os._exit(3)
    steps = int(plan.get("updates", 3))
    return TrialResult(float(steps), 0.0, [float(steps)], steps, 0.01 * steps, 0.0)


def config(trial: int, **plan: Any) -> TrialConfig:
    return TrialConfig(
        sweep="contract",
        trial=trial,
        seed=0,
        algo="PPO",
        policy="MlpPolicy",
        env={},
        hyperparams=plan,
        total_timesteps=1,
    )
