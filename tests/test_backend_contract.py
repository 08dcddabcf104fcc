"""The backend contract, run by every backend through one parametrised fixture (as Optuna tests
its storages): each backend really started (worker processes; a local Ray instance), running the
trivial jobs of tests/backend_jobs.py instead of trainings."""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import count

import pytest

from sweeps.backends import Backend, Cancelled, Event, Failure, Metrics
from sweeps.backends._base import TERMINAL
from sweeps.trial import TrialResult
from tests.backend_jobs import JOB, config, until_ended
from tests.helpers import descendants

_trials = count(1)


def _make(kind: str, slots: int = 2) -> Backend:
    if kind == "local":
        from sweeps.backends._local import LocalBackend

        return LocalBackend(slots, job=JOB)
    pytest.importorskip("ray")
    from sweeps.backends._ray import RayBackend, RaySettings

    return RayBackend(RaySettings(cpu=1.0, job=JOB), limit=slots)


@pytest.fixture(scope="module", params=["local", "ray"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    be = _make(request.param)
    yield be
    be.close()


def _kinds(events: list[Event]) -> list[str]:
    return [e.kind for e in events]


def test_events_come_in_order_started_metrics_finished(backend: Backend) -> None:
    job = config(next(_trials), updates=3)
    backend.submit(job)
    events = until_ended(backend, {job.key})[job.key]
    kinds = _kinds(events)
    assert kinds[0] == "started" and kinds[-1] == "finished" and kinds.count("finished") == 1, kinds
    assert set(kinds[1:-1]) == {"metrics"}
    steps = [e.payload.step for e in events if isinstance(e.payload, Metrics)]
    assert steps == sorted(steps) and steps[-1] == 3  # each report arrives, in order, before the end
    assert isinstance(events[-1].payload, TrialResult) and events[-1].payload.mean_return == 3.0


def test_a_job_that_raises_fails_with_its_error(backend: Backend) -> None:
    job = config(next(_trials), updates=1, end="raise")
    backend.submit(job)
    events = until_ended(backend, {job.key})[job.key]
    assert _kinds(events).count("failed") == 1 and events[-1].kind == "failed"
    payload = events[-1].payload
    assert isinstance(payload, Failure) and not payload.worker_died
    assert payload.type == "ValueError" and "raised on purpose" in payload.message
    assert "ValueError" in payload.traceback


def test_a_killed_worker_is_worker_died_and_the_backend_goes_on(backend: Backend) -> None:
    job = config(next(_trials), updates=1, end="exit")
    backend.submit(job)
    events = until_ended(backend, {job.key})[job.key]
    assert [e.kind for e in events if e.kind in TERMINAL] == ["failed"]
    assert isinstance(events[-1].payload, Failure) and events[-1].payload.worker_died
    after = config(next(_trials), updates=1)
    backend.submit(after)
    assert _kinds(until_ended(backend, {after.key})[after.key])[-1] == "finished"


def test_cancelling_a_running_and_a_just_submitted_job_ends_each_once_with_the_reason(backend: Backend) -> None:
    running = config(next(_trials), updates=2000, sleep=0.02)  # ~40 s unless stopped
    backend.submit(running)
    deadline = time.monotonic() + 120
    seen: list[Event] = []
    while not any(e.kind == "metrics" for e in seen) and time.monotonic() < deadline:
        seen += [e for e in backend.poll(0.2) if e.key == running.key]
    assert any(e.kind == "metrics" for e in seen), seen
    queued = config(next(_trials), updates=2000, sleep=0.02)
    backend.submit(queued)
    backend.cancel([running.key, queued.key], "doomed by a sibling seed")
    events = until_ended(backend, {running.key, queued.key})
    # stopped, not run to the end: the job's own reports say how far it got, whatever the clock
    reached = max(e.payload.step for e in seen + events[running.key] if e.kind == "metrics")
    assert reached < 2000, reached
    for key, evs in events.items():
        terminal = [e for e in evs if e.kind in TERMINAL]
        assert [e.kind for e in terminal] == ["cancelled"], (key, _kinds(evs))
        assert terminal[0].payload == Cancelled("doomed by a sibling seed")


def test_poll_waits_at_most_its_timeout(backend: Backend) -> None:
    started = time.monotonic()
    assert backend.poll(0.3) == []
    assert 0.25 <= time.monotonic() - started < 3
    started = time.monotonic()
    assert backend.poll(0) == [] and time.monotonic() - started < 1


@pytest.mark.parametrize("kind", ["local", pytest.param("ray", marks=pytest.mark.slow)])  # its own Ray instance
def test_the_worker_of_a_stopped_job_runs_the_next_job(kind: str) -> None:
    """One slot: a job stopped mid-run frees its worker (on Ray, its actor, with torch and SB3
    already imported) for the next job, even though the stopped job reports again from its
    clean-up, as a training's last metric flush does."""
    be = _make(kind, slots=1)
    try:
        stopped = config(next(_trials), updates=2000, sleep=0.02, flush_in_finally=True)
        be.submit(stopped)
        deadline, seen = time.monotonic() + 120, []
        while not any(e.kind == "metrics" for e in seen) and time.monotonic() < deadline:
            seen += [e for e in be.poll(0.2) if e.key == stopped.key]
        assert any(e.kind == "metrics" for e in seen), seen
        be.cancel([stopped.key], "doomed by a sibling seed")
        ended = seen + until_ended(be, {stopped.key}, timeout=60)[stopped.key]
        assert [e.kind for e in ended if e.kind in TERMINAL] == ["cancelled"]
        after = config(next(_trials), updates=2)  # submitted once the slot is free, as the driver does
        be.submit(after)
        events = until_ended(be, {after.key}, timeout=60)[after.key]
        assert _kinds(events)[-1] == "finished"
        pids = [next(e.payload.pid for e in evs if e.kind == "started") for evs in (ended, events)]
        assert pids[0] == pids[1]  # the same worker process ran both
    finally:
        be.close()


@pytest.mark.parametrize("kind", ["local", "ray"])
def test_close_is_idempotent_and_abandons_a_running_job(kind: str) -> None:
    be = _make(kind)
    job = config(next(_trials), updates=2000, sleep=0.02)
    be.submit(job)
    deadline, started = time.monotonic() + 120, []
    while not started and time.monotonic() < deadline:
        started = [e for e in be.poll(0.2) if e.key == job.key and e.kind == "started"]
    assert started, "the job never started"
    be.close()
    be.close()
    if kind == "local":  # its worker processes are ours: the one running the job is gone
        pid = started[0].payload.pid
        deadline = time.monotonic() + 10
        while pid in descendants() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert pid not in descendants()


@pytest.mark.parametrize("reaped_here", [False, True], ids=["by_multiprocessing", "by_another_waitpid"])
def test_a_local_worker_that_dies_idle_is_reported_on_its_next_job_and_poll_still_waits(reaped_here) -> None:
    """A worker killed between jobs: polling waits its timeout as before (its closed pipe is not read
    over and over), the next job given to it is WORKER_DIED, and the replacement runs the one after.
    Also when something else in the driver's process reaped the worker (a waitpid(-1), as
    ``tests.helpers.descendants`` does): multiprocessing then never sees it exit, its pipe does."""
    import os
    import signal

    from sweeps.backends._local import LocalBackend

    be = LocalBackend(1, job=JOB)
    try:
        first = config(next(_trials), updates=1)
        be.submit(first)
        events = until_ended(be, {first.key})[first.key]
        pid = next(e.payload.pid for e in events if e.kind == "started")
        os.kill(pid, signal.SIGKILL)
        if reaped_here:
            os.waitpid(pid, 0)
        deadline = time.monotonic() + 10
        while pid in descendants() and time.monotonic() < deadline:
            time.sleep(0.1)
        started = time.monotonic()
        assert be.poll(0.5) == [] and time.monotonic() - started >= 0.45
        doomed = config(next(_trials), updates=1)
        be.submit(doomed)
        ended = until_ended(be, {doomed.key}, timeout=30)[doomed.key]
        assert _kinds(ended) == ["failed"] and ended[0].payload.worker_died
        after = config(next(_trials), updates=1)
        be.submit(after)
        assert _kinds(until_ended(be, {after.key}, timeout=60)[after.key])[-1] == "finished"
    finally:
        be.close()


def test_local_workers_share_gpus_each_seeing_only_its_own() -> None:
    """backend.gpus [0, 1] with jobs_per_gpu 2: four workers, two told CUDA_VISIBLE_DEVICES=0 and two
    =1 (no GPU is needed to check that; gpu_slots, which refuses missing GPUs, is tested below)."""
    from sweeps.backends._local import LocalBackend

    be = LocalBackend(8, job=JOB, gpus=["0", "0", "1", "1"])
    try:
        assert be.capacity == 4
        jobs = [config(next(_trials), updates=2, sleep=0.5) for _ in range(4)]
        for job in jobs:
            be.submit(job)
        events = until_ended(be, {j.key for j in jobs})
        seen = sorted(e.payload.cuda_visible_devices for evs in events.values() for e in evs if e.kind == "started")
        assert seen == ["0", "0", "1", "1"]
    finally:
        be.close()


def test_a_gpu_that_is_not_there_is_refused_before_any_worker_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from sweeps.backends._local import gpu_slots
    from sweeps.errors import UsageError

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert gpu_slots([1, 0], 2) == ["6", "6", "4", "4"]  # ids as the driver sees them, mapped to its devices
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu_slots([1], 3) == ["1", "1", "1"]
    with pytest.raises(UsageError, match=r"backend.gpus: GPU 2 is not there \(torch sees 2 GPU\(s\): 0, 1\)"):
        gpu_slots([0, 2], 1)
