"""Small environments and spec builders for the test suite (entry points name this module)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gymnasium as gym

REPO = Path(__file__).resolve().parents[1]


class _Faulty(gym.Wrapper):
    """An env that fails on purpose after ``at_step`` steps: raises, kills its own process, or
    returns NaN observations (``how``).
    With ``once_marker`` (a file path) it fails only where that file does not exist yet, creating
    it first: the first job to get there fails, its retry and every other job do not."""

    def __init__(self, env: gym.Env, at_step: int | None, how: str, once_marker: str | None = None) -> None:
        super().__init__(env)
        self.at_step, self.how, self.steps, self.marker = at_step, how, 0, once_marker

    def step(self, action: Any):
        self.steps += 1
        if self.at_step is not None and self.steps >= self.at_step:
            if self.marker is not None:
                try:
                    os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    self.at_step = None
                    return self.env.step(action)
            if self.how == "nan":  # observations turn to NaN from here on
                obs, reward, terminated, truncated, info = self.env.step(action)
                return obs * float("nan"), reward, terminated, truncated, info
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.how == "keyboard":
                raise KeyboardInterrupt
            if self.how == "oom":  # what torch raises when CUDA runs out of memory
                import torch

                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (simulated)")
            raise RuntimeError(f"env exploded at step {self.steps}")
        return self.env.step(action)


def faulty_cartpole(fail_at_step: int | None = None, how: str = "raise", once_marker: str | None = None) -> gym.Env:
    return faulty_env("CartPole-v1", fail_at_step, how, once_marker)


def faulty_env(
    env_id: str, fail_at_step: int | None = None, how: str = "raise", once_marker: str | None = None
) -> gym.Env:
    return _Faulty(gym.make(env_id), fail_at_step, how, once_marker)


class _Waiting(gym.Wrapper):
    """An env whose every step waits ``step_seconds`` without using the CPU, as a simulator or a
    robot that answers slowly does: a seed that lasts seconds of wall time while costing the
    machine little, for tests that need jobs running at once or still running when something
    happens to them (on 2 cores, seeds made long by training more steps slowed every other test)."""

    def __init__(self, env: gym.Env, step_seconds: float) -> None:
        super().__init__(env)
        self.step_seconds = step_seconds

    def step(self, action: Any):
        time.sleep(self.step_seconds)
        return self.env.step(action)


def waiting_cartpole(step_seconds: float = 0.005) -> gym.Env:
    return _Waiting(gym.make("CartPole-v1"), step_seconds)


def become_subreaper() -> None:
    """Linux: processes orphaned below this one are re-parented to it rather than to init, so a
    test can see every process its subprocesses left behind."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER


def descendants(root: int | None = None) -> dict[int, str]:
    """Living descendants of ``root`` (default: this process), pid -> command line. Zombies that
    were re-parented here are reaped first."""
    from sweeps.backends._reaper import descendants as below

    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
    found = {}
    for pid in below(root or os.getpid()):
        try:
            found[pid] = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            found[pid] = "?"
    return found


def children_as_found() -> dict[int, str]:
    """This process's children as they are, none reaped, zombies included: pid -> state and name.
    A child here that this process did not start was re-parented to it (it is the subreaper): it
    outlived the process that started it, if only by a moment."""
    from sweeps.backends._reaper import process_table

    found = {}
    for pid, (ppid, _, state) in process_table().items():
        if ppid == os.getpid():
            try:
                found[pid] = f"{state} {(Path('/proc') / str(pid) / 'comm').read_text().strip()}"
            except OSError:
                found[pid] = f"{state} ?"
    return found


