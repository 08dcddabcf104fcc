"""The shipped Pendulum knob sweeps run end to end (shortened) and record every knob in MLflow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from sweeps import knobs
from tests.helpers import REPO, subprocess_env

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", ["knobs_pendulum", "knobs_pendulum_a2c"])
def test_knob_sweep_runs_and_records_every_knob(name: str, tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "conf" / "sweeps" / f"{name}.yaml").read_text())
    short = name + "_short"
    data.update(name=short, total_timesteps=512, trials=2, seeds=1)
    data["objective"] = {"eval_episodes": 1}
    if data["algo"] == "PPO":
        data["hyperparams"].update(n_steps=64, batch_size=64, n_epochs=2)
    (tmp_path / "short.yaml").write_text(yaml.safe_dump(data))
    result = subprocess.run(
        [sys.executable, "-m", "sweeps", "run", "short.yaml", "--workers", "2"],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    client = MlflowClient(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(short)
    runs = client.search_runs([experiment.experiment_id])
    seeds = [r for r in runs if "rlsweep.seed" in r.data.tags]
    assert len(seeds) == 2 and all(r.info.status == "FINISHED" for r in seeds), [r.data.tags for r in seeds]
    for run in runs:
        recorded = {key.split(".")[0] for key in run.data.params}
        assert set(knobs.KNOBS) <= recorded, set(knobs.KNOBS) - recorded
        for key in (
            "log_std_bounds",
            "max_grad_norm",
            "optimizer",
            "weight_decay",
            "init_gains.policy",
            "init_gains.value",
            "init_gains.hidden",
            "log_std_init",
            "normalize.reward",
            "reward_scale",
            "learning_rate.initial",
            "learning_rate.schedule",
            "ortho_init",
        ):
            assert key in run.data.params, key
    for run in seeds:
        history = client.get_metric_history(run.info.run_id, "train/grad_norm")
        assert history and all(m.value > 0 for m in history)
        assert "train/std" in run.data.metrics
        low, high = yaml.safe_load(run.data.params["log_std_bounds"])
        import math

        assert math.exp(low) - 1e-6 <= run.data.metrics["train/std"] <= math.exp(high) + 1e-6
