"""Stability benchmarks: callback cost, detection timing, classification quality, stop_on savings.

Called by ``tests/bench/run.py`` (``make bench``); each function returns a JSON-able dict.

* ``cost``: StabilityCallback on/off over the same SB3 runs (``stability_cost.py``).
* ``detection``: every reproduction and healthy baseline with a known label, run as sweeps
  (2 seeds each) or, for the hand-written PPO, as a script diagnosed from its TensorBoard log.
  Per seed: verdict, onset step, the step at which the verdict was reached during training,
  and the budget. Then per-class precision and recall over the labelled seeds.
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

# (label, conf file, overrides, expected verdict per trial as a function of its params)
SWEEPS: list[tuple[str, str, dict[str, Any], Any]] = [
    ("a2c report (broken)", "repro_a2c_nan_scale",
     {"space": {}, "hyperparams": {"n_steps": 5, "learning_rate": 0.1, "max_grad_norm": "off",
                                   "log_std_bounds": [-103, 88], "normalize": {"reward": False}}}, "nan_scale"),
    ("a2c report (knobs applied)", "repro_a2c_nan_scale",
     {"space": {}, "hyperparams": {"n_steps": 5, "learning_rate": 7.0e-4, "max_grad_norm": 0.5,
                                   "log_std_bounds": [-5, 2], "normalize": {"reward": True}}}, "healthy"),
    ("recurrent report", "repro_recurrent_dead", {},
     lambda params: "healthy" if params["normalize.reward"] else "dead_policy_gradient"),
    ("recurrent zero-reward branch", "repro_recurrent_zero_reward", {}, "degenerate_reward"),
    ("zoo PPO CartPole (converges)", "zoo_ppo_cartpole", {}, "healthy"),
    ("zoo A2C CartPole", "zoo_a2c_cartpole", {}, "healthy"),
    ("zoo PPO Pendulum", "zoo_ppo_pendulum", {}, "healthy"),
    ("zoo A2C Pendulum", "zoo_a2c_pendulum", {}, "healthy"),
]
CLEANRL = [("hand-written PPO, weight_decay 0.1", ["--weight-decay", "0.1"], "stuck_value_loss"),
           ("hand-written PPO, all bugs", ["--weight-decay", "0.1", "--dropout-in-forward", "--head-std", "1.0"],
            "stuck_value_loss"),
           ("hand-written PPO, no bugs", [], "healthy"),
           ("hand-written PPO, dropout in forward", ["--dropout-in-forward"], None),
           ("hand-written PPO, head std 1.0", ["--head-std", "1.0"], None)]


def cost(repeat: int) -> dict:
    result = subprocess.run([sys.executable, str(REPO / "tests" / "bench" / "stability_cost.py"), str(max(repeat, 2))],
                            capture_output=True, text=True, cwd=REPO, env=ENV)
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def _run_sweep(cwd: Path, conf: str, overrides: dict[str, Any]) -> float:
    spec = yaml.safe_load((REPO / "conf" / "sweeps" / f"{conf}.yaml").read_text()) | overrides
    (cwd / "spec.yaml").write_text(yaml.safe_dump(spec))
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "sweeps", "run", "spec.yaml", "--workers", "2"], cwd=cwd, env=ENV,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(result.stdout[-2000:] + result.stderr[-2000:])
    return time.perf_counter() - started


def _seed_rows(cwd: Path, spec_name: str) -> list[dict[str, Any]]:
    """Per seed run: params, verdict.json (onset, detected_step), budget, stop reason."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{cwd / 'results' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(spec_name)
    rows = []
    for run in client.search_runs([experiment.experiment_id], filter_string="tags.`rlsweep.seed` != ''"):
        folder = client.download_artifacts(run.info.run_id, "stability/verdict.json", str(cwd / run.info.run_id))
        verdict = json.loads(Path(folder).read_text())
        rows.append({"params": {k: yaml.safe_load(v) for k, v in run.data.params.items()},
                     "seed": int(run.data.tags["rlsweep.seed"]), "verdict": verdict["verdict"],
                     "onset_step": verdict.get("onset_step"), "detected_step": verdict.get("detected_step"),
                     "last_step": verdict.get("last_step"), "stopped_by": run.data.tags.get("stability.stopped_by")})
    return rows


