"""``rlsweep run``: prepare the stores, start a backend, drive the sweep, print the results."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console

from stability import keys
from sweeps._yaml import dump_yaml
from sweeps.driver import Progress
from sweeps.errors import UsageError
from sweeps.spec import SweepSpec, sqlite_file


def _writable_dir(path: Path) -> None:
    """Create ``path`` and prove it writable now, before any trial starts."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_bytes(b"0" * 65536)
        probe.unlink()
    except OSError as exc:
        raise UsageError(
            f"cannot write to {path}: {exc.strerror or exc}. Free some space or choose another "
            f"'storage.dir' / 'tracking.mlflow_uri'."
        ) from None


@contextmanager
def sweep_lock(storage_dir: Path) -> Iterator[None]:
    """One driver per sweep: a second ``rlsweep run`` of the same sweep is refused, not interleaved."""
    handle = open(storage_dir / ".lock", "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise UsageError(
            f"another rlsweep process is running the sweep in {storage_dir}; wait for it or stop it"
        ) from None
    try:
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        handle.close()


def run_sweep(spec: SweepSpec, console: Console, workers: int | None = None, repair: Any = None) -> Progress:
    from sweeps import algos, backends, results, samplers, study
    from sweeps.driver import Driver
    from sweeps.progress import LiveDisplay, trials_table
    from sweeps.tracking import BackgroundTracker, check_server

    if spec.warm_start is not None:  # refused before anything is written
        results.sweep_folder(spec.warm_start.from_)
    check_server(spec.mlflow_uri)
    folders = [spec.storage_dir]
    store = sqlite_file(spec.mlflow_uri)
    if store is not None:
        folders.append(store.parent)
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
        if spec.backend.kind == "ray":
            # Imported here, whole, before Tune's thread starts: Tune imports MLflow's integration
            # in its own thread, and MLflow's modules import each other in a cycle, so a second
            # thread importing it at the same time as the tracker's meets a half-initialised
            # module (seen in CI: "partially initialized module 'mlflow' has no attribute ...").
            import mlflow  # noqa: F401
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
            (spec.storage_dir / "sweep.yaml").write_text(dump_yaml(spec.model_dump(mode="json", by_alias=True)))
            n_workers, backend = be.capacity, _describe(spec)
            tracker = BackgroundTracker(spec.mlflow_uri, spec.experiment, spec.name, spec.storage_dir / "artifacts")
            the_study = study.open_study(spec)
            console.print(
                f"[bold]{spec.name}[/bold]: {spec.algo} on {spec.env.id}, {spec.n_trials} trials x "
                f"{len(spec.seed_list)} seeds, {spec.total_timesteps} steps each, {n_workers} "
                f"{backend} at once",
                highlight=False,
            )
            for note in [*be.notes, samplers.fallback(spec.sampler.kind, spec.dims)]:
                if note:
                    console.print(f"note: {note}", highlight=False, markup=False)
            if started_from := study.warm_start(the_study, spec):
                console.print(
                    f"warm start from '{started_from.source}': {started_from.enqueued} of its best safe "
                    f"configs run first; the sampler learns from its {started_from.seen} finished trials",
                    highlight=False,
                )
                if started_from.dropped:
                    console.print(
                        f"warning: params of '{started_from.source}' not in this space (or outside it), not used: "
                        f"{', '.join(started_from.dropped)}",
                        highlight=False,
                        markup=False,
                    )
            driver = Driver(spec, be, tracker, the_study, repair=repair)
            with LiveDisplay(console) as display:
                driver.on_change = display
                progress = driver.run()
        if driver.plans:
            report_repairs(spec, driver.plans, console)
        if progress.out_of_time:
            console.print(
                f"time budget ({spec.time_budget:g} s) spent: {progress.done} of {spec.n_trials} trials done; "
                "the same command continues the sweep with a new budget",
                highlight=False,
            )
        if progress.retried:
            console.print(f"{progress.retried} job(s) ran again after their worker died (backend.max_failures)")
        if progress.requeued:
            console.print(f"rerun after an interruption: trials {progress.requeued}")
        if progress.unreferenced:
            console.print(
                f"trials {progress.unreferenced} are stuck_value_loss beside returns that rose, and no reference "
                "return is known for this env: each may be a critic lagging a policy that learns, not a failure. "
                "Give the env's return when solved (stability.reference_return) to tell them apart; until then "
                "they count as failing (never exported as safe)",
                highlight=False,
            )
        if progress.restored:
            console.print(
                f"finished trials {progress.restored} had no MLflow runs (the driver that ran them stopped before "
                "writing them): made from the Optuna study, without curves",
                highlight=False,
            )
        console.print(trials_table(the_study.get_trials(deepcopy=False), f"{spec.name}: best trials", limit=10))
    console.print(
        f"Optuna study: {spec.optuna_url}\nMLflow: {spec.mlflow_uri} (experiment '{spec.experiment}')\n"
        f"Browse: rlsweep ui {spec.name}    Trials: rlsweep status {spec.name}\n"
        f"Safe configs: rlsweep export {spec.name}    Figures: rlsweep report {spec.name}",
        highlight=False,
    )
    return progress


