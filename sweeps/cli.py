"""``rlsweep``: run, validate, status, ui. Heavy libraries are imported only by the command that needs them."""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from stability.errors import RlsweepError
from sweeps import samplers
from sweeps import spec as spec_module
from sweeps.errors import SpecError, UsageError
from sweeps.tracking import check_server, is_server

EXIT_USAGE = 2


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlsweep", description="RL hyperparameter sweeps that tell you why trials fail."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run (or continue) a sweep from a YAML file")
    run.add_argument("spec", help="sweep YAML file")
    run.add_argument("--workers", type=_positive, help="parallel trial seeds (default: spec 'workers' or CPUs)")
    run.add_argument("--trials", type=_positive, help="number of trials (overrides the spec's 'trials')")
    run.add_argument(
        "--time-budget",
        metavar="DURATION",
        help="open no trial after this long, e.g. 3600, 90m or 2h; running ones finish "
        "(overrides the spec's 'time_budget')",
    )
    run.add_argument("--backend", choices=["local", "ray"], help="where trials run (overrides the spec's backend.kind)")
    run.add_argument(
        "--address",
        help="Ray cluster: 'auto', 'ray://HOST:10001' or HOST:PORT (implies --backend ray; "
        "default: start a local Ray instance)",
    )
    validate = sub.add_parser("validate", help="check a sweep file without running it")
    validate.add_argument("spec", nargs="+", help="sweep YAML file(s)")
    status = sub.add_parser("status", help="show a sweep's trials")
    status.add_argument("name", help="sweep name (its folder under results/) or its YAML file")
    ui = sub.add_parser("ui", help="start the MLflow UI on the sweeps' tracking store")
    ui.add_argument("name", nargs="?", help="sweep name (default: the shared store results/mlflow.db)")
    ui.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    ui.add_argument("--port", type=_positive, default=5000)
    export = sub.add_parser("export", help="write the sweep's safe configs, ranked, ready for SB3 or rl-zoo3")
    export.add_argument("name", help="sweep name (its folder under results/)")
    export.add_argument("-o", "--output", help="file to write (default: results/NAME/safe_configs.yaml)")
    export.add_argument("--top", type=_positive, default=5, help="how many safe configs (default 5)")
    export.add_argument(
        "--format",
        default="sb3",
        choices=["sb3", "zoo"],
        help="sb3: kwargs for the algorithm class; zoo: rl-zoo3's hyperparams layout",
    )
    export.add_argument(
        "--confirm-seeds",
        type=_positive,
        default=None,
        help="re-train the top configs on N seeds the sweep never used, and report both scores",
    )
    export.add_argument("--workers", type=_positive, default=None, help="processes for --confirm-seeds")
    repair = sub.add_parser(
        "repair",
        help="re-train failing trials with the knob patches their findings carry, "
        "until healthy (confirmed on fresh seeds)",
    )
    repair.add_argument("name", nargs="?", help="sweep name (its folder under results/)")
    repair.add_argument(
        "--trial",
        type=int,
        nargs="+",
        dest="trials",
        help="only these trials (default: every failing trial not yet repaired)",
    )
    repair.add_argument("--max-attempts", type=_positive, default=2, help="patched re-trainings per trial (default 2)")
    repair.add_argument("--seeds", type=int, nargs="+", help="re-train on these seeds (default: the trial's)")
    repair.add_argument("--no-confirm", action="store_true", help="do not confirm a repair on fresh seeds")
    repair.add_argument(
        "--strategy",
        choices=["findings", "random"],
        default="findings",
        help="findings: the verdict's patches (default); random: random knob changes from the same menu (a baseline)",
    )
    repair.add_argument("--workers", type=_positive, help="parallel seeds (default: the spec's or CPUs)")
    repair.add_argument("--spec", help="repair a config you hand over: this sweep YAML (its fixed hyperparams) ...")
    repair.add_argument(
        "--trial-config",
        help="... with these hyperparams over it (YAML: a mapping, or an exported config's 'hyperparams')",
    )
    report = sub.add_parser("report", help="summary, failure map and figures of a sweep (PNG + HTML, also in MLflow)")
    report.add_argument("name", help="sweep name (its folder under results/)")
    diag = sub.add_parser("diagnose", help="classify a run trained anywhere: TensorBoard logs or an MLflow run id")
    diag.add_argument("path", help="TensorBoard log directory or event file (SB3 or CleanRL keys), or an MLflow run id")
    diag.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    diag.add_argument("--error-file", help="text of the run's crash (e.g. its traceback), if it crashed")
    diag.add_argument("--tracking-uri", help="MLflow store for a run id (default: results/mlflow.db)")
    diag.add_argument(
        "--thresholds", help="detector thresholds YAML (default: the built-in conf/stability.yaml values)"
    )
    diag.add_argument("--plot", help="also save a PNG of the key signals with the onset marked")
    diag.add_argument(
        "--hyperparams",
        help="the config the run was trained with: its SB3 model (.zip), rl-zoo3's config.yml, or a YAML mapping "
        "of its hyperparameters (causes and advice then read the run's own values)",
    )
    diag.add_argument(
        "--algo", help="the run's algorithm (PPO, A2C, ppo_lstm, ...) where --hyperparams does not name it"
    )
    diag.add_argument(
        "--env",
        help="the Gymnasium id the run trained on, as registered (its reward_threshold, where it has one, is "
        "the reference return: a run whose policy learns is then not called stuck for a lagging critic)",
    )
    diag.add_argument(
        "--reference-return",
        type=float,
        help="the episode return at which the env counts as learnt (over --env's); a negative one as "
        "--reference-return=-100",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    console = Console()
    err = Console(stderr=True)
    try:
        return {
            "run": _run,
            "validate": _validate,
            "status": _status,
            "ui": _ui,
            "diagnose": _diagnose,
            "export": _export,
            "report": _report,
            "repair": _repair,
        }[args.command](args, console)
    except RlsweepError as exc:  # SpecError, UsageError, ThresholdError, LogReadError
        err.print(str(exc), highlight=False, markup=False)
        return EXIT_USAGE
    except KeyboardInterrupt:
        err.print("interrupted: finished trials are kept; run the same command again to continue")
        return 130
    finally:
        from sweeps.backends._reaper import stop_resource_tracker

        stop_resource_tracker()  # nothing this command started outlives it, not even for a moment


def _run(args: argparse.Namespace, console: Console) -> int:
    from sweeps.runner import run_sweep

    spec = spec_module.load(args.spec)
    overrides: dict = {"trials": args.trials} if args.trials is not None else {}
    if args.time_budget is not None:
        overrides["time_budget"] = args.time_budget
    if args.backend or args.address:
        backend = spec.backend.model_dump(mode="json")
        backend["kind"] = args.backend or "ray"
        if args.address:
            backend["address"] = args.address
        overrides["backend"] = backend
    if overrides:
        raw = spec.model_dump(mode="json", exclude_unset=True) | overrides
        given = [k for k in ("trials", "time_budget", "backend", "address") if getattr(args, k) is not None]
        flags = " ".join("--" + k.replace("_", "-") for k in given)
        spec = spec_module.from_dict(raw, source=f"{args.spec} (with {flags})")
    run_sweep(spec, console, workers=args.workers)
    return 0


def _validate(args: argparse.Namespace, console: Console) -> int:
    failed = []
    for path in args.spec:
        try:
            spec = spec_module.load(path)
        except SpecError as exc:
            failed.append(exc)
            continue
        console.print(
            f"{path}: ok ({spec.algo} on {spec.env.id}, {spec.n_trials} trials x "
            f"{len(spec.seed_list)} seeds, {len(spec.dims)} swept keys)",
            highlight=False,
        )
        if note := samplers.fallback(spec.sampler.kind, spec.dims):
            console.print(f"  note: {note}", highlight=False, markup=False)
    if failed:
        raise (
            SpecError(failed[0].source, failed[0].issues)
            if len(failed) == 1
            else UsageError("\n".join(exc.render() for exc in failed))
        )
    return 0


def _sweep_dir(name: str) -> Path:
    """``results/NAME`` for a sweep name, or the storage dir of a sweep YAML file."""
    from sweeps.results import sweep_folder

    if name.endswith((".yaml", ".yml")) and Path(name).is_file():
        return spec_module.load(name).storage_dir
    return sweep_folder(name)


def _status(args: argparse.Namespace, console: Console) -> int:
    import optuna

    from sweeps.progress import trials_table

    folder = _sweep_dir(args.name)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = spec_module.optuna_url(folder)
    names = optuna.study.get_all_study_names(url)
    if not names:
        raise UsageError(f"{folder / 'optuna.db'} holds no study")
    study = optuna.load_study(study_name=names[0], storage=url)
    trials = study.get_trials(deepcopy=False)
    from sweeps.progress import verdict_counts
    from sweeps.results import record

    counts: dict[str, int] = {}
    verdicts: dict[str, int] = {}
    for r in map(record, trials):
        counts[r.outcome] = counts.get(r.outcome, 0) + 1
        if r.verdict:
            verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
    console.print(trials_table(trials, f"{names[0]}: {len(trials)} trials"))
    console.print(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())), highlight=False)
    console.print(verdict_counts(verdicts), highlight=False)
    return 0


