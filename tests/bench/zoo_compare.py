"""rlsweep against rl-zoo3's tuner (`python -m rl_zoo3.train -optimize`) on the same configs.

1. rl-zoo3 tunes PPO on CartPole-v1 (random sampler, median pruner, its default search space),
   its study in SQLite; wall time measured.
2. The configs its study sampled are replayed in rlsweep as a grid over ``space.preset`` (one
   preset per rl-zoo3 trial, converted with rl-zoo3's own converter), same steps, same number of
   evaluation episodes, one seed, with ``--workers 1`` and ``--workers 2``.
3. Reported: wall-time ratios, and how many of rl-zoo3's trials it marked merely PRUNED (or FAIL)
   that rlsweep names a failure class for.

    python zoo_compare.py [TRIALS] [STEPS]      (prints one JSON object)
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

import yaml

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
EVAL_EPISODES = 5


def _zoo(cwd: Path, trials: int, steps: int, jobs: int) -> float:
    command = [
        sys.executable,
        "-m",
        "rl_zoo3.train",
        "--algo",
        "ppo",
        "--env",
        "CartPole-v1",
        "-optimize",
        "--n-trials",
        str(trials),
        "--n-jobs",
        str(jobs),
        "-n",
        str(steps),
        "--sampler",
        "random",
        "--pruner",
        "median",
        "--n-startup-trials",
        "2",
        "--n-evaluations",
        "2",
        "--eval-episodes",
        str(EVAL_EPISODES),
        "--storage",
        f"sqlite:///{cwd / 'zoo.db'}",
        "--study-name",
        "zoo",
        "--seed",
        "0",
        "--no-optim-plots",
        "-f",
        str(cwd / "logs"),
        "--vec-env",
        "dummy",
    ]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(result.stdout[-3000:] + result.stderr[-3000:])
    return seconds


def _presets(cwd: Path) -> list[tuple[int, str, dict]]:
    """(zoo trial number, its state, the config as an rlsweep preset)."""
    import optuna
    from rl_zoo3.hyperparams_opt import convert_onpolicy_params

    study = optuna.load_study(study_name="zoo", storage=f"sqlite:///{cwd / 'zoo.db'}")
    out = []
    for t in study.trials:
        kwargs = convert_onpolicy_params(dict(t.params))
        preset = {}
        for key, value in kwargs.items():
            if key == "policy_kwargs":
                pk = dict(value)
                if "activation_fn" in pk:
                    pk["activation_fn"] = pk["activation_fn"].__name__.lower()
                preset["policy_kwargs"] = pk
            else:
                preset[key] = value
        out.append((t.number, t.state.name, preset))
    return out


def _rlsweep(cwd: Path, presets: list[dict], steps: int, workers: int) -> tuple[float, dict[int, dict]]:
    spec = {
        "name": "replay",
        "env": {"id": "CartPole-v1", "n_envs": 8},
        "algo": "PPO",
        "total_timesteps": steps,
        "space": {"preset": {"type": "choice", "values": presets}},
        "seeds": [0],
        "sampler": {"kind": "grid"},
        "objective": {"eval_episodes": EVAL_EPISODES},
    }
    (cwd / "replay.yaml").write_text(yaml.safe_dump(spec))
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "sweeps", "run", "replay.yaml", "--workers", str(workers)],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(result.stdout[-3000:] + result.stderr[-3000:])
    import optuna

    study = optuna.load_study(study_name="replay", storage=f"sqlite:///{cwd / 'results/replay/optuna.db'}")
    by_preset = {}
    for t in study.trials:
        by_preset[json.dumps(t.user_attrs["rlsweep.params"]["preset"], sort_keys=True)] = {
            "state": t.state.name,
            "outcome": t.user_attrs.get("rlsweep.outcome"),
            "verdict": t.user_attrs.get("rlsweep.verdict"),
            "value": t.value,
        }
    return seconds, by_preset


def main(trials: int, steps: int) -> None:
    out: dict = {
        "trials": trials,
        "steps": steps,
        "eval_episodes": EVAL_EPISODES,
        "env": "CartPole-v1",
        "algo": "PPO",
        "zoo_s": {},
        "rlsweep_s": {},
    }
    zoo_dir = Path(tempfile.mkdtemp(prefix="zoo-"))
    try:
        out["zoo_s"]["1"] = round(_zoo(zoo_dir, trials, steps, 1), 1)
        presets = _presets(zoo_dir)
        jobs2 = Path(tempfile.mkdtemp(prefix="zoo2-"))
        try:
            out["zoo_s"]["2"] = round(_zoo(jobs2, trials, steps, 2), 1)
        finally:
            shutil.rmtree(jobs2, ignore_errors=True)
        replay = {}
        for workers in (1, 2):
            cwd = Path(tempfile.mkdtemp(prefix="replay-"))
            try:
                seconds, replay = _rlsweep(cwd, [p for _, _, p in presets], steps, workers)
                out["rlsweep_s"][str(workers)] = round(seconds, 1)
            finally:
                shutil.rmtree(cwd, ignore_errors=True)
        rows = []
        for number, state, preset in presets:
            mine = replay.get(json.dumps(preset, sort_keys=True), {})
            rows.append(
                {
                    "zoo_trial": number,
                    "zoo_state": state,
                    "rlsweep_outcome": mine.get("outcome"),
                    "rlsweep_verdict": mine.get("verdict"),
                    "rlsweep_value": mine.get("value"),
                }
            )
        out["trials_table"] = rows
        not_complete = [r for r in rows if r["zoo_state"] != "COMPLETE"]
        out["zoo_pruned_or_failed"] = len(not_complete)
        out["named_by_rlsweep"] = sum(r["rlsweep_verdict"] not in (None, "healthy") for r in not_complete)
        out["ratio_rlsweep_over_zoo"] = {w: round(out["rlsweep_s"][w] / out["zoo_s"][w], 3) for w in ("1", "2")}
    finally:
        shutil.rmtree(zoo_dir, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8, int(sys.argv[2]) if len(sys.argv) > 2 else 20_000)