def report_repairs(spec: SweepSpec, plans: list, console: Console) -> None:
    from sweeps import repair

    path = spec.storage_dir / "repairs.yaml"
    repair.write_summary(path, plans)
    console.print("[bold]repairs[/bold]")
    for line in repair.render(plans):
        console.print(line, highlight=False, markup=False)
    console.print(f"wrote {path}", highlight=False)


def failing_trials(results: Any, wanted: list[int] | None) -> list[Any]:
    """The trials ``rlsweep repair`` works on: those named, or every failing sampled trial that no
    earlier repair fixed. A named trial that is unknown, a repair attempt, or safe is refused."""
    by_number = {t.number: t for t in results.trials}
    fixed = {t.repair_of for t in results.repaired()}
    if not wanted:
        return [t for t in results.finished if t.failure_class and t.number not in fixed]
    problems = []
    for n in wanted:
        t = by_number.get(n)
        if t is None:
            problems.append(f"trial {n} does not exist (trials 0-{len(results.trials) - 1})")
        elif t.repair_of is not None:
            problems.append(f"trial {n} is itself a repair attempt of trial {t.repair_of}")
        elif t.outcome not in keys.OUTCOMES:
            problems.append(f"trial {n} has not finished ({t.outcome})")
        elif not t.failure_class:
            problems.append(f"trial {n} is healthy on every seed: there is nothing to repair")
    if problems:
        raise UsageError(
            f"rlsweep repair {results.spec.name}: "
            + "; ".join(problems)
            + ". Failing trials: "
            + (", ".join(str(t.number) for t in results.finished if t.failure_class) or "none")
        )
    return [by_number[n] for n in wanted]


def repair_sweep(
    name: str, console: Console, trials: list[int] | None = None, settings: Any = None, workers: int | None = None
) -> list:
    """``rlsweep repair NAME``: re-train the sweep's failing trials with their findings' patches,
    in the sweep's stores and on its backend. Returns the plans."""
    from sweeps import algos, backends, results, study
    from sweeps.driver import Driver
    from sweeps.progress import LiveDisplay
    from sweeps.repair import RepairSettings
    from sweeps.tracking import BackgroundTracker

    settings = settings or RepairSettings()
    with sweep_lock(results.sweep_folder(name)):  # a sweep still running is refused before anything is read
        res = results.load(name)
        spec = res.spec
        chosen = failing_trials(res, trials)
        if not chosen:
            console.print(
                f"{name}: no failing trial to repair ({len(res.finished)} finished, "
                f"{len({t.repair_of for t in res.repaired()})} already repaired)",
                highlight=False,
            )
            return []
        jobs = len(chosen) * len(settings.seeds or spec.seed_list)
        n_workers = max(1, min(workers or spec.workers or os.cpu_count() or 1, jobs))
        with backends.make(
            spec.backend, n_workers, warm_imports=(algos.info(spec.algo).module,), storage=spec.storage_dir
        ) as be:
            tracker = BackgroundTracker(spec.mlflow_uri, spec.experiment, spec.name, spec.storage_dir / "artifacts")
            the_study = study.open_study(spec)
            driver = Driver(spec, be, tracker, the_study, repair=settings, open_trials=False)
            frozen = {t.number: t for t in the_study.get_trials(deepcopy=False)}
            for t in chosen:
                f = frozen[t.number]
                driver.plans.append(
                    driver.plan_for(
                        t.number,
                        t.params,
                        t.failure_class or "crashed",
                        t.returns,
                        spec.seed_list,
                        t.patches,
                        dict(f.params),
                        dict(f.distributions),
                        env_broke=t.env_broke,
                    )
                )
            console.print(
                f"[bold]{name}[/bold]: repairing trial(s) {', '.join(str(t.number) for t in chosen)}, "
                f"at most {settings.max_attempts} attempt(s) each ({settings.strategy} patches), "
                f"{be.capacity} at once",
                highlight=False,
            )
            with LiveDisplay(console) as display:
                driver.on_change = display
                driver.run()
    report_repairs(spec, driver.plans, console)
    return driver.plans


