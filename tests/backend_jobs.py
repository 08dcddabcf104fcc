"""Trivial jobs the backend conformance tests inject in place of a training (see
``sweeps.backends._base.JOB``); imported by the backends' worker processes."""

from __future__ import annotations

import os
import time
from typing import Any

from sweeps.trial import TrialConfig, TrialResult


def job(config: TrialConfig, reporter: Any) -> TrialResult:
    """``config.hyperparams``: ``updates`` metric reports ``sleep`` seconds apart, then ``end``:
    "finish" (a result), "raise" (a ValueError) or "exit" (the worker process dies). With
    ``flush_in_finally``, the job reports once more however it ends, as a training's last metric
    flush does (``sweeps.trial``)."""
    plan = config.hyperparams
    step = 0
    try:
        for step in range(1, int(plan.get("updates", 3)) + 1):
            reporter.metrics(step, {"update": float(step)})
            time.sleep(float(plan.get("sleep", 0.01)))
    finally:
        if plan.get("flush_in_finally"):
            time.sleep(1.5)  # past the Ray reporter's batching interval, so this report is sent
            reporter.metrics(step, {"update": float(step)})
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
