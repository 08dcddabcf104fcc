"""Where trials run. ``make(name, workers)`` is the only way the driver gets a backend."""
from __future__ import annotations

from sweeps.backends._base import Backend, Event

NAMES = ("local",)


def make(name: str, workers: int, warm_imports: tuple[str, ...] = ()) -> Backend:
    """``warm_imports``: modules each worker imports as soon as it starts (the algorithm's package)."""
    if name == "local":
        from sweeps.backends._local import LocalBackend

        return LocalBackend(workers, warm_imports)
    raise ValueError(f"backend '{name}' is not one of {', '.join(NAMES)}")


__all__ = ["Backend", "Event", "NAMES", "make"]
