"""``rlsweep run``: prepare the stores, start a backend, drive the sweep, print the results."""
from __future__ import annotations

import fcntl
import os
import shutil
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


def run_sweep(spec: SweepSpec, console: Console, workers: int | None = None) -> Progress:
    from sweeps import algos, backends, study
    from sweeps.driver import Driver
    from sweeps.progress import LiveDisplay, trials_table
    from sweeps.tracking import BackgroundTracker

    folders = [spec.storage_dir]
    if spec.mlflow_uri.startswith("sqlite:///"):
        folders.append(Path(spec.mlflow_uri[len("sqlite:///"):]).parent)
    fresh = [f for f in folders if not f.exists()]
    for folder in folders:
        _writable_dir(folder)
    with sweep_lock(spec.storage_dir):
        # Workers start first so their ~2 s import of torch overlaps the stores' creation below.
        # They never open either store: the driver creates both and is their only writer.
        jobs = spec.n_trials * len(spec.seed_list)
        if spec.backend.kind == "local":
            n_workers = max(1, min(workers or spec.workers or os.cpu_count() or 1, jobs))
        else:  # the cluster's resources decide, within these bounds
            n_workers = min(workers or spec.workers or jobs, jobs)
        warm = (algos.info(spec.algo).module,)
        try:
            be = backends.make(spec.backend, n_workers, warm_imports=warm, storage=spec.storage_dir)
        except UsageError:  # refused before anything ran: leave no trace of this sweep
            if spec.storage_dir in fresh:
                shutil.rmtree(spec.storage_dir, ignore_errors=True)
            for folder in fresh:
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
            raise
        with be:
            (spec.storage_dir / "spec.yaml").write_text(dump_yaml(spec.resolved()))
            # the spec as validated, loadable again (export re-runs configs from it)
            (spec.storage_dir / "sweep.yaml").write_text(dump_yaml(spec.model_dump(mode="json")))
            n_workers, backend = be.capacity, _describe(spec)
            tracker = BackgroundTracker(spec.mlflow_uri, spec.experiment, spec.name, spec.storage_dir / "artifacts")
            the_study = study.open_study(spec)
            console.print(f"[bold]{spec.name}[/bold]: {spec.algo} on {spec.env.id}, {spec.n_trials} trials x "
                          f"{len(spec.seed_list)} seeds, {spec.total_timesteps} steps each, {n_workers} "
                          f"{backend} at once", highlight=False)
            with LiveDisplay(console) as display:
                progress = Driver(spec, be, tracker, the_study, on_change=display).run()
        if progress.retried:
            console.print(f"{progress.retried} job(s) ran again after their worker died (backend.max_failures)")
        if progress.requeued:
            console.print(f"rerun after an interruption: trials {progress.requeued}")
        console.print(trials_table(the_study.get_trials(deepcopy=False), f"{spec.name}: best trials", limit=10))
    console.print(f"Optuna study: {spec.optuna_url}\nMLflow: {spec.mlflow_uri} (experiment '{spec.experiment}')\n"
                  f"Browse: rlsweep ui {spec.name}    Trials: rlsweep status {spec.name}\n"
                  f"Safe configs: rlsweep export {spec.name}    Figures: rlsweep report {spec.name}", highlight=False)
    return progress


def _describe(spec: SweepSpec) -> str:
    if spec.backend.kind == "local":
        return "local workers"
    res = spec.backend.resources_per_trial
    share = f"cpu {res.cpu:g}" + (f", gpu {res.gpu:g}" if res.gpu else "")
    where = spec.backend.address or "a local instance"
    return f"Ray Tune trials ({share} each, on {where})"