def detection(repeat: int) -> dict:
    seeds: list[dict[str, Any]] = []
    for label, conf, overrides, expected in SWEEPS:
        cwd = Path(tempfile.mkdtemp(prefix="rlsweep-stab-"))
        try:
            seconds = _run_sweep(cwd, conf, overrides)
            name = yaml.safe_load((REPO / "conf" / "sweeps" / f"{conf}.yaml").read_text())["name"]
            for row in _seed_rows(cwd, name):
                want = expected(row["params"]) if callable(expected) else expected
                budget = int(row["params"].get("total_timesteps") or yaml.safe_load(
                    (REPO / "conf" / "sweeps" / f"{conf}.yaml").read_text())["total_timesteps"])
                seeds.append({"case": label, "expected": want, "budget": budget, "sweep_seconds": round(seconds, 1),
                              **{k: row[k] for k in ("seed", "verdict", "onset_step", "detected_step",
                                                     "last_step", "stopped_by")}})
        finally:
            shutil.rmtree(cwd, ignore_errors=True)
    for label, flags, expected in CLEANRL:
        for seed in (1, 2):
            cwd = Path(tempfile.mkdtemp(prefix="rlsweep-stab-"))
            try:
                subprocess.run([sys.executable, str(REPO / "conf" / "repro" / "cleanrl_ppo.py"), "--total-timesteps",
                                "30000", "--seed", str(seed), "--logdir", str(cwd / "tb"), *flags], check=True,
                               capture_output=True, env=ENV)
                out = subprocess.run([sys.executable, "-m", "sweeps", "diagnose", str(cwd / "tb"), "--json"],
                                     capture_output=True, text=True, env=ENV, check=True, cwd=cwd).stdout
                report = json.loads(out)
                seeds.append({"case": label, "expected": expected, "budget": 30000, "seed": seed,
                              "verdict": report["verdict"], "onset_step": report["onset_step"],
                              "detected_step": None, "last_step": report["last_step"], "stopped_by": None})
            finally:
                shutil.rmtree(cwd, ignore_errors=True)
    return {"seeds": seeds, "classes": _precision_recall([s for s in seeds if s["expected"] is not None])}


