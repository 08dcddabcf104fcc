"""Faults injected for real: a driver killed with SIGKILL (local and Ray), many workers writing at
once, a results folder that cannot be written. Every test checks Optuna and MLflow agree and that
nothing finished was lost or repeated."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import (
    become_subreaper,
    children_as_found,
    descendants,
    rlsweep,
    split_runs,
    stores,
    subprocess_env,
    tiny_spec,
    wait_for_states,
)

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def _subreaper() -> None:
    """Whatever a killed driver leaves behind is re-parented to this test process, and seen."""
    become_subreaper()


def kill_driver_mid_sweep(cwd: Path, spec: str, *args: str) -> set[int]:
    """Start ``rlsweep run``, SIGKILL the driver once a trial is done and the next is running (sampled),
    and return the numbers of the trials that had finished. Asserts nothing of it survives."""
    name = yaml.safe_load((cwd / spec).read_text())["name"]
    ours = set(descendants())  # this test process's own helpers (e.g. multiprocessing's resource tracker)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweeps", "run", spec, *args],
        cwd=cwd,
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    db = cwd / "results" / name / "optuna.db"
    # a RUNNING trial with its params sampled: its seed is running (one asked but not yet sampled has
    # no config to rerun, and killing the driver then loses nothing)
    states = wait_for_states(db, lambda s: "COMPLETE" in s and "RUNNING" in s, sampled=True)
    assert "COMPLETE" in states and "RUNNING" in states, states
    below = descendants(proc.pid)
    assert below  # workers (local) or the Ray instance and its workers (ray)
    for command in below.values():  # Ray's dashboard, if it runs at all, listens on this machine only
        assert "dashboard.py" not in command or "--host=127.0.0.1" in command, command
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)

    def left() -> dict[int, str]:
        return {pid: cmd for pid, cmd in descendants().items() if pid not in ours}

    deadline = time.monotonic() + 20
    while left() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left(), f"processes outlived the killed driver: {left()}"
    import optuna

    study = optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
    return {t.number for t in study.get_trials() if t.state.name == "COMPLETE"}


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_driver_killed_mid_sweep_resumes_without_losing_or_repeating(backend: str, tmp_path: Path) -> None:
    data = tiny_spec(f"killed_{backend}", total_timesteps=2048, seeds=1, trials=3, objective={"eval_episodes": 1})
    (tmp_path / "killed.yaml").write_text(yaml.safe_dump(data))
    args = ("--workers", "1", "--backend", backend)
    finished = kill_driver_mid_sweep(tmp_path, "killed.yaml", *args)
    _, _, study = stores(tmp_path, data["name"])
    before = {t.number: t.params for t in study.get_trials() if t.number in finished}

    result = rlsweep(tmp_path, "run", "killed.yaml", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rerun after an interruption" in result.stdout
    client, experiment, study = stores(tmp_path, data["name"])
    trials = study.get_trials()
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    interrupted = [t for t in trials if t.user_attrs.get("rlsweep.outcome") == "interrupted"]
    assert len(complete) == 3 and len(interrupted) == 1  # the requested number, plus the one cut short
    for number, params in before.items():  # finished work kept, exactly once
        assert [t.params for t in complete if t.number == number] == [params]
    rerun = [t for t in complete if t.number not in before]
    assert interrupted[0].params in [t.params for t in rerun]  # the interrupted config ran again
    parents, children = split_runs(client, experiment.experiment_id)
    by_status: dict[str, int] = {}
    for run in parents:
        by_status[run.info.status] = by_status.get(run.info.status, 0) + 1
    # the interrupted trial's runs are KILLED (absent if the kill came before the driver created them)
    assert (
        by_status.get("FINISHED") == 3 and by_status.get("KILLED", 0) <= 1 and set(by_status) <= {"FINISHED", "KILLED"}
    )
    assert sorted(int(r.data.tags["rlsweep.trial"]) for r in parents if r.info.status == "FINISHED") == sorted(
        t.number for t in complete
    )  # MLflow and Optuna agree, trial by trial
    assert sum(c.info.status == "FINISHED" for c in children) == 3
    assert all(r.info.status != "RUNNING" for r in parents + children)


def test_four_workers_forty_trials_lose_and_repeat_nothing(tmp_path: Path) -> None:
    data = tiny_spec(
        "crowd",
        total_timesteps=128,
        seeds=1,
        trials=40,
        objective={"eval_episodes": 1},
        hyperparams={"n_steps": 32, "batch_size": 64, "n_epochs": 1, "policy_kwargs": {"net_arch": [4]}},
        stability={"enabled": False},
    )
    (tmp_path / "crowd.yaml").write_text(yaml.safe_dump(data))
    ours = set(descendants())
    result = rlsweep(tmp_path, "run", "crowd.yaml", "--workers", "4")
    assert result.returncode == 0, result.stdout + result.stderr
    # it returned only after every process it started had ended and been waited for: workers and
    # helpers such as multiprocessing's resource tracker (this process is their subreaper, so an
    # orphan would be seen here, even one that has already died), with no grace period
    assert {pid: what for pid, what in children_as_found().items() if pid not in ours} == {}
    assert {pid: cmd for pid, cmd in descendants().items() if pid not in ours} == {}
    client, experiment, study = stores(tmp_path, "crowd")
    trials = study.get_trials()
    assert sorted(t.number for t in trials) == list(range(40))
    assert all(t.state.name == "COMPLETE" for t in trials)
    parents, children = split_runs(client, experiment.experiment_id)
    assert sorted(int(r.data.tags["rlsweep.trial"]) for r in parents) == list(range(40))
    assert sorted(int(r.data.tags["rlsweep.trial"]) for r in children) == list(range(40))
    assert {r.info.status for r in parents + children} == {"FINISHED"}
    workers = {r.data.tags["rlsweep.worker"] for r in children}
    assert len(workers) == 4  # all four really ran trials
    for run in parents:  # each trial's stored objective is its seed's return, once
        trial = trials[int(run.data.tags["rlsweep.trial"])]
        assert run.data.metrics["objective"] == pytest.approx(trial.value)


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, 16 * 1024))  # writes past 16 KB fail: a full disk


@pytest.mark.parametrize("fault", ["results is a file", "disk full"])
def test_unwritable_results_refused_before_any_trial(fault: str, tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(tiny_spec("nowhere")))
    if fault == "results is a file":
        (tmp_path / "results").write_text("not a folder")
    result = subprocess.run(
        [sys.executable, "-m", "sweeps", "run", "s.yaml"],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_file_size if fault == "disk full" else None,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "cannot write to results" in result.stderr
    assert "nowhere: PPO" not in result.stdout  # no sweep started
    assert not list(tmp_path.rglob("*.db"))
