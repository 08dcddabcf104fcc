"""Driver scale, by simulation: how many concurrent seeds one driver process keeps up with.

1. **Record.** One seed of the quickstart sweep (PPO on CartPole, its smallest rollout, so its
   busiest event stream) is trained for real in this process; every event it reports and when is
   kept in ``results/benchmarks/driver_events.json`` (its result too, verdict and plot included).
2. **Replay.** The real :class:`sweeps.driver.Driver`, with its real Optuna study (SQLite on disk)
   and a real MLflow store, runs against :class:`Replay`, a backend that plays that stream for N
   seeds at once at its recorded rate, each seed starting where a slot frees (the first wave
   spread over one seed's length, as a sweep in steady state). Each (N, store) runs in a fresh
   process for ``--seconds``, then is interrupted as Ctrl-C would.
3. **Figures**, per (N, store): the driver's CPU in cores (process CPU time / wall: the
   driver is all this process does), its CPU per seed-second, the lag from an event being due to
   the driver taking it (p50, p95, max), the latency from a metric being due to it being sent to
   MLflow, the seeds finished against those a driver with no cost would have finished, and the
   peak RSS. The largest N then runs once more under cProfile, its figures kept out of the
   table: what saturates the driver.
   Written to ``results/benchmarks/scale.json`` and ``scale.md``.

    python tests/bench/driver_scale.py [--seconds 40] [--n 16,64,256,1024] [--stores sqlite,server]
                                       [--bounds on,off] [--optuna sole,sole-orm,sole-journal,cached]
                                       [--metrics sql,points,mlflow]

Side-by-side comparisons of the study's storage (``sweeps.study_storage``): ``--optuna sole-orm``
is rlsweep's sole-writer storage with Optuna's own SQL writes instead of its plain-SQL ones (what a
study with a schema that module does not know gets); ``sole-journal`` is the sole-writer storage
with SQLite's default rollback journal (what a study on a network filesystem gets) instead of the
write-ahead log ``rlsweep run`` uses on a local one; ``cached`` opens the study with Optuna's own
storage (what rlsweep used before its sole-writer storage). ``--metrics`` picks a SQLite MLflow
store's writes: ``sql`` (what ``rlsweep run`` does on a store of the schema ``sweeps.tracking``
knows) writes every due run's points as plain SQL in one transaction every second, and each run's
creation with its tags and params, its later tags and its end as plain SQL too, on SQLite's
write-ahead log (a store on a local filesystem); ``sql-journal`` is the same with SQLite's default
rollback journal (a store on a network filesystem); ``points`` keeps
the plain-SQL points but makes the runs' bookkeeping MLflow's own client calls (the design
before); ``mlflow`` makes every write MLflow's own call, metric points with ``log_batch`` one run
at a time every 10 s (what a store whose schema that module does not know gets).
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import heapq
import io
import itertools
import json
import os
import pstats
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
OUT = REPO / "results" / "benchmarks"
EVENTS = OUT / "driver_events.json"
EMITTED = "bench/emitted_at"  # rides in a replayed metrics dump; the timed tracker takes it out

SPEC: dict[str, Any] = {
    "name": "scale",
    "env": {"id": "CartPole-v1", "n_envs": 4},
    "algo": "PPO",
    "total_timesteps": 20000,
    "hyperparams": {"n_epochs": 10, "gae_lambda": 0.95, "policy_kwargs": {"net_arch": [64, 64]}},
    "space": {
        "learning_rate": {"type": "loguniform", "low": 1.0e-4, "high": 3.0e-3},
        "n_steps": {"type": "choice", "values": [64, 128, 256]},
        "batch_size": {"type": "choice", "values": [64, 128]},
        "gamma": {"type": "choice", "values": [0.98, 0.99, 0.999]},
        "clip_range": {"type": "uniform", "low": 0.1, "high": 0.3},
        "ent_coef": {"type": "loguniform", "low": 1.0e-5, "high": 1.0e-2},
    },
    "seeds": 2,
    "trials": 1_000_000,  # never reached: each replay is interrupted after --seconds
    "sampler": {"kind": "tpe", "seed": 0, "n_startup_trials": 4},
    "objective": {"eval_episodes": 10},
}
RECORDED_PARAMS = {
    "learning_rate": 3e-4,
    "n_steps": 64,
    "batch_size": 64,
    "gamma": 0.99,
    "clip_range": 0.2,
    "ent_coef": 1e-4,
}


# --- 1. record ----------------------------------------------------------------------------------
def record() -> dict[str, Any]:
    from sweeps import trial
    from sweeps.configs import stability_settings, trial_configs
    from sweeps.spec import from_dict

    spec = from_dict(SPEC | {"trials": 1})
    _, (config,) = trial_configs(spec, 0, RECORDED_PARAMS, [0], stability_settings(spec))
    dumps: list[tuple[float, int, dict[str, float]]] = []
    started = time.monotonic()

    class Recording:
        def metrics(self, step: int, values: dict[str, float]) -> None:
            dumps.append((time.monotonic() - started, step, dict(values)))

    result = trial.run(config, Recording()).to_dict()
    seconds = time.monotonic() - started
    if result.get("plot_png"):
        result["plot_png"] = base64.b64encode(result["plot_png"]).decode()
    stream = {"seconds": seconds, "metrics": dumps, "result": result}
    OUT.mkdir(parents=True, exist_ok=True)
    EVENTS.write_text(json.dumps(stream))
    return stream


# --- 2. replay ----------------------------------------------------------------------------------
def _replay_classes() -> tuple[type, type]:
    """The backend and tracker used in a replay (imported here: the driver's modules are heavy)."""
    from sweeps.backends import Backend, Cancelled, Event, Metrics, Started
    from sweeps.tracking import MlflowTracker
    from sweeps.trial import TrialResult

    class Replay(Backend):
        """Plays the recorded stream for each submitted job at its recorded times. The measured
        window opens at the first poll (every slot filled once: its cost is ``fill_s``) and, after
        ``seconds``, calls ``at_until`` with the driver's CPU time and wall clock over it."""

        name = "replay"

        def __init__(self, stream: dict[str, Any], capacity: int, seconds: float) -> None:
            self.capacity, self.seconds = capacity, seconds
            self.length = stream["seconds"]
            self.dumps = stream["metrics"]
            result = dict(stream["result"])
            if result.get("plot_png"):
                result["plot_png"] = base64.b64decode(result["plot_png"])
            self.result = TrialResult(**result)
            self.due: list[tuple[float, int, tuple[int, int], Any]] = []
            self.count = itertools.count()
            self.submitted = 0
            self.finished = 0
            self.dumps_delivered = 0  # metric dumps handed to the driver
            self.lags: list[float] = []
            self.rng = random.Random(0)
            self.started = time.monotonic()
            self.window: dict[str, float] = {}
            self.at_until: Any = None

        def _push(self, at: float, key: tuple[int, int], payload: Any) -> None:
            heapq.heappush(self.due, (at, next(self.count), key, payload))

        def submit(self, config: Any) -> None:
            now = time.monotonic()
            # the first wave joins its streams part way through, as in a sweep under way: N seeds
            # always in flight, finishing at an even rate from the start
            start = now - (self.rng.uniform(0, self.length) if self.submitted < self.capacity else 0.0)
            self.submitted += 1
            self._push(now, config.key, Started(f"replay-{config.key}", node="replay"))
            for offset, step, values in self.dumps:
                if start + offset >= now:
                    self._push(start + offset, config.key, Metrics(step, dict(values, **{EMITTED: start + offset})))
            self._push(start + self.length, config.key, self.result)

        def cancel(self, keys: list[tuple[int, int]], reason: str) -> None:
            gone = set(keys)
            self.due = [d for d in self.due if d[2] not in gone]
            heapq.heapify(self.due)
            for key in keys:
                self._push(time.monotonic(), key, Cancelled(reason))

        def poll(self, timeout: float) -> list[Any]:
            now = time.monotonic()
            if not self.window:  # the first poll: every slot was filled once; the window opens
                self.window = {"start": now, "cpu": _cpu(), "fill_s": now - self.started}
            elif now >= self.window["start"] + self.seconds:
                self.window |= {"wall": now - self.window["start"], "cpu": _cpu() - self.window["cpu"]}
                self.at_until()  # the figures, taken now; a driver's Ctrl-C clean-up is not measured
            if not self.due or self.due[0][0] > now:
                wait = min(timeout, (self.due[0][0] - now) if self.due else timeout)
                time.sleep(max(wait, 0.0))
                now = time.monotonic()
            out = []
            while self.due and self.due[0][0] <= now:
                at, _, key, payload = heapq.heappop(self.due)
                if at >= self.window["start"]:  # due inside the window (not while the slots were filled)
                    self.lags.append(now - at)
                    self.finished += isinstance(payload, TrialResult)
                self.dumps_delivered += isinstance(payload, Metrics)
                out.append(Event(key, payload))
            return out

        def close(self) -> None:
            self.due = []

    class TimedTracker(MlflowTracker):
        """The real tracker; also notes when each replayed metric point is sent to MLflow."""

        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.emitted: dict[str, list[float]] = {}
            self.latencies: list[float] = []

        def log_metrics(self, run_id: str, step: int, values: dict[str, float]) -> None:
            values = dict(values)
            emitted = values.pop(EMITTED, None)
            if emitted is not None:
                self.emitted.setdefault(run_id, []).append(emitted)
            super().log_metrics(run_id, step, values)

        def _sent(self, run_ids: list[str]) -> None:
            now = time.monotonic()
            for run_id in run_ids:
                self.latencies += [now - at for at in self.emitted.pop(run_id, [])]

    return Replay, TimedTracker


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p95": float("nan"), "max": float("nan")}
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 3),
        "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 3),
        "max": round(ordered[-1], 3),
    }