def _report(args: argparse.Namespace, console: Console) -> int:
    from sweeps.report import build

    build(args.name, console)
    return 0


def _repair(args: argparse.Namespace, console: Console) -> int:
    from sweeps.repair import RepairSettings

    settings = RepairSettings(
        max_attempts=args.max_attempts, confirm=not args.no_confirm, strategy=args.strategy, seeds=args.seeds
    )
    if args.spec:
        if args.name or args.trials:
            raise UsageError(
                "rlsweep repair: give either a sweep NAME (with --trial) or --spec (with --trial-config), not both"
            )
        from sweeps.runner import repair_config

        repair_config(args.spec, args.trial_config, console, settings, workers=args.workers)
        return 0
    if args.trial_config:
        raise UsageError("rlsweep repair: --trial-config needs --spec (the sweep YAML the config belongs to)")
    if not args.name:
        raise UsageError(
            "rlsweep repair: name a sweep (rlsweep repair NAME) or hand over a config "
            "(rlsweep repair --spec SWEEP.yaml --trial-config CONFIG.yaml)"
        )
    from sweeps.runner import repair_sweep

    repair_sweep(args.name, console, args.trials, settings, workers=args.workers)
    return 0


def _export(args: argparse.Namespace, console: Console) -> int:
    from sweeps.export import export
    from sweeps.repair import describe

    path, doc = export(
        args.name, args.output, args.top, args.format, args.confirm_seeds or 0, args.workers or os.cpu_count() or 1
    )
    trials = doc["trials"]
    repaired = f"; {trials['repaired']} repaired by rlsweep repair" if trials.get("repaired") else ""
    console.print(
        f"{args.name}: {trials['safe']} safe of {trials['finished']} finished trials "
        f"({', '.join(f'{k} {v}' for k, v in sorted(trials['by_verdict'].items()))}){repaired}",
        highlight=False,
    )
    for item in doc["configs"]:
        confirm = item.get("confirm")
        extra = (
            f"; fresh seeds {confirm['seeds']}: score {confirm['score']}, "
            f"{'safe' if confirm['safe'] else 'NOT safe: ' + str(confirm['verdicts'])}"
            if confirm
            else ""
        )
        flag = " (few seeds)" if item["few_seeds"] else ""
        if "repaired" in item:
            flag += f" (repair of trial {item['repaired']['from_trial']}: {describe(item['repaired']['patch'])})"
        console.print(f"  #{item['rank']} trial {item['trial']}: score {item['score']}{flag}{extra}", highlight=False)
    for name, info in doc["safe_ranges"].items():
        if "safe" in info and isinstance(info["safe"], list) and len(info["safe"]) == 2 and "values" not in info:
            outside = "; ".join(info[k] for k in ("below", "above") if k in info)
            console.print(
                f"  safe {name}: [{info['safe'][0]:.4g}, {info['safe'][1]:.4g}]" + (f" ({outside})" if outside else ""),
                highlight=False,
            )
    console.print(f"wrote {path}", highlight=False)
    return 0


