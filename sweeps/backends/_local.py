"""Local backend: long-lived worker processes, one job each at a time, one torch thread each.

Workers are spawned once and reused, so the ~2 s import of torch and SB3 is paid per worker,
not per trial. Each worker has its own task queue, so the driver always knows which job a
worker holds; a worker that dies (killed, segfault, OOM) is reported as a failed job and
replaced.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import queue
import signal
import traceback
from typing import Any

from sweeps.backends._base import JOB, WORKER_DIED, Backend, Event, Failure, failure, from_wire, load_job
from sweeps.trial import TrialConfig

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class Cancelled(Exception):
    """Raised inside a job's training when the driver cancelled it (see LocalBackend.cancel)."""


class _QueueReporter:
    """Sends a job's metrics to the driver; at each dump, ends the job if the driver cancelled it."""

    def __init__(self, results: Any, key: tuple[int, int], cancelled: Any) -> None:
        self.results, self.key, self.cancelled = results, key, cancelled

    def metrics(self, step: int, values: dict[str, float]) -> None:
        if tuple(self.cancelled[:]) == self.key:
            raise Cancelled()
        self.results.put(("metrics", self.key, (int(step), values)))


def _die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this worker when the driver dies (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _worker_main(
    name: str, tasks: Any, results: Any, warm_imports: tuple[str, ...], cancelled: Any, job: str = JOB
) -> None:
    _die_with_parent()
    driver = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    for var in _THREAD_VARS:
        os.environ[var] = "1"
    run = load_job(job)
    for module in warm_imports:  # paid now, while the driver prepares its stores
        importlib.import_module(module)
    while True:
        try:
            config = tasks.get(timeout=5)
        except queue.Empty:
            if os.getppid() != driver:  # the driver is gone (where the kernel could not tell us)
                return
            continue
        if config is None:
            return
        results.put(("started", config.key, {"worker": name, "pid": os.getpid()}))
        try:
            result = run(config, _QueueReporter(results, config.key, cancelled))
        except Cancelled:
            results.put(("cancelled", config.key, {}))
        except BaseException as exc:  # a trial may raise anything; the sweep goes on
            results.put(("failed", config.key, failure(exc, traceback.format_exc())))
        else:
            results.put(("finished", config.key, result.to_dict()))


class LocalBackend(Backend):
    name = "local"

    def __init__(self, workers: int, warm_imports: tuple[str, ...] = (), job: str = JOB) -> None:
        if workers < 1:
            raise ValueError(f"`workers >= 1` must hold, but got workers={workers}")
        self.capacity = workers
        self._ctx = mp.get_context("spawn")
        self._results = self._ctx.Queue()
        self._workers: list[dict[str, Any]] = []
        self._serial = 0
        self._warm = tuple(warm_imports)
        self._job = job
        for _ in range(workers):
            self._workers.append(self._spawn())

    def _spawn(self) -> dict[str, Any]:
        self._serial += 1
        name = f"local-{self._serial}"
        tasks = self._ctx.Queue()
        cancelled = self._ctx.Array("q", [-1, -1], lock=False)  # the (trial, seed) the driver cancelled
        proc = self._ctx.Process(
            target=_worker_main,
            args=(name, tasks, self._results, self._warm, cancelled, self._job),
            name=name,
            daemon=True,
        )
        proc.start()
        return {"name": name, "proc": proc, "tasks": tasks, "job": None, "cancelled": cancelled, "reason": ""}

    def submit(self, config: TrialConfig) -> None:
        idle = next((w for w in self._workers if w["job"] is None), None)
        if idle is None:
            raise RuntimeError("no idle worker: the driver submitted beyond capacity")
        idle["job"] = config.key
        idle["tasks"].put(config)

    def cancel(self, keys: list[tuple[int, int]], reason: str) -> None:
        """The worker holding each job stops it at its next metrics dump (every update)."""
        for worker in self._workers:
            if worker["job"] in keys:
                worker["cancelled"][:] = list(worker["job"])
                worker["reason"] = reason

    def poll(self, timeout: float) -> list[Event]:
        events = self._drain(timeout)
        for i, worker in enumerate(self._workers):
            if worker["job"] is not None and not worker["proc"].is_alive():
                events += self._drain(0)  # messages it sent before dying come first
                if worker["job"] is None:
                    continue
                code = worker["proc"].exitcode
                reason = f"worker process {worker['name']} died (exit code {code}"
                reason += f", signal {-code})" if code is not None and code < 0 else ")"
                events.append(Event(worker["job"], Failure(WORKER_DIED, reason)))
                self._workers[i] = self._spawn()
        return events

    def _drain(self, timeout: float) -> list[Event]:
        events: list[Event] = []
        try:
            message = self._results.get(timeout=timeout) if timeout > 0 else self._results.get_nowait()
            while True:
                kind, key, payload = message
                if kind in ("finished", "failed", "cancelled"):
                    for worker in self._workers:
                        if worker["job"] == tuple(key):
                            worker["job"] = None
                            if kind == "cancelled":
                                payload = {"reason": worker["reason"]}
                events.append(from_wire(kind, key, payload))
                message = self._results.get_nowait()
        except queue.Empty:
            pass
        return events

    def close(self) -> None:
        """Stop every worker now. Idle workers hold nothing; a busy one's job is abandoned."""
        for worker in self._workers:
            if worker["proc"].is_alive():
                worker["proc"].kill()
        for worker in self._workers:
            worker["proc"].join(timeout=5)
        self._workers = []
