"""The backend contract: the driver submits seed jobs and polls events; nothing else crosses."""

from __future__ import annotations

import abc
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from sweeps.trial import TrialConfig

EventKind = Literal["started", "metrics", "finished", "failed", "cancelled"]


@dataclass(frozen=True)
class Event:
    """What a backend tells the driver about one job ``key = (trial, seed)``.

    ``payload``: ``started`` -> {"worker": str}; ``metrics`` -> (step, {name: value});
    ``finished`` -> TrialResult as a dict; ``failed`` -> {"type", "message", "traceback"};
    ``cancelled`` -> {"reason"} (a job the driver cancelled, stopped before it finished).
    """

    kind: EventKind
    key: tuple[int, int]
    payload: Any = None


class Backend(abc.ABC):
    """Runs :func:`sweeps.trial.run` for submitted configs somewhere, reporting :class:`Event` s.

    ``capacity`` is how many jobs may be in flight at once; the driver never submits more.
    """

    name: str = "base"
    capacity: int = 1

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
    return {"type": type(exc).__name__, "message": str(exc)[:2000], "traceback": tb[-20000:]}