def replay_one(
    n: int, uri: str, seconds: float, folder: Path, profile: bool, optuna_cache: str = "sole", metrics: str = "sql"
) -> None:
    """One replay in this process: N concurrent seeds for ``seconds``; prints its figures (JSON)."""
    import optuna

    from sweeps import study_storage as st
    from sweeps import tracking
    from sweeps.driver import Driver
    from sweeps.spec import from_dict

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    stream = json.loads(EVENTS.read_text())
    Replay, TimedTracker = _replay_classes()
    spec = from_dict(SPEC | {"tracking": {"mlflow_uri": uri}})
    url = f"sqlite:///{folder / 'optuna.db'}"
    if optuna_cache == "sole-journal":  # as if on a network filesystem: no write-ahead log
        st.filesystem_type = lambda path: None  # type: ignore[assignment]
    if optuna_cache == "sole-orm":  # as if the schema were another: Optuna's own writes
        st.SCHEMA = "none"
    if metrics == "mlflow":  # as if MLflow's schema were another: its own log_batch
        tracking.MLFLOW_SCHEMA = "none"
    if metrics == "sql-journal":  # as if on a network filesystem: no write-ahead log
        tracking.on_local_filesystem = lambda db: False  # type: ignore[assignment]
    storage = url if optuna_cache == "cached" else st.sole_writer_storage(url)  # "sole": as rlsweep run opens it
    study = optuna.create_study(study_name="scale", storage=storage, direction="maximize", load_if_exists=True)
    tracker = TimedTracker(uri, "scale", "scale", folder / "artifacts")
    if metrics == "points" and tracker._rows is not None:  # runs' bookkeeping left to MLflow's client
        tracker._rows.create_run = lambda *args: None
        tracker._rows.end_run = lambda *args: False
        tracker._rows.set_tags = lambda tags: list(tags)
    backend = Replay(stream, n, seconds)
    driver = Driver(spec, backend, tracker, study)
    profiler = cProfile.Profile() if profile else None

    def at_until() -> None:
        if profiler:
            profiler.disable()
        print(json.dumps(_figures(n, uri, stream, backend, tracker, profiler)), flush=True)
        os._exit(0)  # the driver's clean-up after a Ctrl-C (closing every run) is not what is measured

    backend.at_until = at_until
    if profiler:
        profiler.enable()
    driver.run()
    raise RuntimeError("the replay ended before its time was up")


