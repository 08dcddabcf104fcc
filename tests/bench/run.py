"""``make bench``: every benchmark, compared side by side in one run, figures to results/benchmarks/.

These machines are shared and noisy, so each figure is a ratio of runs made back to back in
this same invocation, alternating the two sides when ``--repeat`` > 1. Nothing here is a
pass/fail test; the targets are printed beside the figures.

    python tests/bench/run.py [--repeat N] [--only overhead,scaling]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "results" / "benchmarks"
SPEC = REPO / "tests" / "bench" / "overhead.yaml"


CPU_SECONDS: list[float] = []  # CPU time (user + sys) of each timed command and its children
PEAK_MIB: list[float] = []  # the largest peak RSS of any one process of each timed command

# Runs a command and prints, last on stderr, the largest peak RSS (KiB on Linux) among all the
# processes under it that were waited for: the driver, its workers, the plain loop. A wrapper of its
# own per command, since a process's own RUSAGE_CHILDREN maximum only ever grows.
_PEAK = (
    "import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(rc)"
)


def _timed(command: list[str], cwd: Path) -> float:
    """Wall seconds of ``command``; its CPU seconds are appended to ``CPU_SECONDS``, its largest
    process's peak RSS to ``PEAK_MIB``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", _PEAK, *command],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=dict(os.environ, COLUMNS="200"),
    )
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU_SECONDS.append(round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 2))
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    PEAK_MIB.append(round(int(result.stderr.strip().splitlines()[-1]) / 1024, 1))
    return round(seconds, 2)


def _rlsweep_run(workers: int) -> float:
    """A fresh working directory each time, so every run creates its stores from nothing."""
    cwd = Path(tempfile.mkdtemp(prefix="rlsweep-bench-"))
    try:
        return _timed([sys.executable, "-m", "sweeps", "run", str(SPEC), "--workers", str(workers)], cwd)
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


def _plain_loop() -> float:
    cwd = Path(tempfile.mkdtemp(prefix="rlsweep-bench-"))
    try:
        return _timed([sys.executable, str(REPO / "tests" / "bench" / "plain_loop.py"), str(SPEC)], cwd)
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


def _plain_halves() -> float:
    """Wall seconds of two plain loops side by side, each on half the grid: the most two cores give
    this work with no sweep tool at all (each process pays its own imports, as each worker does)."""
    cwd = Path(tempfile.mkdtemp(prefix="rlsweep-bench-"))
    loop = [sys.executable, str(REPO / "tests" / "bench" / "plain_loop.py"), str(SPEC)]
    try:
        started = time.perf_counter()
        halves = [subprocess.Popen([*loop, f"{i}/2"], cwd=cwd, stdout=subprocess.DEVNULL) for i in range(2)]
        if any([p.wait() != 0 for p in halves]):  # a list: both are waited for, whichever failed
            raise RuntimeError("a plain-loop half failed")
        return round(time.perf_counter() - started, 2)
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


def bench_overhead(repeat: int) -> dict:
    """(a) 6 configs x 20k steps as a plain loop of SB3 calls; (b) the same through `rlsweep run
    --workers 1`, stores created from scratch. Both are whole commands, imports included."""
    plain, swept, plain_cpu, swept_cpu, plain_mib, swept_mib = [], [], [], [], [], []
    for _ in range(repeat):
        plain.append(_plain_loop())
        plain_cpu.append(CPU_SECONDS[-1])
        plain_mib.append(PEAK_MIB[-1])
        swept.append(_rlsweep_run(1))
        swept_cpu.append(CPU_SECONDS[-1])
        swept_mib.append(PEAK_MIB[-1])
    ratio = statistics.median(swept) / statistics.median(plain)
    cpu_ratio = statistics.median(swept_cpu) / statistics.median(plain_cpu)
    return {
        "plain_loop_s": plain,
        "rlsweep_1_worker_s": swept,
        "ratio_b_over_a": round(ratio, 4),
        "plain_loop_cpu_s": plain_cpu,
        "rlsweep_1_worker_cpu_s": swept_cpu,
        "cpu_ratio_b_over_a": round(cpu_ratio, 4),
        "plain_loop_peak_mib": plain_mib,
        "rlsweep_1_worker_largest_process_peak_mib": swept_mib,
        "memory_ratio_b_over_a": round(statistics.median(swept_mib) / statistics.median(plain_mib), 4),
        "target": "<= 1.05 (memory: <= 1.10)",
    }


