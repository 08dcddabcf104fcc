"""The backend contract: the driver submits seed jobs and polls events; nothing else crosses."""

from __future__ import annotations

import abc
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sweeps.trial import TrialConfig, TrialResult

EventKind = Literal["started", "metrics", "finished", "failed", "cancelled"]
TERMINAL: tuple[EventKind, ...] = ("finished", "failed", "cancelled")  # a job's last event
WORKER_DIED = "WorkerDied"  # Failure.type when the process running a job died, not the job


@dataclass(frozen=True)
class Started:
    """A worker took the job. ``worker`` names it (``local-2``, ``ray:NODE_IP:PID``)."""

    worker: str
    node: str = ""  # where: the hostname (local) or the Ray node, as IP/node id
    pid: int | None = None
    device: str | None = None  # Ray: the torch device the job was given
    gpu_ids: tuple[str, ...] = ()  # Ray: the GPUs it was given
    cuda_visible_devices: str | None = None
    cuda_mps: bool = False  # local: the worker was told of the sweep's CUDA MPS daemon


@dataclass(frozen=True)
class Metrics:
    """One logger dump of the training: the env step it was made at, and its values."""

    step: int
    values: dict[str, float]


@dataclass(frozen=True)
class Failure:
    """The job raised (``type`` is the exception's class name), or its worker died (``WorkerDied``)."""

    type: str
    message: str
    traceback: str = ""

    @property
    def worker_died(self) -> bool:
        return self.type == WORKER_DIED


@dataclass(frozen=True)
class Cancelled:
    """The driver cancelled the job and it stopped before finishing."""

    reason: str


Payload = Started | Metrics | TrialResult | Failure | Cancelled
_KINDS: dict[type, EventKind] = {
    Started: "started",
    Metrics: "metrics",
    TrialResult: "finished",
    Failure: "failed",
    Cancelled: "cancelled",
}


@dataclass(frozen=True)
class Event:
    """What a backend tells the driver about one job ``key = (trial, seed)``; ``kind`` follows
    from the payload's type."""

    key: tuple[int, int]
    payload: Payload

    @property
    def kind(self) -> EventKind:
        return _KINDS[type(self.payload)]


def from_wire(kind: str, key: tuple[int, int], raw: Any) -> Event:
    """An event from the plain form workers send across processes (dicts, a (step, values) pair)."""
    key = (int(key[0]), int(key[1]))
    if kind == "metrics":
        step, values = raw
        return Event(key, Metrics(int(step), values))
    if kind == "started":
        raw = dict(raw, gpu_ids=tuple(raw.get("gpu_ids", ())))
        return Event(key, Started(**raw))
    types: dict[str, type[TrialResult | Failure | Cancelled]] = {
        "finished": TrialResult,
        "failed": Failure,
        "cancelled": Cancelled,
    }
    if kind not in types:
        raise ValueError(f"unknown event kind {kind!r} for job {key}")
    return Event(key, types[kind](**raw))


class Backend(abc.ABC):
    """Runs :func:`sweeps.trial.run` for submitted configs somewhere, reporting :class:`Event` s.

    ``capacity`` is how many jobs may be in flight at once; the driver never submits more.
    """

    name: str = "base"
    capacity: int = 1
    notes: Sequence[str] = ()  # what the user should read as the sweep starts (GPUs shared without MPS, say)

    @abc.abstractmethod
    def submit(self, config: TrialConfig) -> None:
        """Start ``config`` as soon as a slot is free (the driver keeps within ``capacity``)."""

    @abc.abstractmethod
    def poll(self, timeout: float) -> list[Event]:
        """Events since the last call, waiting up to ``timeout`` seconds for the first one."""

    def cancel(self, keys: list[tuple[int, int]], reason: str) -> None:
        """Stop these submitted jobs early if the backend can (each then ends with a ``cancelled``
        event, or its usual one if it finished first). By default jobs run to their end; both
        backends here stop them (local: at the job's next update; Ray: at its next report)."""
        return None

    @abc.abstractmethod
    def close(self) -> None:
        """Stop every worker; jobs still running are abandoned (the driver marks them)."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# What a worker runs for each job: ``module:function`` taking (TrialConfig, reporter) and returning
# an object with ``to_dict()``. Always this in a sweep; the backend conformance tests inject a
# trivial job through the same seam.
JOB = "sweeps.trial:run"


def load_job(entry: str) -> Callable[..., Any]:
    module, _, name = entry.partition(":")
    return getattr(importlib.import_module(module), name)


def failure(exc: BaseException, tb: str) -> dict[str, str]:
    """The wire form of a :class:`Failure`."""
    return {"type": type(exc).__name__, "message": str(exc)[:2000], "traceback": tb[-20000:]}
