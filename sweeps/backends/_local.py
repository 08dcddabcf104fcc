"""Local backend: long-lived worker processes, one job each at a time, one torch thread each.

Workers are spawned once and reused, so the ~2 s import of torch and SB3 is paid per worker,
not per trial. Each worker talks to the driver over a pipe of its own, so the driver always
knows which job a worker holds; a worker that dies (killed, segfault, OOM) is reported as a
failed job and replaced.

Pipes, not ``multiprocessing`` queues: a queue's locks are named semaphores that the resource
tracker (a helper process every spawning process starts) must be told about, down to the
interpreter's exit; with none of them, ``_reaper.stop_resource_tracker`` can end that helper before
the driver returns, and nothing it started outlives it, even by a moment.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import signal
import socket
import time
import traceback
from multiprocessing.connection import Connection, wait
from typing import Any

from sweeps.backends._base import JOB, WORKER_DIED, Backend, Event, Failure, failure, from_wire, load_job
from sweeps.backends._mps import Mps, MpsUnavailable
from sweeps.backends._reaper import die_with_parent
from sweeps.errors import UsageError
from sweeps.trial import MPS_PIPE_VAR, TrialConfig

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class Cancelled(Exception):
    """Raised inside a job's training when the driver cancelled it (see LocalBackend.cancel)."""


class _PipeReporter:
    """Sends a job's metrics to the driver; at each dump, ends the job if the driver cancelled it."""

    def __init__(self, conn: Connection, key: tuple[int, int], cancelled: Any) -> None:
        self.conn, self.key, self.cancelled = conn, key, cancelled

    def metrics(self, step: int, values: dict[str, float]) -> None:
        if tuple(self.cancelled[:]) == self.key:
            raise Cancelled()
        self.conn.send(("metrics", self.key, (int(step), values)))


def _worker_main(
    name: str,
    conn: Connection,
    warm_imports: tuple[str, ...],
    cancelled: Any,
    job: str = JOB,
    gpu: str | None = None,
    env: dict[str, str] | None = None,
) -> None:
    die_with_parent()
    if gpu is not None:  # before torch is imported: this worker sees its GPU only
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    os.environ.update(env or {})  # e.g. the sweep's CUDA MPS pipe, read when CUDA starts
    driver = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    for var in _THREAD_VARS:
        os.environ[var] = "1"
    run = load_job(job)
    for module in warm_imports:  # paid now, while the driver prepares its stores
        importlib.import_module(module)
    while True:
        try:
            if not conn.poll(5):
                if os.getppid() != driver:  # the driver is gone (where the kernel could not tell us)
                    return
                continue
            config = conn.recv()
        except (EOFError, OSError):  # the driver closed its end: it is gone or done with us
            return
        if config is None:
            return
        conn.send(
            (
                "started",
                config.key,
                {
                    "worker": name,
                    "node": socket.gethostname(),
                    "pid": os.getpid(),
                    "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                    "cuda_mps": bool(os.environ.get(MPS_PIPE_VAR)),
                },
            )
        )
        try:
            result = run(config, _PipeReporter(conn, config.key, cancelled))
        except Cancelled:
            conn.send(("cancelled", config.key, {}))
        except BaseException as exc:  # a trial may raise anything; the sweep goes on
            conn.send(("failed", config.key, failure(exc, traceback.format_exc())))
        else:
            conn.send(("finished", config.key, result.to_dict()))


def gpu_slots(gpus: list[int], jobs_per_gpu: int) -> list[str]:
    """One ``CUDA_VISIBLE_DEVICES`` value per worker: each GPU ``jobs_per_gpu`` times. GPU ids are
    CUDA's as the driver sees them (through its own ``CUDA_VISIBLE_DEVICES``, if set); a GPU that
    is not there is refused (exit 2) before any worker starts."""
    import torch

    count = torch.cuda.device_count()
    missing = [g for g in gpus if g >= count]
    if missing:
        seen = f"torch sees {count} GPU(s){': ' + ', '.join(map(str, range(count))) if count else ''}"
        raise UsageError(
            f"backend.gpus: GPU {', '.join(map(str, missing))} is not there ({seen}); name GPUs that exist, "
            "or drop backend.gpus to train on the CPU"
        )
    parent = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return [parent[g] if parent else str(g) for g in gpus for _ in range(jobs_per_gpu)]


