"""Best config found per hour of compute: rlsweep against rl-zoo3's tuner, side by side.

Every arm tunes PPO (CartPole-v1 by default; Acrobot-v1, Pendulum-v1) in rl-zoo3's own PPO space
(``sample_ppo_params``: batch size 2^2..2^10, n_steps 2^5..2^12, 1 - gamma and 1 - gae_lambda
log-uniform, learning rate, entropy coefficient, clip range, epochs, max grad norm, net_arch
tiny/small/medium, tanh/relu), with rl-zoo3's defaults for the env that -optimize keeps (CartPole:
8 envs; Acrobot: 16 envs, VecNormalize; Pendulum: 4 envs, gSDE), the same steps per trial, the same number of
periodic evaluations of the same number of deterministic episodes, TPE (multivariate, 5 random
start-up trials), two workers and the same wall-clock budget:

* ``zoo``: two ``python -m rl_zoo3.train -optimize`` processes sharing one journal-file study
  (rl-zoo3's way of running in parallel; ``--n-jobs 2`` threads share one interpreter and were
  slower in zoo_compare.py), each with one torch thread, median pruner;
* ``rlsweep``: ``rlsweep run --workers 2`` with the same space, median pruner on the periodic
  evaluations, and its default stability settings;
* ``rlsweep_no_pruner``: the same without a pruner.

Each arm runs from several sweep seeds and is stopped when the budget is spent; only the trials
that finished by then count (Optuna's completion times). The best value found so far is sampled
every 10 s. Then each arm's top configs are trained again on 3 fresh seeds and evaluated on more
episodes, all in one rlsweep grid sweep, so every winner is confirmed by the same code. A confirmed
config fails when a seed crashes or its mean return is below the task's ``fail_below`` (a policy
that never learned the task).

    python tests/bench/search_anytime.py [--env CartPole-v1] [--budget 300] [--steps 24000]
                                         [--seeds 0 1 2] [--top 3]

Writes results/benchmarks/search.json and search.md, and prints the JSON on its last line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "results" / "benchmarks"
ENV = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
EVALS, EPISODES, STARTUP = 3, 5, 5
# Per env: rl-zoo3's ppo.yml settings that -optimize keeps (its envs, normalisation, gSDE), as
# rlsweep hyperparams, and the return below which a confirmed config has not learned the task.
TASKS: dict[str, dict[str, Any]] = {
    "Acrobot-v1": {  # VecNormalize with the yml's gamma, not the sampled one, as rl-zoo3 does
        "n_envs": 16,
        "fixed": {"normalize": {"obs": True, "reward": True, "gamma": 0.99}},
        "fail_below": -400.0,  # -500: the tip never reached the line in an episode
    },
    "CartPole-v1": {"n_envs": 8, "fixed": {}, "fail_below": 150.0},  # a random policy: about 22
    "Pendulum-v1": {"n_envs": 4, "fixed": {"use_sde": True, "sde_sample_freq": 4}, "fail_below": -1000.0},
}
ENV_ID = "CartPole-v1"
CONFIRM_SEEDS, CONFIRM_EPISODES = [1000, 1001, 1002], 10
TICK = 10.0
ARCHS = {
    "tiny": {"pi": [64], "vf": [64]},
    "small": {"pi": [64, 64], "vf": [64, 64]},
    "medium": {"pi": [256, 256], "vf": [256, 256]},
}
# rl-zoo3's sample_ppo_params, written as an rlsweep space
SPACE = {
    "batch_size": {"type": "choice", "values": [2**p for p in range(2, 11)]},
    "n_steps": {"type": "choice", "values": [2**p for p in range(5, 13)]},
    "gamma": {"type": "loguniform", "low": 0.0001, "high": 0.03, "one_minus": True},
    "gae_lambda": {"type": "loguniform", "low": 0.0001, "high": 0.1, "one_minus": True},
    "learning_rate": {"type": "loguniform", "low": 1e-5, "high": 0.002},
    "ent_coef": {"type": "loguniform", "low": 1e-8, "high": 0.1},
    "clip_range": {"type": "choice", "values": [0.1, 0.2, 0.3, 0.4]},
    "n_epochs": {"type": "choice", "values": [1, 5, 10, 20]},
    "max_grad_norm": {"type": "uniform", "low": 0.3, "high": 2.0},
    "policy_kwargs": {
        "net_arch": {"type": "choice", "values": list(ARCHS.values())},
        "activation_fn": {"type": "choice", "values": ["tanh", "relu"]},
    },
}


# --- running an arm until its budget is spent ----------------------------------------------------
def _stop_at(procs: list[subprocess.Popen], deadline: float, logs: list[Path]) -> None:
    """Wait until ``deadline`` (monotonic), then interrupt each process group, and kill what is left."""
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(1.0)
    early = [p for p in procs if p.poll() is not None]  # ended on their own: their exit code counts
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGINT)
    grace = time.monotonic() + 10
    while time.monotonic() < grace and any(p.poll() is None for p in procs):
        time.sleep(0.5)
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    for p, log in zip(procs, logs, strict=True):
        if p in early and p.returncode != 0:
            raise RuntimeError(f"{p.args} exited {p.returncode}:\n{log.read_text()[-3000:]}")


def _spawn(command: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(command, cwd=cwd, env=ENV, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def run_zoo(cwd: Path, seed: int, steps: int, budget: float) -> tuple[dt.datetime, list[dict[str, Any]]]:
    storage = cwd / "zoo.log"
    commands = [
        [
            sys.executable,
            "-m",
            "rl_zoo3.train",
            "--algo",
            "ppo",
            "--env",
            ENV_ID,
            "-optimize",
            "--n-trials",
            "100000",
            "--n-jobs",
            "1",
            "--num-threads",
            "1",
            "-n",
            str(steps),
            "--sampler",
            "tpe",
            "--pruner",
            "median",
            "--n-startup-trials",
            str(STARTUP),
            "--n-evaluations",
            str(EVALS),
            "--eval-episodes",
            str(EPISODES),
            "--storage",
            str(storage),
            "--study-name",
            "zoo",
            "--seed",
            str(2 * seed + process),
            "--no-optim-plots",
            "-f",
            str(cwd / f"logs{process}"),
            "--vec-env",
            "dummy",
        ]  # fmt: skip
        for process in (0, 1)
    ]
    started, t0 = dt.datetime.now(), time.monotonic()
    logs = [cwd / f"zoo{process}.log" for process in (0, 1)]
    procs = []
    for command, log in zip(commands, logs, strict=True):
        procs.append(_spawn(command, cwd, log))
        time.sleep(2.0)  # the second process finds the study the first created
    _stop_at(procs, t0 + budget, logs)
    import optuna

    study = optuna.load_study(
        study_name="zoo",
        storage=optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(storage))),
    )
    from rl_zoo3.hyperparams_opt import convert_onpolicy_params

    trials = []
    for t in study.get_trials(deepcopy=False):
        config = None
        if t.params:
            kwargs = convert_onpolicy_params(dict(t.params))
            pk = dict(kwargs.pop("policy_kwargs"))
            pk["activation_fn"] = pk["activation_fn"].__name__.lower()
            config = {**kwargs, "policy_kwargs": pk}
        trials.append(_trial(t, config, safe=t.state.name == "COMPLETE"))
    return started, trials


def _spec(name: str, steps: int) -> dict[str, Any]:
    """What every rlsweep sweep of this benchmark shares: the task, as rl-zoo3 sets it up."""
    task = TASKS[ENV_ID]
    return {"name": name, "env": {"id": ENV_ID, "n_envs": task["n_envs"]}, "algo": "PPO", "total_timesteps": steps,
            "hyperparams": task["fixed"]}  # fmt: skip


def run_rlsweep(cwd: Path, seed: int, steps: int, budget: float, pruner: bool) -> tuple[dt.datetime, list[dict]]:
    spec = _spec("anytime", steps) | {
        "space": SPACE,
        "seeds": [0],
        "trials": 100000,
        "time_budget": budget,
        "sampler": {"kind": "tpe", "seed": seed, "multivariate": True, "n_startup_trials": STARTUP},
        "objective": {"eval_episodes": EPISODES, "eval_every": steps // EVALS},
        "pruner": {"kind": "median", "n_startup_trials": STARTUP} if pruner else {"kind": "none"},
    }
    (cwd / "anytime.yaml").write_text(yaml.safe_dump(spec))
    log = cwd / "rlsweep.log"
    started, t0 = dt.datetime.now(), time.monotonic()
    proc = _spawn([sys.executable, "-m", "sweeps", "run", "anytime.yaml", "--workers", "2"], cwd, log)
    _stop_at([proc], t0 + budget, [log])
    import optuna

    from stability import keys
    from sweeps import space as sp
    from sweeps.results import record

    study = optuna.load_study(study_name="anytime", storage=f"sqlite:///{cwd / 'results/anytime/optuna.db'}")
    trials = []
    for t in study.get_trials(deepcopy=False):
        config: dict[str, Any] = {}
        for name, value in t.user_attrs.get(keys.PARAMS, {}).items():
            sp.set_nested(config, name, value)
        trials.append(_trial(t, config or None, safe=record(t).safe(1)))
    return started, trials


def _trial(t: Any, config: dict | None, safe: bool) -> dict[str, Any]:
    done = t.datetime_complete
    return {
        "number": t.number,
        "state": t.state.name,
        "value": t.value if t.state.name == "COMPLETE" else None,
        "completed": done.isoformat() if done else None,
        "safe": safe,
        "verdict": t.user_attrs.get("rlsweep.verdict"),
        "config": config,
    }


# --- what an arm found -----------------------------------------------------------------------------
def counted(started: dt.datetime, trials: list[dict], budget: float) -> list[dict]:
    """The trials finished within the budget, each with its finishing time in seconds."""
    out = []
    for t in trials:
        if t["completed"] is None:
            continue
        at = (dt.datetime.fromisoformat(t["completed"]) - started).total_seconds()
        if at <= budget:
            out.append(t | {"at": round(at, 1)})
    return out


def best_curve(trials: list[dict], budget: float) -> list[float | None]:
    """The best value found by each tick of TICK seconds."""
    curve = []
    for i in range(int(budget // TICK) + 1):
        values = [t["value"] for t in trials if t["value"] is not None and t["at"] <= i * TICK]
        curve.append(max(values) if values else None)
    return curve


def exported(trials: list[dict], top: int) -> list[dict]:
    """What each tool hands the user: the best finished configs that it counts as safe."""
    chosen = [t for t in trials if t["safe"] and t["value"] is not None and math.isfinite(t["value"])]
    return sorted(chosen, key=lambda t: -t["value"])[:top]


def confirm(configs: list[dict], steps: int, cwd: Path) -> list[dict]:
    """Train every config on the fresh seeds in one rlsweep grid sweep; per config its returns and verdicts."""
    spec = _spec("confirm", steps) | {
        "space": {"preset": {"type": "choice", "values": configs}},
        "seeds": CONFIRM_SEEDS,
        "sampler": {"kind": "grid"},
        "objective": {"eval_episodes": CONFIRM_EPISODES},
    }
    (cwd / "confirm.yaml").write_text(yaml.safe_dump(spec))
    result = subprocess.run(
        [sys.executable, "-m", "sweeps", "run", "confirm.yaml", "--workers", "2"],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(result.stdout[-3000:] + result.stderr[-3000:])
    import optuna

    from sweeps.results import record

    study = optuna.load_study(study_name="confirm", storage=f"sqlite:///{cwd / 'results/confirm/optuna.db'}")
    by_config = {}
    for t in study.get_trials(deepcopy=False):
        r = record(t)
        returns = list(r.returns.values())
        crashed = len(returns) < len(CONFIRM_SEEDS) or not all(map(math.isfinite, returns))
        mean = statistics.fmean(returns) if returns and not crashed else None
        by_config[json.dumps(r.params["preset"], sort_keys=True)] = {
            "returns": [round(x, 1) for x in returns],
            "mean": None if mean is None else round(mean, 1),
            "verdicts": sorted(set(r.verdicts.values())),
            "failed": crashed or mean is None or mean < TASKS[ENV_ID]["fail_below"],
        }
    return [by_config[json.dumps(c, sort_keys=True)] for c in configs]


# --- the benchmark -----------------------------------------------------------------------------
ARMS = ("zoo", "rlsweep", "rlsweep_no_pruner")


def main() -> None:
    global ENV_ID
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=300.0, help="wall seconds per sweep")
    parser.add_argument("--steps", type=int, default=24000, help="env steps per trial")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="sweep seeds")
    parser.add_argument("--top", type=int, default=3, help="configs per sweep confirmed on fresh seeds")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    parser.add_argument("--env", default=ENV_ID, choices=sorted(TASKS))
    args = parser.parse_args()
    ENV_ID = args.env
    runs: dict[str, list[dict]] = {arm: [] for arm in args.arms}
    for seed in args.seeds:
        for arm in args.arms:  # the arms alternate, so the machine's load drifts over all of them alike
            cwd = Path(tempfile.mkdtemp(prefix=f"anytime-{arm}-"))
            try:
                if arm == "zoo":
                    started, trials = run_zoo(cwd, seed, args.steps, args.budget)
                else:
                    started, trials = run_rlsweep(cwd, seed, args.steps, args.budget, pruner=arm == "rlsweep")
            finally:
                shutil.rmtree(cwd, ignore_errors=True)
            done = counted(started, trials, args.budget)
            runs[arm].append(
                {
                    "seed": seed,
                    "trials_finished": len(done),
                    "complete": sum(t["state"] == "COMPLETE" for t in done),
                    "pruned": sum(t["state"] == "PRUNED" for t in done),
                    "failed": sum(t["state"] == "FAIL" for t in done),
                    "flagged": sum(t["state"] == "COMPLETE" and not t["safe"] for t in done),
                    "curve": best_curve(done, args.budget),
                    "exported": exported(done, args.top),
                }
            )
            print(f"{arm} seed {seed}: {len(done)} trials, best {runs[arm][-1]['curve'][-1]}", file=sys.stderr)
    configs: list[dict] = []
    for arm_runs in runs.values():
        for run in arm_runs:
            for t in run["exported"]:
                if t["config"] not in configs:
                    configs.append(t["config"])
    cwd = Path(tempfile.mkdtemp(prefix="anytime-confirm-"))
    try:
        confirmed = confirm(configs, args.steps, cwd) if configs else []
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    for arm_runs in runs.values():
        for run in arm_runs:
            for t in run["exported"]:
                t["confirmed"] = confirmed[configs.index(t["config"])]
    figures = summarise(runs, args)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "search.json").write_text(json.dumps({"figures": figures, "runs": runs}, indent=1))
    (OUT / "search.md").write_text("\n".join(markdown(figures, runs)) + "\n")
    print(json.dumps(figures))


def _median_curve(arm_runs: list[dict]) -> list[float | None]:
    out = []
    for values in zip(*(r["curve"] for r in arm_runs), strict=True):
        known = [v for v in values if v is not None]
        out.append(statistics.median(known) if len(known) == len(values) else None)
    return out


def _first_reach(curve: list[float | None], level: float | None) -> float | None:
    if level is None:
        return None
    for i, v in enumerate(curve):
        if v is not None and v >= level:
            return i * TICK
    return None


def summarise(runs: dict[str, list[dict]], args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "env": ENV_ID,
        "steps_per_trial": args.steps,
        "budget_s": args.budget,
        "sweep_seeds": args.seeds,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    for arm, arm_runs in runs.items():
        winners = [r["exported"][0]["confirmed"] for r in arm_runs if r["exported"]]
        exports = [t["confirmed"] for r in arm_runs for t in r["exported"]]
        curve = _median_curve(arm_runs)
        figures[arm] = {
            "median_curve": curve,
            "best_found_median": curve[-1],
            "trials_per_hour_median": round(
                statistics.median(r["trials_finished"] for r in arm_runs) * 3600 / args.budget
            ),
            "pruned_median": statistics.median(r["pruned"] for r in arm_runs),
            "winner_confirmed": [w["mean"] for w in winners],
            "winner_confirmed_median": _median([w["mean"] for w in winners]),
            "exported_failed": f"{sum(e['failed'] for e in exports)}/{len(exports)}",
        }
    if "zoo" in runs and "rlsweep" in runs:
        zoo_final = figures["zoo"]["best_found_median"]
        reach = _first_reach(figures["rlsweep"]["median_curve"], zoo_final)
        figures["rlsweep_reaches_zoo_final_at_s"] = reach
        figures["fraction_of_budget"] = None if reach is None else round(reach / args.budget, 3)
        reach_per_seed = [
            _first_reach(r["curve"], z["curve"][-1]) for r, z in zip(runs["rlsweep"], runs["zoo"], strict=True)
        ]
        figures["per_seed_reach_s"] = reach_per_seed
    return figures


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 1) if known and len(known) == len(values) else None


def markdown(f: dict[str, Any], runs: dict[str, list[dict]]) -> list[str]:
    lines = [
        f"# Anytime search: rlsweep vs rl-zoo3 ({f['date']})",
        "",
        f"PPO on {f['env']}, rl-zoo3's PPO space, {f['steps_per_trial']} steps per trial, {EVALS} evaluations of "
        f"{EPISODES} episodes, 2 workers each, {f['budget_s']:.0f} s per sweep, sweep seeds {f['sweep_seeds']}. "
        f"Winners confirmed on seeds {CONFIRM_SEEDS} ({CONFIRM_EPISODES} episodes); a confirmed config fails "
        f"when a seed crashes or its mean return is below {TASKS[f['env']]['fail_below']:.0f}. Produced by "
        "`python tests/bench/search_anytime.py`.",
        "",
        "| arm | trials/hour (median) | pruned (median) | best found at the budget (median) | "
        "winners confirmed (per sweep seed) | median | exported configs failing |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm in runs:
        a = f[arm]
        lines.append(
            f"| {arm} | {a['trials_per_hour_median']} | {a['pruned_median']} | {_fmt(a['best_found_median'])} | "
            f"{', '.join(map(_fmt, a['winner_confirmed']))} | {_fmt(a['winner_confirmed_median'])} | "
            f"{a['exported_failed']} |"
        )
    if "rlsweep_reaches_zoo_final_at_s" in f:
        reach = f["rlsweep_reaches_zoo_final_at_s"]
        lines += [
            "",
            "rlsweep's median best-so-far reaches rl-zoo3's median best at the budget "
            + ("never within the budget" if reach is None else f"after {reach:.0f} s ({f['fraction_of_budget']} of it)")
            + f"; per sweep seed: {f['per_seed_reach_s']} (target: at most half the budget).",
        ]
    lines += ["", "Best value found by time (median over sweep seeds):", "", "| s | " + " | ".join(runs) + " |"]
    lines.append("|---" * (len(runs) + 1) + "|")
    n = len(next(iter(f[a]["median_curve"] for a in runs)))
    step = max(1, n // 10)
    for i in list(range(0, n, step)) + ([n - 1] if (n - 1) % step else []):
        lines.append(f"| {i * TICK:.0f} | " + " | ".join(_fmt(f[a]["median_curve"][i]) for a in runs) + " |")
    return lines


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


if __name__ == "__main__":
    main()
