"""Keeping a backend busy: the one scheduling loop a sweep and ``export --confirm-seeds`` share."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sweeps.backends._base import TERMINAL, Backend, Event, Failure
from sweeps.trial import TrialConfig


@dataclass(frozen=True)
class Retried:
    """Not a backend event: the pool's word that ``failure`` (its worker died) was absorbed and
    the job queued again, first in line. ``tries``: why each of its attempts so far failed."""

    key: tuple[int, int]
    failure: Failure
    tries: tuple[str, ...]


@dataclass
class Pool:
    """Jobs waiting and in flight on ``backend``, never more in flight than its capacity.

    A job whose worker died (killed, out of memory, node lost) is run again, up to
    ``max_failures`` times, with the config it was submitted with; a job that raised is not: the
    same config and seed would raise again.
    """

    backend: Backend
    max_failures: int = 0
    queue: deque[TrialConfig] = field(default_factory=deque)
    in_flight: dict[tuple[int, int], TrialConfig] = field(default_factory=dict)
    tries: dict[tuple[int, int], list[str]] = field(default_factory=dict)  # job -> its earlier attempts' failures

    @property
    def busy(self) -> bool:
        return bool(self.queue) or bool(self.in_flight)

    def add(self, configs: Iterable[TrialConfig]) -> None:
        self.queue.extend(configs)

    def fill(self, more: Callable[[], bool] = lambda: False) -> None:
        """Submit queued jobs while slots are free; ``more()`` may queue jobs when none wait
        (a sweep opens its next trial only then) and says whether it did."""
        while len(self.in_flight) < self.backend.capacity:
            if not self.queue and not more():
                return
            config = self.queue.popleft()
            self.backend.submit(config)
            self.in_flight[config.key] = config

    def poll(self, timeout: float) -> list[Event | Retried]:
        """The backend's events, with each absorbed worker death as a :class:`Retried`."""
        out: list[Event | Retried] = []
        for event in self.backend.poll(timeout):
            if event.kind in TERMINAL:
                config = self.in_flight.pop(event.key, None)
                retried = self._retry(config, event.payload) if config is not None else None
                if retried is not None:
                    out.append(retried)
                    continue
            out.append(event)
        return out

    def _retry(self, config: TrialConfig, payload: object) -> Retried | None:
        tries = self.tries.setdefault(config.key, [])
        if not isinstance(payload, Failure) or not payload.worker_died or len(tries) >= self.max_failures:
            return None
        tries.append(payload.message)
        self.queue.appendleft(config)
        return Retried(config.key, payload, tuple(tries))

    def unqueue(self, trial: int) -> list[TrialConfig]:
        """Take the queued (not yet submitted) jobs of ``trial`` out of the queue."""
        dropped = [c for c in self.queue if c.trial == trial]
        for config in dropped:
            self.queue.remove(config)
        return dropped

    def running(self, trial: int) -> list[tuple[int, int]]:
        return [k for k in self.in_flight if k[0] == trial]