class LocalBackend(Backend):
    name = "local"

    def __init__(
        self,
        workers: int,
        warm_imports: tuple[str, ...] = (),
        job: str = JOB,
        gpus: list[str] | None = None,
        mps: str = "off",
    ) -> None:
        """``gpus``: a ``CUDA_VISIBLE_DEVICES`` value per worker slot (see gpu_slots): at most that
        many workers, each seeing only its GPU. ``mps`` (with ``gpus``): ``auto`` starts a CUDA MPS
        daemon for the workers when two of them share a GPU, going on without it (and saying so in
        ``notes``) where it cannot start; ``on`` starts one whenever GPUs are given, and refuses to
        run without it (UsageError); ``off`` never does. See _mps."""
        if workers < 1:
            raise ValueError(f"`workers >= 1` must hold, but got workers={workers}")
        self._gpus = gpus
        self.capacity = min(workers, len(gpus)) if gpus else workers
        self.notes: list[str] = []
        self._mps = self._start_mps(mps, gpus[: self.capacity] if gpus else [])
        self._ctx = mp.get_context("spawn")
        self._workers: list[dict[str, Any]] = []
        self._serial = 0
        self._warm = tuple(warm_imports)
        self._job = job
        try:
            for slot in range(self.capacity):
                self._workers.append(self._spawn(slot))
        except BaseException:
            self.close()
            raise

    def _start_mps(self, mode: str, used: list[str]) -> Mps | None:
        shared = sorted({g for g in used if used.count(g) > 1})
        if mode == "off" or not used or (mode == "auto" and not shared):
            return None
        try:
            daemon = Mps.start()
        except MpsUnavailable as exc:
            if mode == "on":
                raise UsageError(
                    f"backend.mps: 'on', but no CUDA MPS daemon could be started: {exc}; "
                    "use 'auto' to share GPUs without it, or 'off'"
                ) from exc
            self.notes.append(
                f"GPU {', '.join(shared)} shared without CUDA MPS ({exc}): processes then take turns on "
                "the GPU, and small networks train well below what MPS allows (set backend.mps: off to "
                "silence this)"
            )
            return None
        self.notes.append(f"GPU {', '.join(sorted(set(used)))}: workers share through a CUDA MPS daemon of this sweep")
        return daemon

    def _spawn(self, slot: int) -> dict[str, Any]:
        self._serial += 1
        name = f"local-{self._serial}"
        conn, theirs = self._ctx.Pipe(duplex=True)
        cancelled = self._ctx.Array("q", [-1, -1], lock=False)  # the (trial, seed) the driver cancelled
        gpu = self._gpus[slot] if self._gpus else None
        proc = self._ctx.Process(
            target=_worker_main,
            args=(
                name,
                theirs,
                self._warm,
                cancelled,
                self._job,
                gpu,
                self._mps.env() if self._mps else None,
            ),
            name=name,
            daemon=True,
        )
        proc.start()
        theirs.close()  # the worker's end lives in the worker alone: its death reads as end of file here
        return {
            "name": name,
            "proc": proc,
            "conn": conn,
            "job": None,
            "cancelled": cancelled,
            "reason": "",
            "slot": slot,
        }

    def submit(self, config: TrialConfig) -> None:
        idle = next((w for w in self._workers if w["job"] is None), None)
        if idle is None:
            raise RuntimeError("no idle worker: the driver submitted beyond capacity")
        idle["job"] = config.key
        try:
            idle["conn"].send(config)
        except OSError:  # its worker died while idle: poll() reports the job as WORKER_DIED
            pass

    def cancel(self, keys: list[tuple[int, int]], reason: str) -> None:
        """The worker holding each job stops it at its next metrics dump (every update)."""
        for worker in self._workers:
            if worker["job"] in keys:
                worker["cancelled"][:] = list(worker["job"])
                worker["reason"] = reason

    def poll(self, timeout: float) -> list[Event]:
        events = self._drain(timeout)
        for i, worker in enumerate(self._workers):
            # A closed pipe means the worker has exited (its end lives in it alone, and _drain closes
            # ours at end of file, after every message it sent): enough on its own, since the process
            # may read as alive for good if something else in this process reaped it (waitpid(-1)).
            gone = worker["conn"].closed or not worker["proc"].is_alive()
            if worker["job"] is not None and gone:
                events += self._drain(0)  # messages it sent before dying come first
                if worker["job"] is None:
                    continue
                worker["proc"].join(timeout=1)  # for its exit code, where it is still ours to read
                code = worker["proc"].exitcode
                reason = f"worker process {worker['name']} died (exit code {code}"
                reason += f", signal {-code})" if code is not None and code < 0 else ")"
                events.append(Event(worker["job"], Failure(WORKER_DIED, reason)))
                worker["conn"].close()
                self._workers[i] = self._spawn(worker["slot"])
        return events

    def _drain(self, timeout: float) -> list[Event]:
        """Every message the workers have sent, waiting up to ``timeout`` seconds for the first."""
        events: list[Event] = []
        deadline = time.monotonic() + max(timeout, 0)
        while True:
            open_conns = [w["conn"] for w in self._workers if not w["conn"].closed]
            left = deadline - time.monotonic()
            if open_conns:
                ready = wait(open_conns, timeout=max(left, 0))
            else:  # every worker is dead and read to its end: nothing can come
                time.sleep(max(left, 0))
                ready = []
            for worker in [w for w in self._workers if w["conn"] in ready]:
                conn: Connection = worker["conn"]
                try:
                    while conn.poll():
                        kind, key, payload = conn.recv()
                        if kind in ("finished", "failed", "cancelled") and worker["job"] == tuple(key):
                            worker["job"] = None
                            if kind == "cancelled":
                                payload = {"reason": worker["reason"]}
                        events.append(from_wire(kind, key, payload))
                except (EOFError, OSError):  # it died; poll() reports its job once the process is gone
                    conn.close()
            if events or time.monotonic() >= deadline:
                return events

    def close(self) -> None:
        """Stop every worker now. Idle workers hold nothing; a busy one's job is abandoned."""
        for worker in self._workers:
            if worker["proc"].is_alive():
                worker["proc"].kill()
        for worker in self._workers:
            worker["proc"].join(timeout=5)
            worker["conn"].close()
        self._workers = []
        if self._mps is not None:  # after its clients: quitting ends the MPS server too
            self._mps.stop()
            self._mps = None
