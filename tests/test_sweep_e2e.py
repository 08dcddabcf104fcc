"""End to end through the CLI: real SB3 training, a real MLflow SQLite store, a real Optuna study."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helpers import rlsweep, split_runs, stores, tiny_spec, ui_server

pytestmark = pytest.mark.slow


_rlsweep, _stores, _runs = rlsweep, stores, split_runs


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("e2e")
    (cwd / "tiny.yaml").write_text(yaml.safe_dump(tiny_spec("tiny")))
    result = _rlsweep(cwd, "run", "tiny.yaml", "--workers", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "tiny: best trials" in result.stdout
    assert "rlsweep ui tiny" in result.stdout
    return cwd


def test_every_trial_and_seed_is_tracked(tiny_sweep: Path) -> None:
    client, experiment, study = _stores(tiny_sweep, "tiny")
    assert experiment is not None
    assert experiment.artifact_location.startswith((tiny_sweep / "results").as_uri())
    parents, children = _runs(client, experiment.experiment_id)
    assert len(parents) == 3 and len(children) == 6
    trials = {t.number: t for t in study.get_trials()}
    assert sorted(trials) == [0, 1, 2]
    assert all(t.state.name == "COMPLETE" for t in trials.values())
    by_trial = {int(p.data.tags["rlsweep.trial"]): p for p in parents}
    for number, trial in trials.items():
        parent = by_trial[number]
        assert parent.info.status == "FINISHED"
        assert parent.data.tags["rlsweep.sweep"] == "tiny"
        assert float(parent.data.params["learning_rate"]) == pytest.approx(trial.params["learning_rate"])
        assert parent.data.metrics["objective"] == pytest.approx(trial.value)
        mine = [c for c in children if c.data.tags["rlsweep.trial"] == str(number)]
        assert sorted(c.data.tags["rlsweep.seed"] for c in mine) == ["0", "1"]
        returns = [c.data.metrics["eval/mean_return"] for c in mine]
        assert trial.value == pytest.approx(sum(returns) / 2)
        for child in mine:
            assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
            assert child.data.params["learning_rate"] == parent.data.params["learning_rate"]
        spec = json.loads(Path(parent.info.artifact_uri.removeprefix("file://"), "spec.resolved.json").read_text())
        assert spec["trial"] == number and spec["params"]["learning_rate"] == trial.params["learning_rate"]


def test_curves_have_every_update_including_the_last(tiny_sweep: Path) -> None:
    client, experiment, _ = _stores(tiny_sweep, "tiny")
    _, children = _runs(client, experiment.experiment_id)
    for child in children:
        # 512 steps in rollouts of 64 steps x 2 envs: four updates, at 128, 256, 384 and 512 steps.
        value_loss = client.get_metric_history(child.info.run_id, "train/value_loss")
        assert [m.step for m in value_loss] == [128, 256, 384, 512]
        rewards = client.get_metric_history(child.info.run_id, "rollout/ep_rew_mean")
        assert [m.step for m in rewards] == [128, 256, 384, 512]
        assert all(m.value > 0 for m in rewards)


def test_rerun_continues_instead_of_repeating(tiny_sweep: Path) -> None:
    again = _rlsweep(tiny_sweep, "run", "tiny.yaml")
    assert again.returncode == 0, again.stderr
    client, experiment, study = _stores(tiny_sweep, "tiny")
    assert len(study.get_trials()) == 3
    more = _rlsweep(tiny_sweep, "run", "tiny.yaml", "--trials", "4", "--workers", "1")
    assert more.returncode == 0, more.stderr
    client, experiment, study = _stores(tiny_sweep, "tiny")
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE"] * 4
    parents, children = _runs(client, experiment.experiment_id)
    assert len(parents) == 4 and len(children) == 8


def test_status_lists_the_trials(tiny_sweep: Path) -> None:
    result = _rlsweep(tiny_sweep, "status", "tiny")
    assert result.returncode == 0, result.stderr
    assert "complete" in result.stdout and "learning_rate=" in result.stdout
    missing = _rlsweep(tiny_sweep, "status", "nope")
    assert missing.returncode == 2 and "sweeps here: tiny" in missing.stderr


def test_changed_spec_under_the_same_name_is_refused(tiny_sweep: Path) -> None:
    data = tiny_spec("tiny")
    data["total_timesteps"] = 1024
    (tiny_sweep / "tiny_changed.yaml").write_text(yaml.safe_dump(data))
    result = _rlsweep(tiny_sweep, "run", "tiny_changed.yaml")
    assert result.returncode == 2
    assert "different spec" in result.stderr


def test_ui_serves_the_store_on_localhost(tiny_sweep: Path) -> None:
    with ui_server(tiny_sweep, "tiny") as server:
        assert server.experiment["name"] == "tiny"
        port = server.port
        listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
        local_addresses = [line.split()[3] for line in listening.splitlines()]
        if local_addresses:  # `ss` is there to ask: the server listens on loopback only
            assert local_addresses == [f"127.0.0.1:{port}"] * len(local_addresses)
    assert f"http://127.0.0.1:{port}" in server.output


def test_crashing_trials_do_not_stop_the_sweep(tmp_path: Path) -> None:
    """Four ways a trial can die, each in its own trial, beside a healthy trial of each kind."""
    data = tiny_spec(
        "faulty",
        env={"id": "tests.helpers:faulty_cartpole", "n_envs": 1},
        space={
            "env.kwargs.how": {"type": "choice", "values": ["raise", "kill", "keyboard", "oom"]},
            "env.kwargs.fail_at_step": {"type": "choice", "values": [None, 40]},
        },
        sampler={"kind": "grid"},
        trials=None,
    )
    (tmp_path / "faulty.yaml").write_text(yaml.safe_dump(data))
    result = _rlsweep(tmp_path, "run", "faulty.yaml", "--workers", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    client, experiment, study = _stores(tmp_path, "faulty")
    trials = study.get_trials()
    assert len(trials) == 8
    parents, children = _runs(client, experiment.experiment_id)
    expected = {
        "raise": "RuntimeError: env exploded at step 40",
        "kill": "WorkerDied",
        "keyboard": "KeyboardInterrupt",
        "oom": "OutOfMemoryError: CUDA out of memory",
    }
    for how, message in expected.items():
        by_fault = {t.params["env.kwargs.fail_at_step"]: t for t in trials if t.params["env.kwargs.how"] == how}
        assert by_fault[None].state.name == "COMPLETE"
        broken = by_fault[40]
        assert broken.state.name == "FAIL", how
        assert broken.user_attrs["rlsweep.outcome"] == "crashed"
        assert message in broken.user_attrs["rlsweep.error"], (how, broken.user_attrs["rlsweep.error"])
        failed = [
            c for c in children if c.info.status == "FAILED" and c.data.tags["rlsweep.trial"] == str(broken.number)
        ]
        assert len(failed) == 2 and all(message in c.data.tags["rlsweep.error"] for c in failed), how
        assert [p.info.status for p in parents if p.data.tags["rlsweep.trial"] == str(broken.number)] == ["FAILED"]


def test_runs_left_running_are_closed_as_the_study_says(tmp_path: Path) -> None:
    """A driver killed between Optuna's tell and its MLflow writes leaves RUNNING runs of a
    finished trial; the next run closes them with the study's results (the study is the record)."""
    data = tiny_spec("reconcile", seeds=1, trials=1, objective={"eval_episodes": 1})
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(data))
    assert _rlsweep(tmp_path, "run", "r.yaml").returncode == 0
    client, experiment, study = _stores(tmp_path, "reconcile")
    trial = study.get_trials()[0]
    tags = {"rlsweep.sweep": "reconcile", "rlsweep.trial": "0"}
    stale_parent = client.create_run(experiment.experiment_id, tags=tags).info.run_id
    stale_child = client.create_run(experiment.experiment_id, tags=tags | {"rlsweep.seed": "0"}).info.run_id
    stale_other = client.create_run(experiment.experiment_id, tags=tags | {"rlsweep.trial": "99"}).info.run_id

    again = _rlsweep(tmp_path, "run", "r.yaml")
    assert again.returncode == 0, again.stderr
    parent, child, other = (client.get_run(r) for r in (stale_parent, stale_child, stale_other))
    assert parent.info.status == "FINISHED" and parent.data.metrics["objective"] == pytest.approx(trial.value)
    assert child.info.status == "FINISHED"
    assert child.data.metrics["eval/mean_return"] == pytest.approx(trial.user_attrs["rlsweep.returns"]["0"])
    assert other.info.status == "KILLED" and other.data.tags["rlsweep.outcome"] == "interrupted"


