"""Trivial jobs the backend conformance tests inject in place of a training (see
``sweeps.backends._base.JOB``); imported by the backends' worker processes."""

from __future__ import annotations

import os
import time
from typing import Any

from sweeps.backends._base import TERMINAL, Backend, Event
from sweeps.trial import TrialConfig, TrialResult

JOB = "tests.backend_jobs:job"  # what the backend tests run in place of a training


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


def until_ended(be: Backend, keys: set[tuple[int, int]], timeout: float = 120) -> dict[tuple[int, int], list[Event]]:
    """Every event of ``keys`` until each has ended, and for a moment after (to see any extra)."""
    events: dict[tuple[int, int], list[Event]] = {k: [] for k in keys}
    deadline, quiet_until = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        for e in be.poll(0.2):
            if e.key in events:
                events[e.key].append(e)
        ended = all(any(e.kind in TERMINAL for e in evs) for evs in events.values())
        if ended and quiet_until is None:
            quiet_until = time.monotonic() + 2.0
        if quiet_until is not None and time.monotonic() > quiet_until:
            return events
    raise AssertionError(f"jobs did not end in {timeout} s: {events}")
