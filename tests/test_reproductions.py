"""The reported failures and the healthy baselines, trained for real, must get their verdicts.

Each reproduction runs as a sweep from its file in conf/sweeps (2 seeds each, 2 workers), or, for
the hand-written PPO, as the script in conf/repro with its TensorBoard log read by `rlsweep diagnose`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml

from stability import keys
from tests.helpers import subprocess_env

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


def _sweep(tmp_path: Path, conf: str, **overrides) -> dict[int, optuna.trial.FrozenTrial]:
    spec = yaml.safe_load((REPO / "conf" / "sweeps" / f"{conf}.yaml").read_text())
    spec.update(overrides)
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / f"{conf}.yaml").write_text(yaml.safe_dump(spec))
    result = subprocess.run(
        [sys.executable, "-m", "sweeps", "run", f"{conf}.yaml", "--workers", "2"],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    study = optuna.load_study(study_name=spec["name"], storage=f"sqlite:///{tmp_path}/results/{spec['name']}/optuna.db")
    return {t.number: t for t in study.get_trials()}


def _seed_verdicts(trial: optuna.trial.FrozenTrial) -> list[str]:
    return sorted(trial.user_attrs["rlsweep.verdicts"].values())


def test_a2c_report_ends_in_nan_scale_and_the_knobs_fix_it(tmp_path):
    # the report's setting, and the report's advice applied with rlsweep's knobs: two corners of the grid
    broken = {
        "learning_rate": 0.1,
        "max_grad_norm": "off",
        "log_std_bounds": [-103, 88],
        "normalize": {"reward": False},
    }
    fixed = {"learning_rate": 7.0e-4, "max_grad_norm": 0.5, "log_std_bounds": [-5, 2], "normalize": {"reward": True}}
    for label, hyperparams in (("broken", broken), ("fixed", fixed)):
        trial = _sweep(
            tmp_path / label,
            "repro_a2c_nan_scale",
            total_timesteps=12000,
            space={},
            hyperparams={"n_steps": 5, **hyperparams},
        )[0]
        if label == "broken":
            assert _seed_verdicts(trial) == ["nan_scale", "nan_scale"]
            assert trial.state.name == "PRUNED" and trial.user_attrs["rlsweep.outcome"] == "unstable"
            _diagnosed_again_from_mlflow(tmp_path / label, "nan_scale")
        else:
            assert _seed_verdicts(trial) == ["healthy", "healthy"] and trial.state.name == "COMPLETE"


def _diagnosed_again_from_mlflow(cwd: Path, verdict: str) -> None:
    """`rlsweep diagnose RUN_ID` on the sweep's own seed runs reaches the same verdict."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{cwd / 'results' / 'mlflow.db'}"
    client = MlflowClient(uri)
    runs = client.search_runs(
        [client.get_experiment_by_name("repro_a2c_nan_scale").experiment_id], filter_string="tags.`rlsweep.seed` != ''"
    )
    assert len(runs) == 2
    for run in runs:
        # stop_on ends the seed once its std passes 1e10, unless torch's "Expected parameter ..."
        # error comes first (within the recorded update that crossed it); the verdict is the same
        assert run.data.tags[keys.STABILITY_STOPPED_BY] == "nan_scale"
        error = run.data.tags.get(keys.ERROR)
        assert error is None or "Expected parameter" in error
        result = subprocess.run(
            [sys.executable, "-m", "sweeps", "diagnose", run.info.run_id, "--tracking-uri", uri, "--json"],
            capture_output=True,
            text=True,
            env=subprocess_env(),
            cwd=cwd,
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["verdict"] == verdict


def test_recurrent_report_dead_policy_gradient(tmp_path):
    trials = _sweep(tmp_path, "repro_recurrent_dead")
    by_norm = {t.params["normalize.reward"]: t for t in trials.values()}
    assert _seed_verdicts(by_norm[False]) == ["dead_policy_gradient", "dead_policy_gradient"]
    assert _seed_verdicts(by_norm[True]) == ["healthy", "healthy"]


def test_recurrent_report_zero_reward_branch_is_degenerate(tmp_path):
    trials = _sweep(tmp_path, "repro_recurrent_zero_reward")
    assert _seed_verdicts(trials[0]) == ["degenerate_reward", "degenerate_reward"]


# Two of the four rl-zoo3 baselines (one per algorithm and env); all four are trained and
# classified by `make bench` (stability_detection), which keeps this suite inside its time budget.
@pytest.mark.parametrize("conf", ["zoo_ppo_cartpole", "zoo_a2c_pendulum"])
def test_rl_zoo_tuned_baselines_are_healthy(tmp_path, conf):
    trials = _sweep(tmp_path, conf)
    assert _seed_verdicts(trials[0]) == ["healthy", "healthy"]
    if conf == "zoo_ppo_cartpole":  # trained to convergence: a converged policy is not a dead one
        assert trials[0].value == pytest.approx(500.0)


def _cleanrl(tmp_path: Path, runs: dict[str, tuple[int, tuple[str, ...]]]) -> dict[str, dict]:
    """Train the hand-written PPO once per entry (name -> (seed, flags)), two at a time, and
    diagnose each run from its TensorBoard log."""
    procs = {}
    for name, (seed, flags) in runs.items():
        while sum(p.poll() is None for p in procs.values()) >= 2:
            time.sleep(0.2)
        procs[name] = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "conf" / "repro" / "cleanrl_ppo.py"),
                "--total-timesteps",
                "30000",
                "--seed",
                str(seed),
                "--logdir",
                str(tmp_path / name),
                *flags,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=subprocess_env(),
        )
    reports = {}
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()[-2000:]
        result = subprocess.run(
            [sys.executable, "-m", "sweeps", "diagnose", str(tmp_path / name), "--json"],
            capture_output=True,
            text=True,
            env=subprocess_env(),
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr
        reports[name] = json.loads(result.stdout)
    return reports


def test_hand_written_ppo_weight_decay_freezes_policy_and_critic(tmp_path):
    """Adam's weight decay 0.1 pins the whole network: the policy barely moves (the corpus's policy
    snapshots put it under ~0.01 nats from its start) and the critic predicts a near-constant. The
    policy that does not move is the verdict; the pinned critic is found beside it."""
    reports = _cleanrl(
        tmp_path,
        {
            "weight_decay_s1": (1, ("--weight-decay", "0.1")),
            "weight_decay_s2": (2, ("--weight-decay", "0.1")),
            "clean_s1": (1, ()),
        },
    )
    for seed in (1, 2):
        report = reports[f"weight_decay_s{seed}"]
        assert report["verdict"] == "dead_policy_gradient"
        stuck = next(f for f in report["findings"] if f["kind"] == "stuck_value_loss")
        assert abs(stuck["evidence"]["explained_variance_median"]) < 1e-3
        assert any("near-constant" in c for c in stuck["causes"])
    assert reports["clean_s1"]["verdict"] == "healthy"