def bench_scaling(repeat: int) -> dict:
    """Trials per hour with --workers 2 against --workers 1, on this 2-core machine; beside it, the
    same ratio for plain loops (one on the whole grid against two side by side on its halves), the
    machine's own ceiling for this work: two trainings on two cores slow each other (shared caches,
    memory bandwidth), whatever runs them."""
    one, two, plain, halves = [], [], [], []
    for _ in range(repeat):
        one.append(_rlsweep_run(1))
        two.append(_rlsweep_run(2))
        plain.append(_plain_loop())
        halves.append(_plain_halves())
    speedup = statistics.median(one) / statistics.median(two)
    ceiling = statistics.median(plain) / statistics.median(halves)
    trials = 6
    return {
        "workers_1_s": one,
        "workers_2_s": two,
        "plain_loop_s": plain,
        "plain_halves_side_by_side_s": halves,
        "trials": trials,
        "trials_per_hour_1": round(trials * 3600 / statistics.median(one), 1),
        "trials_per_hour_2": round(trials * 3600 / statistics.median(two), 1),
        "speedup": round(speedup, 3),
        "plain_speedup": round(ceiling, 3),
        "speedup_of_the_plain_speedup": round(speedup / ceiling, 3),
        "target": ">= 1.85",
        "cpus": os.cpu_count(),
    }