def _diagnose(args: argparse.Namespace, console: Console) -> int:
    import json

    from stability.diagnose import diagnose
    from stability.readers import algo_name, read_config
    from stability.thresholds import Thresholds

    context = None
    if args.hyperparams:
        context = read_config(args.hyperparams, args.algo)
    elif args.algo:
        context = {"algo": algo_name(args.algo)}
    reference = _reference(args)
    if reference:
        context = (context or {}) | reference
    error = None
    if args.error_file:
        try:
            error = Path(args.error_file).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise UsageError(f"--error-file {args.error_file}: cannot read it ({exc.strerror})") from None
    thresholds = Thresholds.load(args.thresholds) if args.thresholds else Thresholds()
    uri = args.tracking_uri or mlflow_uri_for(None)
    verdict = diagnose(args.path, error, uri, thresholds, plot=args.plot, context=context)
    if args.json:
        given = None if context is None else {k: _json_number(v) for k, v in context.items()}
        print(json.dumps(verdict.to_dict() | ({"hyperparams_read": given} if given is not None else {})))
    else:
        console.print(f"{args.path}", highlight=False)
        if context is not None:
            read = ", ".join(f"{k} {v}" for k, v in sorted(context.items())) or "nothing the detectors use"
            console.print(f"config ({args.hyperparams or 'command line'}): {read}", highlight=False)
        console.print(verdict.render(), highlight=False, markup=False, soft_wrap=True)
    return 0