def test_finished_trials_with_no_run_get_one_made_from_the_study(tmp_path: Path) -> None:
    """A driver killed before it wrote a finished trial's runs at all (their creation still queued
    behind the tracker's start-up) leaves a trial Optuna holds and MLflow lacks. The next run makes
    its runs from the study, says so, and leaves the runs that exist alone."""
    data = tiny_spec("restored", seeds=2, trials=2, objective={"eval_episodes": 1})
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(data))
    assert _rlsweep(tmp_path, "run", "r.yaml").returncode == 0
    client, experiment, study = _stores(tmp_path, "restored")
    # trial 0's runs were never written (taken out of the store's tables); trial 1's were
    runs = client.search_runs([experiment.experiment_id])
    gone = [(r.info.run_id,) for r in runs if r.data.tags["rlsweep.trial"] == "0"]
    with sqlite3.connect(tmp_path / "results" / "mlflow.db") as db:
        db.executemany("DELETE FROM tags WHERE run_uuid = ?", gone)
        db.executemany("DELETE FROM params WHERE run_uuid = ?", gone)
        db.executemany("DELETE FROM metrics WHERE run_uuid = ?", gone)
        db.executemany("DELETE FROM latest_metrics WHERE run_uuid = ?", gone)
        db.executemany("DELETE FROM runs WHERE run_uuid = ?", gone)

    again = _rlsweep(tmp_path, "run", "r.yaml")
    assert again.returncode == 0, again.stderr
    parents, children = _runs(client, experiment.experiment_id)
    assert sorted(p.data.tags["rlsweep.trial"] for p in parents) == ["0", "1"]
    assert len(children) == 4 and all(c.info.status == "FINISHED" for c in parents + children)
    trial = study.get_trials()[0]
    (parent,) = [p for p in parents if p.data.tags["rlsweep.trial"] == "0"]
    assert parent.data.metrics["objective"] == pytest.approx(trial.value)
    assert parent.data.params["learning_rate"] == str(trial.params["learning_rate"])
    assert "rlsweep.restored" in parent.data.tags and parent.data.tags["rlsweep.outcome"] == "complete"
    assert "finished trials [0] had no MLflow runs" in again.stdout
    for child in (c for c in children if c.data.tags["rlsweep.trial"] == "0"):
        seed = child.data.tags["rlsweep.seed"]
        assert child.data.metrics["eval/mean_return"] == pytest.approx(trial.user_attrs["rlsweep.returns"][seed])
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id and "rlsweep.restored" in child.data.tags
    assert not any("rlsweep.restored" in r.data.tags for r in parents + children if r.data.tags["rlsweep.trial"] == "1")