def repair_config(
    spec_path: str, config_path: str | None, console: Console, settings: Any, workers: int | None = None
) -> list:
    """``rlsweep repair --spec SWEEP.yaml --trial-config CONFIG.yaml``: train the spec's fixed
    hyperparams (with the config's over them) on the spec's seeds, classify, and repair it if it
    fails. It runs as a one-trial sweep of its own, ``NAME-repair-HASH``, so every store, tag and
    command (status, export, report) works on it."""
    import hashlib
    import json

    from sweeps import spec as spec_module
    from sweeps._yaml import YamlError, load_yaml
    from sweeps.errors import Issue, SpecError

    spec = spec_module.load(spec_path)
    overlay: Any = {}
    if config_path:
        try:
            overlay = load_yaml(Path(config_path).read_text())
        except OSError as exc:
            raise UsageError(f"--trial-config {config_path}: cannot read it ({exc.strerror})") from None
        except YamlError as exc:
            raise SpecError(config_path, [Issue("", str(exc))]) from None
        if isinstance(overlay, dict) and isinstance(overlay.get("hyperparams"), dict):
            overlay = overlay["hyperparams"]
        if not isinstance(overlay, dict):
            raise SpecError(
                config_path,
                [
                    Issue(
                        "", "expected a mapping of hyperparameters (or an exported config with a 'hyperparams' mapping)"
                    )
                ],
            )
    raw = spec.model_dump(mode="json", exclude_unset=True)
    hyperparams = dict(raw.get("hyperparams", {})) | overlay
    tag = hashlib.sha256(json.dumps(hyperparams, sort_keys=True, default=str).encode()).hexdigest()[:8]
    raw.update(
        name=f"{spec.name}-repair-{tag}",
        hyperparams=hyperparams,
        space={},
        trials=1,
        storage={},
        stability=raw.get("stability", {})
        | {"repair": {"auto": True, "max_attempts": settings.max_attempts, "confirm": settings.confirm}},
    )
    source = f"{config_path} over {spec_path}" if config_path else spec_path
    single = spec_module.from_dict(raw, source=source)
    if (single.storage_dir / "optuna.db").is_file():
        console.print(f"{single.name}: this config was trained before; repairing it from its results", highlight=False)
        return repair_sweep(single.name, console, None, settings, workers)
    run_sweep(single, console, workers=workers, repair=settings)
    return []


def _describe(spec: SweepSpec) -> str:
    if spec.backend.kind == "local":
        gpus = spec.backend.gpus
        if gpus:
            return f"local workers (on GPU {', '.join(map(str, gpus))}, {spec.backend.jobs_per_gpu} per GPU)"
        return "local workers"
    res = spec.backend.resources_per_trial
    share = f"cpu {res.cpu:g}" + (f", gpu {res.gpu:g}" if res.gpu else "")
    where = spec.backend.address or "a local instance"
    return f"Ray Tune trials ({share} each, on {where})"