def _reference(args: argparse.Namespace) -> dict[str, object]:
    """The reference return ``--reference-return`` gives, else ``--env``'s registered
    reward_threshold; empty when neither gives one. With ``--env``, its registered time limit too."""
    from stability import references

    found, limit = None, {}
    if args.env is not None:
        try:
            spec = references.spec_by_id(args.env, import_module=True)
            found, limit = references.registered(spec), references.limit_of(spec)
        except KeyError as exc:
            raise UsageError(
                f"--env {args.env}: not a registered Gymnasium id ({exc.args[0]}). Give the id the run trained "
                "on (for an env of your own, 'package.module:Env-v0' imports its module first), or its reference "
                "return with --reference-return"
            ) from None
        if found is None and args.reference_return is None:
            print(
                f"note: {args.env} is registered without a reward_threshold: no reference return "
                "(give one with --reference-return)",
                file=sys.stderr,
            )
    if args.reference_return is not None:
        if not math.isfinite(args.reference_return):
            raise UsageError(f"--reference-return {args.reference_return}: give a finite episode return")
        return references.context((args.reference_return, references.GIVEN)) | limit
    return references.context(found) | limit


def _json_number(value: object) -> object:
    """An infinite float (no gradient clip) as its text: JSON has no infinity."""
    return str(value) if isinstance(value, float) and not math.isfinite(value) else value


def mlflow_uri_for(name: str | None) -> str:
    if name is None:
        return spec_module.sqlite_url(spec_module.RESULTS_DIR / "mlflow.db")
    from sweeps._yaml import load_yaml

    resolved = _sweep_dir(name) / "spec.yaml"
    return load_yaml(resolved.read_text())["tracking"]["mlflow_uri"]


def _ui(args: argparse.Namespace, console: Console) -> int:
    uri = mlflow_uri_for(args.name)
    if is_server(uri):  # the sweep's runs are on a tracking server already: no second one
        check_server(uri)
        console.print(f"MLflow UI: {uri}  (the sweep's tracking server; nothing to start)", highlight=False)
        return 0
    store = spec_module.sqlite_file(uri)
    if store is not None and not store.is_file():
        raise UsageError(f"no tracking store at {store}: run a sweep first (make demo)")
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        uri,
        "--host",
        args.host,
        "--port",
        str(args.port),
        "--workers",
        "1",
    ]
    console.print(f"MLflow UI: http://{args.host}:{args.port}  (store {uri}; Ctrl-C to stop)", highlight=False)
    return serve_until_stopped(command)


def serve_until_stopped(command: list[str]) -> int:
    """Run a server in its own process group; on Ctrl-C or SIGTERM stop the whole group."""
    server = subprocess.Popen(command, start_new_session=True)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        return server.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


if __name__ == "__main__":
    sys.exit(main())
