"""Faults injected into real sweeps, counted: ``make bench`` writes results/benchmarks/reliability.md.

For each fault: how many times it was injected, how many finished trials were lost or repeated
(target 0 for both), and for driver kills the time from rerunning the command until a trial
runs again.

    python tests/bench/reliability.py [KILLS]   -> one JSON line on stdout
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.helpers import (  # noqa: E402
    descendants,
    rlsweep,
    split_runs,
    stores,
    study_states,
    subprocess_env,
    tiny_spec,
    wait_for_states,
)

LRS = [1e-4, 2e-4, 3e-4, 5e-4, 7e-4, 1e-3, 2e-3, 3e-3]


def _grid(name: str, **over) -> dict:
    return tiny_spec(
        name,
        total_timesteps=4096,
        seeds=1,
        trials=None,
        objective={"eval_episodes": 1},
        space={"learning_rate": {"type": "choice", "values": LRS}},
        sampler={"kind": "grid"},
        **over,
    )


def _ledger(cwd: Path, name: str) -> dict:
    """What both stores hold: finished trials by config, and whether they agree."""
    client, experiment, study = stores(cwd, name)
    complete = [t for t in study.get_trials() if t.state.name == "COMPLETE"]
    parents, _ = split_runs(client, experiment.experiment_id)
    finished_runs = sorted(int(r.data.tags["rlsweep.trial"]) for r in parents if r.info.status == "FINISHED")
    configs = [t.params["learning_rate"] for t in complete]
    return {
        "complete": {t.number: t.params["learning_rate"] for t in complete},
        "repeated": len(configs) - len(set(configs)),
        "agree": finished_runs == sorted(t.number for t in complete),
    }


def driver_kills(backend: str, kills: int) -> dict:
    """One 8-trial grid sweep; the driver is SIGKILLed ``kills`` times, each time once one more
    trial has finished, and the command rerun."""
    cwd = Path(tempfile.mkdtemp(prefix="rlsweep-rel-"))
    name = f"rel_{backend}"
    (cwd / "s.yaml").write_text(yaml.safe_dump(_grid(name)))
    db = cwd / "results" / name / "optuna.db"
    args = [sys.executable, "-m", "sweeps", "run", "s.yaml", "--workers", "2", "--backend", backend]
    lost, resume, leftovers, injected = 0, [], 0, 0
    try:
        for k in range(kills):
            launched = time.monotonic()
            proc = subprocess.Popen(
                args, cwd=cwd, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            known = study_states(db)
            done_before = known.count("COMPLETE")
            if k:
                resume.append(_resumed(db, known, launched))
            wait_for_states(db, lambda s, n=done_before: s.count("COMPLETE") > n and "RUNNING" in s)
            before = _ledger(cwd, name)["complete"]
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            injected += 1
            time.sleep(3)
            leftovers += len(descendants(proc.pid)) + sum(1 for p in _orphans())
            after = _ledger(cwd, name)["complete"]
            lost += sum(1 for n in before if n not in after)
        launched, known = time.monotonic(), study_states(db)
        proc = subprocess.Popen(
            args, cwd=cwd, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        resume.append(_resumed(db, known, launched))
        code = proc.wait()
        final = _ledger(cwd, name)
        return {
            "injected": injected,
            "trials_lost": lost + (len(LRS) - len(final["complete"])),
            "trials_repeated": final["repeated"],
            "stores_agree": final["agree"],
            "final_exit": code,
            "resume_s": resume,
            "processes_left": leftovers,
        }
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


def _resumed(db: Path, known: list[str], launched: float) -> float:
    """Seconds from launching a rerun until it runs trials again: a trial it asked Optuna for (the
    interrupted config, queued again, comes first) is running, or one more has finished."""
    wait_for_states(db, lambda s: "RUNNING" in s[len(known) :] or s.count("COMPLETE") > known.count("COMPLETE"))
    return round(time.monotonic() - launched, 2)


def _orphans() -> list[int]:
    """Ray processes re-parented to init (what a killed driver would leave)."""
    from sweeps.backends._reaper import process_table

    found = []
    for pid, (ppid, _, state) in process_table().items():
        if ppid == 1 and state != "Z":
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"ray::" in cmd or b"raylet" in cmd or b"gcs_server" in cmd:
                found.append(pid)
    return found


def worker_kills(kills: int) -> dict:
    """Worker processes SIGKILLed from outside mid-trial, with ``backend.max_failures`` = kills."""
    cwd = Path(tempfile.mkdtemp(prefix="rlsweep-rel-"))
    (cwd / "s.yaml").write_text(yaml.safe_dump(_grid("rel_workers", backend={"max_failures": kills})))
    db = cwd / "results" / "rel_workers" / "optuna.db"
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sweeps", "run", "s.yaml", "--workers", "2"],
            cwd=cwd,
            env=subprocess_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        injected = 0
        wait_for_states(db, lambda s: "RUNNING" in s)
        while injected < kills and proc.poll() is None:
            time.sleep(1.5)
            workers = [pid for pid, cmd in descendants(proc.pid).items() if "spawn_main" in cmd]
            if workers:
                os.kill(workers[injected % len(workers)], signal.SIGKILL)
                injected += 1
        out, _ = proc.communicate()
        final = _ledger(cwd, "rel_workers")
        _, _, study = stores(cwd, "rel_workers")
        crashed = sum(t.state.name == "FAIL" for t in study.get_trials())
        return {
            "injected": injected,
            "trials_lost": len(LRS) - len(final["complete"]) - crashed,
            "crashed_after_retries": crashed,
            "trials_repeated": final["repeated"],
            "stores_agree": final["agree"],
            "retried_line": next((line for line in out.splitlines() if "ran again" in line), ""),
            "final_exit": proc.returncode,
        }
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


def trial_exceptions() -> dict:
    """One trial per kind of failure inside a trial, next to a healthy one."""
    cwd = Path(tempfile.mkdtemp(prefix="rlsweep-rel-"))
    kinds = ["raise", "keyboard", "oom", "kill"]
    spec = tiny_spec(
        "rel_exc",
        env={"id": "tests.helpers:faulty_cartpole", "n_envs": 1},
        space={
            "env.kwargs.how": {"type": "choice", "values": kinds},
            "env.kwargs.fail_at_step": {"type": "choice", "values": [None, 40]},
        },
        sampler={"kind": "grid"},
        trials=None,
        seeds=1,
        objective={"eval_episodes": 1},
    )
    (cwd / "s.yaml").write_text(yaml.safe_dump(spec))
    try:
        done = rlsweep(cwd, "run", "s.yaml", "--workers", "2")
        _, _, study = stores(cwd, "rel_exc")
        trials = study.get_trials()
        crashed = {
            t.params["env.kwargs.how"]: t.user_attrs.get("rlsweep.error", "")[:80]
            for t in trials
            if t.state.name == "FAIL"
        }
        healthy = sum(t.state.name == "COMPLETE" for t in trials)
        return {
            "injected": len(kinds),
            "recorded_as_crashed": len(crashed),
            "errors": crashed,
            "healthy_trials_complete": f"{healthy}/{len(kinds)}",
            "trials_lost": len(kinds) - healthy,
            "final_exit": done.returncode,
        }
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


def crowd() -> dict:
    """4 workers x 40 short trials writing at once."""
    cwd = Path(tempfile.mkdtemp(prefix="rlsweep-rel-"))
    spec = tiny_spec(
        "rel_crowd",
        total_timesteps=128,
        seeds=1,
        trials=40,
        objective={"eval_episodes": 1},
        hyperparams={"n_steps": 32, "batch_size": 64, "n_epochs": 1, "policy_kwargs": {"net_arch": [4]}},
    )
    (cwd / "s.yaml").write_text(yaml.safe_dump(spec))
    try:
        started = time.monotonic()
        done = rlsweep(cwd, "run", "s.yaml", "--workers", "4")
        seconds = time.monotonic() - started
        client, experiment, study = stores(cwd, "rel_crowd")
        numbers = [t.number for t in study.get_trials() if t.state.name == "COMPLETE"]
        parents, children = split_runs(client, experiment.experiment_id)
        runs = [int(r.data.tags["rlsweep.trial"]) for r in parents + children]
        return {
            "injected": 1,
            "trials": 40,
            "optuna_complete": len(numbers),
            "mlflow_runs": len(runs),
            "mlflow_duplicates": len(runs) - len(set(runs)) * 2 if runs else 0,
            "trials_lost": 40 - len(set(numbers)),
            "seconds": round(seconds, 1),
            "final_exit": done.returncode,
        }
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


def unwritable() -> dict:
    """results/ not writable (a file in its place) and a full disk (file size limit): refused up front."""
    out = {}
    for fault in ("results is a file", "disk full"):
        cwd = Path(tempfile.mkdtemp(prefix="rlsweep-rel-"))
        try:
            (cwd / "s.yaml").write_text(yaml.safe_dump(tiny_spec("rel_disk")))
            if fault == "results is a file":
                (cwd / "results").write_text("x")
            limit = (
                (lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))) if fault == "disk full" else None
            )
            done = subprocess.run(
                [sys.executable, "-m", "sweeps", "run", "s.yaml"],
                cwd=cwd,
                env=subprocess_env(),
                capture_output=True,
                text=True,
                preexec_fn=limit,
            )
            out[fault] = {
                "exit": done.returncode,
                "message": done.stderr.strip()[:200],
                "traceback": "Traceback" in done.stderr,
            }
        finally:
            shutil.rmtree(cwd, ignore_errors=True)
    return out


def main() -> None:
    kills = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    figures = {
        "driver_sigkill_local": driver_kills("local", kills),
        "driver_sigkill_ray": driver_kills("ray", max(1, kills - 1)),
        "worker_sigkill_local": worker_kills(kills),
        "trial_exceptions": trial_exceptions(),
        "four_workers_forty_trials": crowd(),
        "unwritable_results": unwritable(),
    }
    print(json.dumps(figures))


def markdown(figures: dict) -> list[str]:
    r = figures.get("reliability")
    if not r:
        return []
    lines = [
        f"# Reliability (make bench, {r['date']})",
        "",
        "| fault | injected | trials lost | repeated | notes |",
        "|---|---|---|---|---|",
    ]
    for key, label in (
        ("driver_sigkill_local", "driver SIGKILL, local workers"),
        ("driver_sigkill_ray", "driver SIGKILL, Ray backend"),
    ):
        f = r[key]
        lines.append(
            f"| {label} (8-trial grid, killed each time one more trial finished, then rerun) | "
            f"{f['injected']} | {f['trials_lost']} | {f['trials_repeated']} | time to resume (rerun "
            f"until a trial runs) {f['resume_s']} s; Optuna and MLflow agree: {f['stores_agree']}; "
            f"processes left behind: {f['processes_left']} |"
        )
    w = r["worker_sigkill_local"]
    lines.append(
        f"| worker process SIGKILL mid-trial (max_failures {w['injected']}) | {w['injected']} | "
        f"{w['trials_lost']} | {w['trials_repeated']} | {w['retried_line'] or 'no retry line'}; crashed after "
        f"retries: {w['crashed_after_retries']}; stores agree: {w['stores_agree']} |"
    )
    e = r["trial_exceptions"]
    lines.append(
        f"| exception in a trial: RuntimeError, KeyboardInterrupt, CUDA OOM (simulated), self-SIGKILL | "
        f"{e['injected']} | {e['trials_lost']} | 0 | each recorded as crashed with its class: "
        f"{'; '.join(f'{k}: {v}' for k, v in e['errors'].items())}; healthy trials complete "
        f"{e['healthy_trials_complete']} |"
    )
    c = r["four_workers_forty_trials"]
    lines.append(
        f"| 4 workers x 40 trials writing at once | {c['injected']} | {c['trials_lost']} | "
        f"{c['mlflow_duplicates']} | Optuna complete {c['optuna_complete']}/40, MLflow runs "
        f"{c['mlflow_runs']}/80, {c['seconds']} s |"
    )
    for fault, u in r["unwritable_results"].items():
        lines.append(f'| {fault} | 1 | 0 | 0 | exit {u["exit"]}, traceback: {u["traceback"]}; "{u["message"]}" |')
    return lines


if __name__ == "__main__":
    main()