def _figures(n: int, uri: str, stream: dict[str, Any], backend: Any, tracker: Any, profiler: Any) -> dict[str, Any]:
    stopped = backend.window
    ideal = n * stopped["wall"] / stream["seconds"]  # N seeds always in flight, each its recorded length
    figures: dict[str, Any] = {
        "n": n,
        "store": "server" if uri.startswith("http") else "sqlite",
        "fill_s": round(stopped["fill_s"], 1),
        "wall_s": round(stopped["wall"], 1),
        "driver_cores": round(stopped["cpu"] / stopped["wall"], 3),
        "cpu_ms_per_seed_second": round(1000 * stopped["cpu"] / (n * stopped["wall"]), 3),
        "events": len(backend.lags),
        "event_lag_s": _percentiles(backend.lags),
        "metric_write_latency_s": _percentiles(tracker.latencies),
        # the latency is of the dumps written by the window's end: a dump still held (in the
        # driver's queue, or buffered) is not in it, so the share says what the latency leaves out
        "metric_dumps_written_share": round(len(tracker.latencies) / max(backend.dumps_delivered, 1), 3),
        "seeds_finished": backend.finished,
        "seeds_finished_with_no_driver_cost": round(ideal, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "runs_thinned": len(tracker.thinned),
    }
    if profiler is not None:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(12)
        figures["profile_top"] = _profile_lines(text.getvalue())
    return figures


def _profile_lines(text: str) -> list[str]:
    """cProfile's table, its rows only, with paths made short."""
    rows = []
    started = False
    for line in text.splitlines():
        if line.strip().startswith("ncalls"):
            started = True
            continue
        if started and line.strip():
            rows.append(line.replace(str(REPO) + "/", "").replace(sys.prefix, "<venv>")[:160])
    return rows


# --- one row --------------------------------------------------------------------------------------
def _measure(
    n: int,
    store: str,
    seconds: float,
    profile: bool,
    bound: str = "on",
    optuna_cache: str = "sole",
    metrics: str = "sql",
) -> dict[str, Any]:
    from tests.helpers import free_port, serve_mlflow, stop_server

    folder = Path(tempfile.mkdtemp(prefix="rlsweep-scale-"))
    server = None
    try:
        if store == "server":
            port = free_port()
            server, uri = serve_mlflow(folder, port), f"http://127.0.0.1:{port}"
        else:
            uri = f"sqlite:///{folder / 'mlflow.db'}"
        command = [sys.executable, __file__, "--one", str(n), "--uri", uri, "--seconds", str(seconds)]
        command += ["--folder", str(folder)] + (["--profile"] if profile else [])
        command += ["--no-bound"] if bound == "off" else []
        command += ["--optuna-one", optuna_cache, "--metrics-one", metrics]
        done = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-3000:])
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        return figures | {"bound": bound, "optuna": optuna_cache, "metrics": metrics if store == "sqlite" else "mlflow"}
    finally:
        if server is not None:
            stop_server(server)
        subprocess.run(["rm", "-rf", str(folder)], check=False)


