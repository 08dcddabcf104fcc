"""Where trials run. ``make(name, workers)`` is the only way the driver gets a backend."""
from __future__ import annotations

from sweeps.backends._base import Backend, Event

NAMES = ("local",)


def make(name: str, workers: int) -> Backend:
    if name == "local":
        from sweeps.backends._local import LocalBackend

        return LocalBackend(workers)
    raise ValueError(f"backend '{name}' is not one of {', '.join(NAMES)}")


__all__ = ["Backend", "Event", "NAMES", "make"]
