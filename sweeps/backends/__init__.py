"""Where trials run. ``make(...)`` is the only way the driver gets a backend."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sweeps.backends._base import Backend, Cancelled, Event, Failure, Metrics, Started
from sweeps.backends._pool import Pool, Retried

if TYPE_CHECKING:
    from sweeps.spec import BackendSpec

NAMES = ("local", "ray")


def make(
    settings: BackendSpec, workers: int, warm_imports: tuple[str, ...] = (), storage: Path | None = None
) -> Backend:
    """``workers``: the most jobs to run at once (local: exactly that many processes; ray: an upper
    bound on what the cluster's resources allow). ``warm_imports``: modules a worker imports as soon
    as it starts (the algorithm's package). ``storage``: the sweep's folder."""
    if settings.kind == "local":
        from sweeps.backends._local import LocalBackend, gpu_slots

        slots = gpu_slots(settings.gpus, settings.jobs_per_gpu) if settings.gpus else None
        return LocalBackend(workers, warm_imports, gpus=slots, mps=settings.mps)
    if settings.kind == "ray":
        from sweeps.backends._mps import ray_share_note
        from sweeps.backends._ray import RayBackend, RaySettings

        res = settings.resources_per_trial
        backend = RayBackend(
            RaySettings(
                address=settings.address,
                cpu=res.cpu,
                gpu=res.gpu,
                max_concurrent=settings.max_concurrent,
                storage=storage / "ray" if storage else None,
            ),
            limit=workers,
        )
        backend.notes = [note] if (note := ray_share_note(res.gpu)) else []
        return backend
    raise ValueError(f"backend '{settings.kind}' is not one of {', '.join(NAMES)}")


__all__ = ["Backend", "Cancelled", "Event", "Failure", "Metrics", "NAMES", "Pool", "Retried", "Started", "make"]
