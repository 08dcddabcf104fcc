"""Stability benchmarks: callback cost, detection timing, classification quality, stop_on savings.

Called by ``tests/bench/run.py`` (``make bench``); each function returns a JSON-able dict.

* ``cost``: StabilityCallback on/off over the same SB3 runs (``stability_cost.py``).
* ``detection``: the labelled failure corpus (``conf/corpus``): held-out and calibration
  figures on both paths, false-stop rates, time from onset to verdict, leave-one-mechanism-out.
* ``stop_on``: a sweep where half the trials are doomed, run with and without
  ``stability.stop_on``; total wall time of each.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")


def cost(repeat: int) -> dict:
    result = subprocess.run(
        [sys.executable, str(REPO / "tests" / "bench" / "stability_cost.py"), str(max(repeat, 2))],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=ENV,
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def _seed_rows(cwd: Path, spec_name: str) -> list[dict[str, Any]]:
    """Per seed run: params, verdict.json (onset, detected_step), budget, stop reason."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{cwd / 'results' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(spec_name)
    rows = []
    for run in client.search_runs([experiment.experiment_id], filter_string="tags.`rlsweep.seed` != ''"):
        folder = client.download_artifacts(run.info.run_id, "stability/verdict.json", str(cwd / run.info.run_id))
        verdict = json.loads(Path(folder).read_text())
        rows.append(
            {
                "params": {k: yaml.safe_load(v) for k, v in run.data.params.items()},
                "seed": int(run.data.tags["rlsweep.seed"]),
                "verdict": verdict["verdict"],
                "onset_step": verdict.get("onset_step"),
                "detected_step": verdict.get("detected_step"),
                "last_step": verdict.get("last_step"),
                "stopped_by": run.data.tags.get("stability.stopped_by"),
            }
        )
    return rows


def detection(repeat: int) -> dict:
    """Run the labelled corpus (finished runs are kept) and score it: held-out and calibration
    halves, both paths, leave-one-mechanism-out (``tests/bench/corpus``)."""
    corpus = REPO / "tests" / "bench" / "corpus"
    subprocess.run(
        [sys.executable, str(corpus / "run.py"), "--jobs", "2"],
        check=True,
        cwd=REPO,
        env=ENV,
        stdout=subprocess.DEVNULL,
    )
    sys.path[:0] = [str(corpus)]
    import report

    figures = report.evaluate(REPO / "results" / "corpus" / "runs")
    return {k: v for k, v in figures.items() if not k.endswith("_rows")}


def stop_on(repeat: int) -> dict:
    """PPO on CartPole, 4 learning rates of which 2 are doomed (1e-12, 1e-10), 2 seeds, 20k steps."""
    spec = {
        "name": "half_doomed",
        "env": {"id": "CartPole-v1", "n_envs": 1},
        "algo": "PPO",
        "total_timesteps": 20480,
        "hyperparams": {"n_steps": 256, "batch_size": 64, "n_epochs": 4},
        "space": {"learning_rate": {"type": "choice", "values": [1e-12, 1e-10, 3e-4, 1e-3]}},
        "seeds": 2,
        "sampler": {"kind": "grid"},
        "objective": {"eval_episodes": 5},
    }
    out: dict[str, Any] = {"without_s": [], "with_s": []}
    for _ in range(max(repeat, 1)):
        for key, extra in (("without_s", {}), ("with_s", {"stability": {"stop_on": ["dead_policy_gradient"]}})):
            cwd = Path(tempfile.mkdtemp(prefix="rlsweep-stop-"))
            try:
                (cwd / "s.yaml").write_text(yaml.safe_dump(spec | extra))
                started = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-m", "sweeps", "run", "s.yaml", "--workers", "2"],
                    cwd=cwd,
                    env=ENV,
                    check=True,
                    capture_output=True,
                )
                out[key].append(round(time.perf_counter() - started, 1))
                if extra:
                    out["verdicts"] = [
                        (r["params"]["learning_rate"], r["verdict"], r["stopped_by"], r["last_step"])
                        for r in _seed_rows(cwd, "half_doomed")
                    ]
            finally:
                shutil.rmtree(cwd, ignore_errors=True)
    import statistics

    out["saved_fraction"] = round(1 - statistics.median(out["with_s"]) / statistics.median(out["without_s"]), 3)
    return out


def markdown(figures: dict[str, Any]) -> list[str]:
    lines = ["# Stability benchmarks (make bench)", ""]
    c = figures.get("stability_cost")
    if c:
        lines += [
            f"## Callback cost ({c['date']}, {c['steps']} steps, x{c['repeat']} alternated; target {c['target']})",
            "",
            "| run | with / without (wall) | with / without (CPU) |",
            "|-|-|-|",
        ]
        lines += [f"| {k} | {v['ratio_wall']} | {v['ratio_cpu']} |" for k, v in c["configs"].items()]
        lines.append("")
    d = figures.get("stability_detection")
    if d:
        sys.path[:0] = [str(REPO / "tests" / "bench" / "corpus")]
        import report

        lines += report.markdown(d)
    s = figures.get("stability_stop_on")
    if s:
        lines += [
            f"## stop_on ({s['date']}): PPO CartPole, 4 learning rates (2 doomed) x 2 seeds, 2 workers",
            "",
            f"- without stop_on: {s['without_s']} s; with stop_on [dead_policy_gradient]: {s['with_s']} s; "
            f"saved {s['saved_fraction']:.0%} of the sweep's wall time",
            f"- per seed (learning_rate, verdict, stopped_by, last step): {s.get('verdicts')}",
            "",
        ]
    z = figures.get("zoo")
    if z:
        lines += [
            f"## Against rl-zoo3's tuner ({z['date']}): PPO {z['env']}, {z['trials']} configs x {z['steps']} steps, "
            f"{z['eval_episodes']} eval episodes",
            "",
            f"- rl-zoo3 `-optimize` (random sampler, median pruner): {z['zoo_s']['1']} s with --n-jobs 1, "
            f"{z['zoo_s']['2']} s with --n-jobs 2",
            f"- rlsweep replaying the same configs (grid over `space.preset`): {z['rlsweep_s']['1']} s with "
            f"--workers 1, {z['rlsweep_s']['2']} s with --workers 2; ratio rlsweep / rl-zoo3 = "
            f"{z['ratio_rlsweep_over_zoo']['1']} (1) and {z['ratio_rlsweep_over_zoo']['2']} (2)",
            f"- rl-zoo3 marked {z['zoo_pruned_or_failed']} trials pruned or failed; rlsweep names a failure "
            f"class for {z['named_by_rlsweep']} of them",
            "",
            "| rl-zoo3 trial | rl-zoo3 state | rlsweep outcome | rlsweep verdict | rlsweep objective |",
            "|-|-|-|-|-|",
        ]
        lines += [
            f"| {r['zoo_trial']} | {r['zoo_state']} | {r['rlsweep_outcome']} | {r['rlsweep_verdict']} | "
            f"{r['rlsweep_value']} |"
            for r in z["trials_table"]
        ]
        lines.append("")
    return lines