def _precision_recall(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    classes = sorted({r["expected"] for r in rows} | {r["verdict"] for r in rows})
    table = {}
    for c in classes:
        tp = sum(r["expected"] == c and r["verdict"] == c for r in rows)
        predicted = sum(r["verdict"] == c for r in rows)
        actual = sum(r["expected"] == c for r in rows)
        table[c] = {"true_positive": tp, "predicted": predicted, "actual": actual,
                    "precision": round(tp / predicted, 3) if predicted else None,
                    "recall": round(tp / actual, 3) if actual else None}
    return table


def stop_on(repeat: int) -> dict:
    """PPO on CartPole, 4 learning rates of which 2 are doomed (1e-12, 1e-10), 2 seeds, 20k steps."""
    spec = {"name": "half_doomed", "env": {"id": "CartPole-v1", "n_envs": 1}, "algo": "PPO",
            "total_timesteps": 20480,
            "hyperparams": {"n_steps": 256, "batch_size": 64, "n_epochs": 4},
            "space": {"learning_rate": {"type": "choice", "values": [1e-12, 1e-10, 3e-4, 1e-3]}},
            "seeds": 2, "sampler": {"kind": "grid"}, "objective": {"eval_episodes": 5}}
    out: dict[str, Any] = {"without_s": [], "with_s": []}
    for _ in range(max(repeat, 1)):
        for key, extra in (("without_s", {}), ("with_s", {"stability": {"stop_on": ["dead_policy_gradient"]}})):
            cwd = Path(tempfile.mkdtemp(prefix="rlsweep-stop-"))
            try:
                (cwd / "s.yaml").write_text(yaml.safe_dump(spec | extra))
                started = time.perf_counter()
                subprocess.run([sys.executable, "-m", "sweeps", "run", "s.yaml", "--workers", "2"], cwd=cwd, env=ENV,
                               check=True, capture_output=True)
                out[key].append(round(time.perf_counter() - started, 1))
                if extra:
                    out["verdicts"] = [(r["params"]["learning_rate"], r["verdict"], r["stopped_by"], r["last_step"])
                                       for r in _seed_rows(cwd, "half_doomed")]
            finally:
                shutil.rmtree(cwd, ignore_errors=True)
    import statistics

    out["saved_fraction"] = round(1 - statistics.median(out["with_s"]) / statistics.median(out["without_s"]), 3)
    return out


def markdown(figures: dict[str, Any]) -> list[str]:
    lines = ["# Stability benchmarks (make bench)", ""]
    c = figures.get("stability_cost")
    if c:
        lines += [f"## Callback cost ({c['date']}, {c['steps']} steps, x{c['repeat']} alternated; target {c['target']})",
                  "", "| run | with / without (wall) | with / without (CPU) |", "|-|-|-|"]
        lines += [f"| {k} | {v['ratio_wall']} | {v['ratio_cpu']} |" for k, v in c["configs"].items()]
        lines.append("")
    d = figures.get("stability_detection")
    if d:
        lines += [f"## Detection ({d['date']})", "",
                  "| case | seed | expected | verdict | onset step | reached at step | budget |", "|-|-|-|-|-|-|-|"]
        for s in d["seeds"]:
            lines.append(f"| {s['case']} | {s['seed']} | {s['expected'] or '(no label)'} | {s['verdict']} | "
                         f"{s['onset_step'] if s['onset_step'] is not None else '-'} | "
                         f"{s['detected_step'] if s['detected_step'] is not None else '(after the run)' if s['verdict'] != 'healthy' else '-'} | "
                         f"{s['budget']} |")
        lines += ["", "| class | precision | recall | seeds labelled | seeds given |", "|-|-|-|-|-|"]
        for name, r in d["classes"].items():
            lines.append(f"| {name} | {r['precision']} | {r['recall']} | {r['actual']} | {r['predicted']} |")
        lines.append("")
    s = figures.get("stability_stop_on")
    if s:
        lines += [f"## stop_on ({s['date']}): PPO CartPole, 4 learning rates (2 doomed) x 2 seeds, 2 workers", "",
                  f"- without stop_on: {s['without_s']} s; with stop_on [dead_policy_gradient]: {s['with_s']} s; "
                  f"saved {s['saved_fraction']:.0%} of the sweep's wall time",
                  f"- per seed (learning_rate, verdict, stopped_by, last step): {s.get('verdicts')}", ""]
    z = figures.get("zoo")
    if z:
        lines += [f"## Against rl-zoo3's tuner ({z['date']}): PPO {z['env']}, {z['trials']} configs x {z['steps']} steps, "
                  f"{z['eval_episodes']} eval episodes", "",
                  f"- rl-zoo3 `-optimize` (random sampler, median pruner): {z['zoo_s']['1']} s with --n-jobs 1, "
                  f"{z['zoo_s']['2']} s with --n-jobs 2",
                  f"- rlsweep replaying the same configs (grid over `space.preset`): {z['rlsweep_s']['1']} s with "
                  f"--workers 1, {z['rlsweep_s']['2']} s with --workers 2; ratio rlsweep / rl-zoo3 = "
                  f"{z['ratio_rlsweep_over_zoo']['1']} (1) and {z['ratio_rlsweep_over_zoo']['2']} (2)",
                  f"- rl-zoo3 marked {z['zoo_pruned_or_failed']} trials pruned or failed; rlsweep names a failure "
                  f"class for {z['named_by_rlsweep']} of them", "",
                  "| rl-zoo3 trial | rl-zoo3 state | rlsweep outcome | rlsweep verdict | rlsweep objective |",
                  "|-|-|-|-|-|"]
        lines += [f"| {r['zoo_trial']} | {r['zoo_state']} | {r['rlsweep_outcome']} | {r['rlsweep_verdict']} | "
                  f"{r['rlsweep_value']} |" for r in z["trials_table"]]
        lines.append("")
    return lines