def _markdown(stream: dict[str, Any], rows: list[dict[str, Any]], seconds: float) -> str:
    dumps = len(stream["metrics"])
    lines = [
        "# Driver scale (tests/bench/driver_scale.py)",
        "",
        f"The real driver and stores against a replay of one recorded quickstart seed ({dumps} metric dumps "
        f"over {stream['seconds']:.1f} s, then its result), N seeds at once, {seconds:.0f} s each, one "
        "process per row. Driver cores: its CPU time over wall time (1.0 = one core saturated). Lag: "
        "an event due to the driver taking it. Write latency: a metric due to it being in MLflow's store, over "
        "the dumps written by the window's end; dumps written: their share of those handed to the driver "
        "(the rest were still held, and are not in the latency). "
        "Metrics: `sql` writes every due run's points as plain SQL on MLflow's tables in one transaction, "
        "each run's points once the oldest has waited 1 s, and each run's creation with its tags and params, "
        "its later tags and its end as plain SQL too (a SQLite store with the schema rlsweep knows), on "
        "SQLite's write-ahead log (a local filesystem); `sql-journal` the same with SQLite's default "
        "rollback journal (a network filesystem), whose commits each wait for an fsync; `points` "
        "the same points, with the runs' bookkeeping through MLflow's client (the design before); `mlflow` "
        "every write through MLflow's client, each run's points with `log_batch` once the oldest has waited "
        "10 s (a tracking server, or another schema), so about 5 s is that design's own latency.",
        "",
        "Bound: the tracker's bound on metric points held for MLflow (past it, held curves are thinned); "
        "`off` replays the same N without it, side by side. Optuna: `sole` is the study's storage as "
        "`rlsweep run` opens it (trials read once, then kept in memory as written; each write plain SQL on "
        "Optuna's tables, committed at once; on a local filesystem, to SQLite's write-ahead log); `sole-orm` "
        "the same with Optuna's own writes (SQLAlchemy), reading again the trials written; "
        "`sole-journal` the same as `sole` with SQLite's default rollback journal "
        "(as on a network filesystem); `cached` is Optuna's own, which reads every unfinished trial again at "
        "each read, with the default journal.",
        "",
        "| N | store | bound | Optuna | metrics | driver cores | CPU ms / seed-s | events | lag p50 / p95 / max (s) "
        "| write latency p50 / p95 (s), dumps written | seeds done / with no driver cost | runs thinned "
        "| peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.get("profiled_only"):  # slowed by cProfile: its figures are not the table's
            continue
        lag, lat = r["event_lag_s"], r["metric_write_latency_s"]
        lines.append(
            f"| {r['n']} | {r['store']} | {r.get('bound', 'on')} | {r.get('optuna', 'cached')} | "
            f"{r.get('metrics', 'mlflow')} | {r['driver_cores']} | "
            f"{r['cpu_ms_per_seed_second']} | {r['events']} "
            f"| {lag['p50']} / {lag['p95']} / {lag['max']} | {lat['p50']} / {lat['p95']}, "
            f"{r.get('metric_dumps_written_share', float('nan')):.0%} "
            f"| {r['seeds_finished']} / {r['seeds_finished_with_no_driver_cost']} | {r.get('runs_thinned', '-')} "
            f"| {r['peak_rss_mib']} |"
        )
    for r in rows:
        if "profile_top" in r:
            lines += ["", f"## Where the driver's time goes at N = {r['n']} ({r['store']}), cProfile by own time", ""]
            lines += ["```", *r["profile_top"], "```"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--n", default="16,64,256,1024")
    parser.add_argument("--stores", default="sqlite,server")
    parser.add_argument("--rerecord", action="store_true", help="train the recorded seed again")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--uri", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--bounds", default="on", help="on, off or on,off: with and without the held-point bound")
    parser.add_argument(
        "--optuna", default="sole", help="sole, sole-orm, sole-journal, cached, or a comma-separated list"
    )
    parser.add_argument("--optuna-one", default="sole", help=argparse.SUPPRESS)
    parser.add_argument(
        "--metrics", default="sql", help="sql, sql-journal, points, mlflow (or several): a SQLite store's writes"
    )
    parser.add_argument("--metrics-one", default="sql", help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-bound", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        if args.no_bound:
            from sweeps import tracking

            tracking._MAX_HELD = sys.maxsize
        replay_one(args.one, args.uri, args.seconds, Path(args.folder), args.profile, args.optuna_one, args.metrics_one)
        return
    stream = json.loads(EVENTS.read_text()) if EVENTS.is_file() and not args.rerecord else record()
    sizes = [int(x) for x in args.n.split(",")]
    rows = []
    for store in args.stores.split(","):
        for n in sizes:
            ways = args.metrics.split(",") if store == "sqlite" else ["mlflow"]  # a server: MLflow's calls
            for bound, cache, metrics in itertools.product(args.bounds.split(","), args.optuna.split(","), ways):
                print(
                    f"replaying N={n} on {store}, bound {bound}, Optuna {cache}, metrics {metrics} ...", file=sys.stderr
                )
                # never under cProfile, which slows the driver: the profile is a run of its own (below)
                rows.append(_measure(n, store, args.seconds, False, bound, cache, metrics))
            (OUT / "scale.json").write_text(json.dumps(rows, indent=2))  # each row as it comes
            (OUT / "scale.md").write_text(_markdown(stream, rows, args.seconds))
    if rows:  # the first setting at the largest N again, under cProfile, its figures kept apart
        store, cache = args.stores.split(",")[0], args.optuna.split(",")[0]
        print(f"profiling N={max(sizes)} on {store}, Optuna {cache} ...", file=sys.stderr, flush=True)
        rows.append(_measure(max(sizes), store, args.seconds, True, "on", cache) | {"profiled_only": True})
        (OUT / "scale.json").write_text(json.dumps(rows, indent=2))
        (OUT / "scale.md").write_text(_markdown(stream, rows, args.seconds))
    summary = {
        f"{r['store']}_{r['n']}_{r['bound']}_{r['optuna']}_{r['metrics']}": {
            "cores": r["driver_cores"],
            "lag_p95": r["event_lag_s"]["p95"],
        }
        for r in rows
        if not r.get("profiled_only")
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
