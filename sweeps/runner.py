"""``rlsweep run``: prepare the stores, start a backend, drive the sweep, print the results."""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from rich.console import Console

from sweeps._yaml import dump_yaml
from sweeps.driver import Progress
from sweeps.errors import UsageError
from sweeps.spec import SweepSpec


def _writable_dir(path: Path) -> None:
    """Create ``path`` and prove it writable now, before any trial starts."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_bytes(b"0" * 65536)
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"cannot write to {path}: {exc.strerror or exc}. Free some space or choose another "
                         f"'storage.dir' / 'tracking.mlflow_uri'.") from None


@contextmanager
def sweep_lock(storage_dir: Path) -> Iterator[None]:
    """One driver per sweep: a second ``rlsweep run`` of the same sweep is refused, not interleaved."""
    handle = open(storage_dir / ".lock", "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise UsageError(f"another rlsweep process is running the sweep in {storage_dir}; wait for it or stop it")
    try:
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        handle.close()


def run_sweep(spec: SweepSpec, console: Console, workers: int | None = None, backend: str = "local") -> Progress:
    from sweeps import algos, backends, study
    from sweeps.driver import Driver
    from sweeps.progress import LiveDisplay, trials_table
    from sweeps.tracking import BackgroundTracker

    _writable_dir(spec.storage_dir)
    if spec.mlflow_uri.startswith("sqlite:///"):
        _writable_dir(Path(spec.mlflow_uri[len("sqlite:///"):]).parent)
    with sweep_lock(spec.storage_dir):
        (spec.storage_dir / "spec.yaml").write_text(dump_yaml(spec.resolved()))
        # the spec as validated, loadable again (export re-runs configs from it)
        (spec.storage_dir / "sweep.yaml").write_text(dump_yaml(spec.model_dump(mode="json")))
        # Workers start first so their ~2 s import of torch overlaps the stores' creation below.
        # They never open either store: the driver creates both and is their only writer.
        n_workers = max(1, min(workers or spec.workers or os.cpu_count() or 1,
                               spec.n_trials * len(spec.seed_list)))
        warm = (algos.info(spec.algo).module,)
        with backends.make(backend, n_workers, warm_imports=warm) as be:
            tracker = BackgroundTracker(spec.mlflow_uri, spec.experiment, spec.name, spec.storage_dir / "artifacts")
            the_study = study.open_study(spec)
            console.print(f"[bold]{spec.name}[/bold]: {spec.algo} on {spec.env.id}, {spec.n_trials} trials x "
                          f"{len(spec.seed_list)} seeds, {spec.total_timesteps} steps each, {n_workers} "
                          f"{backend} worker{'s' if n_workers > 1 else ''}", highlight=False)
            with LiveDisplay(console) as display:
                progress = Driver(spec, be, tracker, the_study, on_change=display).run()
        if progress.requeued:
            console.print(f"rerun after an interruption: trials {progress.requeued}")
        console.print(trials_table(the_study.get_trials(deepcopy=False), f"{spec.name}: best trials", limit=10))
    console.print(f"Optuna study: {spec.optuna_url}\nMLflow: {spec.mlflow_uri} (experiment '{spec.experiment}')\n"
                  f"Browse: rlsweep ui {spec.name}    Trials: rlsweep status {spec.name}\n"
                  f"Safe configs: rlsweep export {spec.name}    Figures: rlsweep report {spec.name}", highlight=False)
    return progress