def tiny_spec(name: str = "tiny", **overrides: Any) -> dict[str, Any]:
    """A valid spec that trains in about a second per seed."""
    spec: dict[str, Any] = {
        "name": name,
        "env": {"id": "CartPole-v1", "n_envs": 2},
        "algo": "PPO",
        "total_timesteps": 512,
        "hyperparams": {"n_steps": 64, "batch_size": 64, "n_epochs": 2, "policy_kwargs": {"net_arch": [8]}},
        "space": {"learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-2}},
        "seeds": 2,
        "trials": 3,
        "sampler": {"kind": "random", "seed": 0},
        "objective": {"eval_episodes": 2},
    }
    for key, value in overrides.items():
        spec[key] = value
    return spec


def subprocess_env() -> dict[str, str]:
    """Environment for CLI subprocesses: the repo importable (for tests.helpers entry points)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "200"
    return env


def free_port() -> int:
    """A loopback port nothing listens on (at the moment it is returned)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_mlflow(folder: Path, port: int) -> subprocess.Popen:
    """A real ``mlflow server`` on ``port``: a SQLite store in ``folder`` and artifacts proxied to
    ``folder/art`` (``--artifacts-destination``); returns once it answers. Stop it with
    :func:`stop_server`."""
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    command += ["--backend-store-uri", f"sqlite:///{folder / 'store.db'}"]
    command += ["--artifacts-destination", str(folder / "art")]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.STDOUT}
    proc = subprocess.Popen(command, cwd=folder, start_new_session=True, **quiet)
    deadline = time.monotonic() + 120
    while True:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200:
                return proc
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, "mlflow server did not start"
            time.sleep(0.5)


def stop_server(proc: subprocess.Popen) -> None:
    """Stop a server started in its own session, and everything it started."""
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


class UiServer:
    """A running ``rlsweep ui``: its base URL, port, the experiment it was asked about, and (after
    it stopped) everything it printed."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.experiment: dict[str, Any] = {}
        self.output = ""


@contextmanager
def ui_server(cwd: Path, name: str) -> Iterator[UiServer]:
    """Start the real ``rlsweep ui NAME`` on a free loopback port, wait until MLflow's REST API
    knows the experiment, and stop it (and read its output) on the way out."""
    server = UiServer(free_port())
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweeps", "ui", name, "--port", str(server.port)],
        cwd=cwd,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"{server.base}/api/2.0/mlflow/experiments/get-by-name?experiment_name={name}"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not server.experiment:
            try:
                server.experiment = json.load(urllib.request.urlopen(url, timeout=2))["experiment"]
            except OSError:
                time.sleep(0.5)
        assert server.experiment, "MLflow UI did not answer"
        yield server
    finally:
        proc.terminate()
        server.output, _ = proc.communicate(timeout=30)


def rlsweep(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``rlsweep ARGS`` as a real subprocess in ``cwd``."""
    return subprocess.run(
        [sys.executable, "-m", "sweeps", *args],
        cwd=cwd,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def stores(cwd: Path, name: str):
    """The MLflow client, experiment and Optuna study of sweep ``name`` run in ``cwd``."""
    import optuna
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{cwd / 'results' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(name)
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{cwd / 'results' / name / 'optuna.db'}")
    return client, experiment, study


def split_runs(client: Any, experiment_id: str) -> tuple[list, list]:
    """(trial runs, seed runs) of an experiment."""
    runs = client.search_runs([experiment_id], max_results=5000)
    return [r for r in runs if "rlsweep.seed" not in r.data.tags], [r for r in runs if "rlsweep.seed" in r.data.tags]


def study_states(db: Path, sampled: bool = False) -> list[str]:
    """Trial states of a study file, oldest trial first, read-only: opening it through Optuna could create the schema
    while the driver is creating it on a fresh SQLite file. With ``sampled``, a RUNNING trial whose params are not
    set yet (asked, not yet sampled: no job of it exists) reads "ASKED"."""
    import sqlite3

    if not db.exists():
        return []
    query = (
        "SELECT t.state, (SELECT COUNT(*) FROM trial_params p WHERE p.trial_id = t.trial_id) FROM trials t "
        "ORDER BY t.trial_id"
    )
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            rows = list(con.execute(query))
    except sqlite3.Error:
        return []
    return ["ASKED" if sampled and state == "RUNNING" and not params else state for state, params in rows]


def wait_for_states(db: Path, ready: Any, timeout: float = 240, sampled: bool = False) -> list[str]:
    """Poll the study's trial states until ``ready(states)`` holds (or the time is up)."""
    deadline = time.monotonic() + timeout
    states = study_states(db, sampled)
    while not ready(states) and time.monotonic() < deadline:
        time.sleep(0.1)
        states = study_states(db, sampled)
    return states