def bench_knobs(repeat: int) -> dict:
    """log_std bound + pre-clip grad-norm logging vs the same PPO Pendulum config without them."""
    result = subprocess.run(
        [sys.executable, str(REPO / "tests" / "bench" / "knob_cost.py"), str(max(repeat * 4, 8))],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def _stability(name: str):
    def bench(repeat: int) -> dict:
        sys.path.insert(0, str(REPO))
        from tests.bench import stability_bench

        return getattr(stability_bench, name)(repeat)

    return bench


def _script(name: str, *args: str) -> dict:
    """Run ``tests/bench/NAME`` in its own process; its last line of output is its figures (JSON)."""
    result = subprocess.run(
        [sys.executable, str(REPO / "tests" / "bench" / name), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def bench_zoo(repeat: int) -> dict:
    """rl-zoo3's tuner vs rlsweep replaying the configs it sampled (zoo_compare.py)."""
    return _script("zoo_compare.py", "8", "20000")


def bench_search(repeat: int) -> dict:
    """Best config found per wall time: rlsweep (pruning on and off) against rl-zoo3's tuner, PPO
    on CartPole-v1, 3 sweep seeds of 5 minutes per arm (search_anytime.py: writes search.md)."""
    return _script("search_anytime.py")


def bench_ray(repeat: int) -> dict:
    """The same sweep on local workers and on a local 2-CPU Ray instance (ray_compare.py)."""
    return _script("ray_compare.py", str(repeat))


def bench_reliability(repeat: int) -> dict:
    """Faults injected into real sweeps (reliability.py)."""
    return _script("reliability.py", str(2 + repeat))


def bench_repair(repeat: int) -> dict:
    """rlsweep repair vs random knob changes on the held-out corpus failures and the reproductions
    (repair_bench.py: writes repair.md; needs the corpus, which stability_detection runs)."""
    return _script("repair_bench.py", "--jobs", "2")


def bench_scale(repeat: int) -> dict:
    """The real driver against a replayed event stream at 16-1024 concurrent seeds, SQLite and an
    HTTP tracking server, the study's storage as ``rlsweep run`` opens it beside the same storage
    making Optuna's own writes, and on SQLite MLflow's writes as plain SQL beside the runs'
    bookkeeping through MLflow's client and beside every write through it (driver_scale.py: writes
    scale.md)."""
    return _script(
        "driver_scale.py", "--n", "16,64,256,512,1024", "--optuna", "sole,sole-orm", "--metrics", "sql,points,mlflow"
    )


BENCHES = {
    "overhead": bench_overhead,
    "scaling": bench_scaling,
    "knobs": bench_knobs,
    "stability_cost": _stability("cost"),
    "stability_detection": _stability("detection"),
    "stability_stop_on": _stability("stop_on"),
    "zoo": bench_zoo,
    "search": bench_search,
    "ray": bench_ray,
    "reliability": bench_reliability,
    "repair": bench_repair,
    "scale": bench_scale,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", default=",".join(BENCHES))
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "foundation.json"
    figures = json.loads(path.read_text()) if path.is_file() else {}  # keep figures of benches not rerun
    for name in args.only.split(","):
        print(f"running {name} ...", flush=True)
        figures[name] = BENCHES[name](args.repeat) | {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "repeat": args.repeat}
        print(json.dumps(figures[name], indent=2), flush=True)
    path.write_text(json.dumps(figures, indent=2))
    lines = ["# Benchmarks (make bench)", ""]
    if "overhead" in figures:
        o = figures["overhead"]
        lines.append(
            f"- Platform overhead ({o['date']}, x{o['repeat']}), 6 configs x 20k steps: rlsweep 1 worker / "
            f"plain SB3 loop = **{o['ratio_b_over_a']}** wall (target {o['target']}), "
            f"{o['cpu_ratio_b_over_a']} CPU time; plain {o['plain_loop_s']} s, rlsweep {o['rlsweep_1_worker_s']} s"
        )
        if "memory_ratio_b_over_a" in o:
            lines.append(
                f"- Peak memory, the same runs: rlsweep's largest process / the plain loop = "
                f"**{o['memory_ratio_b_over_a']}** (target <= 1.10); plain {o['plain_loop_peak_mib']} MiB, "
                f"rlsweep {o['rlsweep_1_worker_largest_process_peak_mib']} MiB"
            )
    if "scaling" in figures:
        s = figures["scaling"]
        lines.append(
            f"- Parallel scaling ({s['date']}, x{s['repeat']}) on {s['cpus']} CPUs: --workers 2 vs 1 = "
            f"**{s['speedup']}x** trials/hour (target {s['target']}); {s['trials_per_hour_1']} -> "
            f"{s['trials_per_hour_2']} trials/hour"
            + (
                f". The machine's own ceiling, plain loops on the two halves of the grid side by side against "
                f"one on the whole: {s['plain_speedup']}x, so rlsweep gets {s['speedup_of_the_plain_speedup']} of it"
                if "plain_speedup" in s
                else ""
            )
        )
    if "knobs" in figures:
        k = figures["knobs"]
        lines.append(
            f"- Knob cost ({k['date']}, x{k['repeat']}), PPO Pendulum {k['steps']} steps: log_std bound + "
            f"grad-norm logging / plain = **{k['ratio_wall']}** wall, {k['ratio_cpu']} CPU "
            f"(target {k['target']}); plain {k['plain_s']} s, with knobs {k['knobs_s']} s"
        )
    if "ray" in figures:
        r = figures["ray"]
        pj = r["per_job"]
        lines.append(
            f"- Ray backend ({r['date']}, x{r['repeat']}), {r['sweep']}: ray / local = "
            f"**{r['ratio_ray_over_local']}** wall (target {r['target_ratio']}); local {r['local_s']} s, "
            f"ray {r['ray_s']} s. Per-job overhead after warm-up: ray median {pj['ray']['overhead_median_s']} s "
            f"(max {pj['ray']['overhead_max_s']}), local median {pj['local']['overhead_median_s']} s "
            f"(target {r['target_overhead']}); Ray start {pj['ray']['startup_s']} s, stop "
            f"{pj['ray']['shutdown_s']} s; the same job trains and evaluates "
            f"{r.get('train_eval_ratio_ray_over_local')}x as long under Ray"
        )
    (OUT / "foundation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    sys.path.insert(0, str(REPO))
    from tests.bench.stability_bench import markdown

    stability = markdown(figures)
    (OUT / "stability.md").write_text("\n".join(stability) + "\n")
    print("\n".join(stability))
    from tests.bench.reliability import markdown as reliability_markdown

    reliability = reliability_markdown(figures)
    if reliability:
        (OUT / "reliability.md").write_text("\n".join(reliability) + "\n")
        print("\n".join(reliability))


if __name__ == "__main__":
    main()
