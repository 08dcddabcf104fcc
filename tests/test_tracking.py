"""The tracker's setup thread, with the MLflow store faked (pure logic), and sweeps against a real
``mlflow server`` that the tests start."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from stability import keys
from sweeps import tracking
from tests.helpers import (
    free_port,
    serve_mlflow,
    split_runs,
    stop_server,
    subprocess_env,
    tiny_spec,
    wait_for_states,
)


class _Flaky:
    """Fails like a concurrent import of MLflow ``fails`` times, then builds."""

    calls = 0

    def __init__(self, fails: int, message: str, error: type[Exception] = ImportError) -> None:
        type(self).calls += 1
        if type(self).calls <= fails:
            raise error(message)
        self.ready = True


_ARGS = ("sqlite:///store.db", "experiment", "sweep", Path("artifacts"))


@pytest.fixture(autouse=True)
def _reset() -> None:
    _Flaky.calls = 0


def test_due_metric_buffers_are_sent_oldest_first_a_budget_at_a_time(tmp_path, monkeypatch):
    """MLflow's own writes (a store whose schema the plain-SQL writer does not know): runs whose
    points waited long enough are sent oldest first, at least one per turn of the driver's loop
    however small the budget, and a run's points stay buffered until it is due."""
    monkeypatch.setattr(tracking, "MLFLOW_SCHEMA", "another")
    tracker = tracking.MlflowTracker(f"sqlite:///{tmp_path / 'm.db'}", "budget", "budget", tmp_path / "art")
    assert tracker._rows is None
    runs = [tracker.start_trial(n, {}, {}, key=f"k{n}") for n in range(3)]
    for step, run in enumerate(runs):
        tracker.log_metrics(run, step, {"x": float(step)})
    monkeypatch.setattr(tracking, "_FLUSH_SECONDS", 3600.0)
    tracker.flush_if_due()
    sent = lambda: [len(tracker.client.get_metric_history(r, "x")) for r in runs]  # noqa: E731
    assert sent() == [0, 0, 0]  # none due yet
    monkeypatch.setattr(tracking, "_FLUSH_SECONDS", 0.0)
    tracker.flush_if_due(budget=0.0)
    assert sent() == [1, 0, 0]  # the oldest, and only it: the budget was spent
    tracker.log_metrics(runs[0], 5, {"x": 5.0})  # it buffers again, now the newest
    tracker.flush_if_due(budget=0.0)
    assert sent() == [1, 1, 0]
    tracker.flush_if_due()
    assert sent() == [2, 1, 1]


def test_points_a_failed_batch_did_not_send_stay_held_and_are_sent_once(tmp_path, monkeypatch):
    """MLflow's own writes, a batch at a time: when a call fails (the server went away), what the
    calls before it sent leaves the buffer, the rest stays held, and the next flush sends it, so
    every point is stored exactly once."""
    monkeypatch.setattr(tracking, "MLFLOW_SCHEMA", "another")
    monkeypatch.setattr(tracking, "_BATCH", 2)
    tracker = tracking.MlflowTracker(f"sqlite:///{tmp_path / 'm.db'}", "batch", "batch", tmp_path / "art")
    run = tracker.start_trial(0, {}, {}, key="k")
    for step in range(3):
        tracker.log_metrics(run, step, {"x": float(step), "y": -float(step)})
    real, calls = tracker.client.log_batch, []

    def flaky(*args, **kwargs):
        calls.append(len(kwargs.get("metrics", [])))
        if len(calls) == 2:
            raise ConnectionError("the server went away")
        return real(*args, **kwargs)

    monkeypatch.setattr(tracker.client, "log_batch", flaky)
    with pytest.raises(ConnectionError):
        tracker.flush()
    assert tracker._held == 4 and tracking._count(tracker._buffers[run]) == 4
    tracker.flush()
    history = lambda key: [m.step for m in tracker.client.get_metric_history(run, key)]  # noqa: E731
    assert history("x") == [0, 1, 2] and history("y") == [0, 1, 2]
    assert tracker._held == 0 and tracker._buffers == {} and calls == [2, 2, 2, 2]


@pytest.mark.parametrize("fs", ["local", "nfs4"])
def test_the_store_commits_to_a_write_ahead_log_only_on_a_local_filesystem(tmp_path, monkeypatch, fs):
    """As the study does: a store on a local filesystem is switched to SQLite's write-ahead log (kept
    in the file, for MLflow's own readers too), its writer's commits no longer fsync; elsewhere the
    default journal stays. What was written reads back through MLflow's client either way."""
    import sqlite3

    monkeypatch.setattr(tracking, "on_local_filesystem", lambda db: fs == "local")
    db = tmp_path / "m.db"
    tracker = tracking.MlflowTracker(f"sqlite:///{db}", "wal", "wal", tmp_path / "art")
    run = tracker.start_trial(0, {"lr": 0.1}, {}, key="k")
    tracker.log_metrics(run, 3, {"x": 1.5})
    tracker.end_run(run, "FINISHED", tags={"t": "v"})
    mode = sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0]
    sync = tracker._rows.con.execute("PRAGMA synchronous").fetchone()[0]
    assert (mode, sync) == (("wal", 1) if fs == "local" else ("delete", 2))
    stored = MlflowClient(f"sqlite:///{db}").get_run(run)
    assert stored.info.status == "FINISHED" and stored.data.metrics == {"x": 1.5}
    assert stored.data.params == {"lr": "0.1"} and stored.data.tags["t"] == "v"


def test_plain_sql_sends_every_due_run_at_once_and_keeps_the_others(tmp_path, monkeypatch):
    """On a SQLite store with the schema it knows, the points of every due run go in one write
    (whatever the budget); a run not yet due keeps its points."""
    tracker = tracking.MlflowTracker(f"sqlite:///{tmp_path / 'm.db'}", "due", "due", tmp_path / "art")
    assert tracker._rows is not None
    runs = [tracker.start_trial(n, {}, {}, key=f"k{n}") for n in range(3)]
    for step, run in enumerate(runs[:2]):
        tracker.log_metrics(run, step, {"x": float(step)})
    monkeypatch.setattr(tracking, "_FLUSH_SECONDS_SQL", 3600.0)
    tracker.flush_if_due()
    sent = lambda: [len(tracker.client.get_metric_history(r, "x")) for r in runs]  # noqa: E731
    assert sent() == [0, 0, 0]
    monkeypatch.setattr(tracking, "_FLUSH_SECONDS_SQL", 0.0)
    tracker.flush_if_due(budget=0.0)
    assert sent() == [1, 1, 0] and tracker._held == 0
    monkeypatch.setattr(tracking, "_FLUSH_SECONDS_SQL", 3600.0)
    tracker.log_metrics(runs[2], 7, {"x": 7.0})
    tracker.flush_if_due()
    assert sent() == [1, 1, 0]  # not due yet
    tracker.end_run(runs[2], "FINISHED")  # a run's end sends what it holds
    assert sent() == [1, 1, 1]
    tracker.log_metrics(runs[0], 8, {})  # a dump with nothing in it is done once due, like any other
    monkeypatch.setattr(tracking, "_FLUSH_SECONDS_SQL", 0.0)
    tracker.flush_if_due()
    assert tracker._since == {} and tracker._buffers == {}


# Points that test what MLflow's store makes of them: NaN and +-inf, a point sent twice, several
# points at one step (the latest is the largest timestamp, then value), a step logged out of order.
_POINTS = [
    ("loss", 1.0, 1000, 0),
    ("loss", 0.5, 1000, 1),
    ("loss", 0.5, 1000, 1),
    ("loss", float("nan"), 1001, 2),
    ("loss", 0.25, 999, 3),
    ("loss", 0.75, 999, 1),
    ("grad", float("inf"), 1000, 0),
    ("grad", float("-inf"), 1000, 0),
    ("grad", 3.0, 1000, 0),
    ("grad", 2.0, 1000, 0),
    ("eval/mean_return", -1e300, 5, 7),
    ("eval/mean_return", 12.5, 4, 7),
]


def _stored(db: Path) -> tuple[list[tuple], list[tuple]]:
    import sqlite3

    with sqlite3.connect(db) as con:
        points = con.execute(
            "SELECT r.name, m.key, m.value, m.timestamp, m.step, m.is_nan FROM metrics m "
            "JOIN runs r ON r.run_uuid = m.run_uuid ORDER BY 1, 2, 5, 4, 3, 6"
        ).fetchall()
        latest = con.execute(
            "SELECT r.name, m.key, m.value, m.timestamp, m.step, m.is_nan FROM latest_metrics m "
            "JOIN runs r ON r.run_uuid = m.run_uuid ORDER BY 1, 2"
        ).fetchall()
    return points, latest


def test_plain_sql_metric_rows_are_those_mlflow_itself_writes(tmp_path, monkeypatch):
    """The same points, sent over two flushes (points and steps again in the second), through the
    plain-SQL writer and through MLflow's own ``log_batch``: the metric and latest-metric rows are
    identical, and MLflow's client reads the same history and latest values from both."""
    from mlflow.entities import Metric

    stores = {}
    for way in ("plain", "mlflow"):
        db = tmp_path / f"{way}.db"
        tracker = tracking.MlflowTracker(f"sqlite:///{db}", "same", "same", tmp_path / way)
        assert tracker._rows is not None
        runs = [tracker.start_trial(n, {}, {}, name=f"run-{n}", key=f"k{n}") for n in range(2)]
        # the second flush: older points of one key (its latest must stay), a newer one of another
        for half in (_POINTS[:7], [*_POINTS[:3], *_POINTS[5:], ("grad", 1.0, 2000, 4)]):
            for run in runs:
                if way == "plain":
                    tracker._rows.write({run: tracking._dumps(half)})
                else:
                    tracker.client.log_batch(run, metrics=[Metric(*point) for point in half])
        stores[way] = (db, tracker.client, runs)
    assert _stored(stores["plain"][0]) == _stored(stores["mlflow"][0])
    reads = []
    for _db, client, runs in stores.values():
        run = client.get_run(runs[0])
        history = {
            k: [(m.value, m.timestamp, m.step) for m in client.get_metric_history(run.info.run_id, k)]
            for k in run.data.metrics
        }
        reads.append((run.data.metrics, history))
    assert str(reads[0]) == str(reads[1])  # NaN compares unequal to itself: compared as text


def test_plain_sql_leaves_a_deleted_run_to_mlflow_and_checks_names_by_its_rule(tmp_path):
    """A run deleted while the sweep runs: MLflow's own call refuses its points, in its words,
    and the other runs' points are written. A metric name MLflow refuses is refused the same."""
    from mlflow.exceptions import MlflowException

    tracker = tracking.MlflowTracker(f"sqlite:///{tmp_path / 'm.db'}", "gone", "gone", tmp_path / "art")
    kept, gone = tracker.start_trial(0, {}, {}, key="a"), tracker.start_trial(1, {}, {}, key="b")
    tracker.client.delete_run(gone)
    tracker.log_metrics(kept, 0, {"x": 1.0})
    tracker.log_metrics(gone, 0, {"x": 2.0})
    with pytest.raises(MlflowException, match="must be in the 'active' state"):
        tracker.flush()
    assert [m.value for m in tracker.client.get_metric_history(kept, "x")] == [1.0]
    assert tracker._buffers == {gone: [(tracker._buffers[gone][0][0], 0, {"x": 2.0})]}
    with pytest.raises(MlflowException, match=r'Invalid value "\.\./x"'):
        tracker._rows.write({kept: [(0, 0, {"../x": 1.0})]})


def _runs_as_stored(db: Path, root: str) -> list[tuple]:
    """Every run's row, tags and params, by run name; ids and times replaced by what they must be."""
    import sqlite3

    with sqlite3.connect(db) as con:
        runs = con.execute(
            "SELECT run_uuid, name, source_type, source_name, entry_point_name, user_id, status, start_time, "
            "end_time, deleted_time, source_version, lifecycle_stage, artifact_uri, experiment_id FROM runs"
        ).fetchall()
        names = {run[0]: run[1] for run in runs}  # a tag holding a run id (the parent's) compared by name
        out = []
        for run_id, name, *row, start, end, deleted, version, stage, uri, experiment in runs:
            tags = [
                (k, names.get(v, v))
                for k, v in con.execute("SELECT key, value FROM tags WHERE run_uuid = ? ORDER BY key", (run_id,))
            ]
            params = con.execute("SELECT key, value FROM params WHERE run_uuid = ? ORDER BY key", (run_id,)).fetchall()
            ended = end is not None and end >= start if row[-1] != "RUNNING" else end is None
            timed = (start > 0, ended, deleted)
            where = uri == f"{root}/{run_id}/artifacts"
            out.append((name, *row, timed, version, stage, where, experiment, tags, params))
    return sorted(out)


def test_the_runs_a_resume_finds_read_the_same_as_plain_sql_and_through_mlflow_s_search(tmp_path):
    """What a resume reads to find the finished trials missing runs: each trial's run and the seeds
    that have one, a deleted run counted (it was meant to go), another sweep's runs and a repair's
    (no trial tag) not; the plain-SQL read and MLflow's search agree."""
    tracker = tracking.MlflowTracker(f"sqlite:///{tmp_path / 'm.db'}", "exp", "mine", tmp_path / "art")
    other = tracking.MlflowTracker(f"sqlite:///{tmp_path / 'm.db'}", "exp", "theirs", tmp_path / "art")
    assert tracker._rows is not None
    first = tracker.start_trial(0, {}, {})
    for seed in (0, 1):
        tracker.start_seed(0, seed, first, {})
    second = tracker.start_trial(1, {}, {})
    tracker.start_seed(1, 0, second, {})  # trial 1's seed 1 was never written
    tracker.client.delete_run(tracker.start_seed(1, 2, second, {}))
    tracker.start_seed(2, 1, "no-parent-written", {})  # trial 2: a seed's run alone
    tracker.start_trial(None, {}, {}, name="trial-0-repair-1")
    other.start_trial(5, {}, {})
    by_sql = tracker.trial_runs()
    tracker._rows = None
    assert tracker.trial_runs() == by_sql
    assert {n: (run is not None, seeds) for n, (run, seeds) in by_sql.items()} == {
        0: (True, {0, 1}),
        1: (True, {0, 2}),
        2: (False, {1}),
    }
    assert by_sql[0][0] == first


def test_plain_sql_runs_tags_params_and_ends_are_those_mlflow_itself_writes(tmp_path, monkeypatch):
    """A trial's run and its seeds' runs (with tags and params, a long param value cut, and a
    tag's value replaced later), ended as FINISHED, FAILED and KILLED, through the plain-SQL writer
    and through MLflow's own calls: the runs, tags and params rows are the same, and MLflow's client
    reads the same runs from both."""
    long = "x" * 7000  # past MLflow's 6000 characters for a param value: cut
    stores = {}
    for way in ("plain", "mlflow"):
        if way == "mlflow":
            monkeypatch.setattr(tracking, "MLFLOW_SCHEMA", "another")
        db, root = tmp_path / f"{way}.db", tmp_path / f"art-{way}"
        tracker = tracking.MlflowTracker(f"sqlite:///{db}", "same", "same", root)
        assert (tracker._rows is not None) == (way == "plain")
        resolved = {"algo": "PPO", "hyperparams": {"n_steps": 128, "arch": [64, 64]}, "path": tmp_path}
        parent = tracker.start_trial(3, {"lr": 0.1, "arch": [64, 64], "note": long}, resolved, key="k3")
        seeds = [
            tracker.start_seed(3, seed, parent, {"lr": 0.1}, tags={"rlsweep.extra": "a"}, key=f"k3-{seed}")
            for seed in (1, 2, 3)
        ]
        tracker.set_tags(seeds[0], {"rlsweep.host": "node-1", "rlsweep.worker": "3"})
        tracker.set_tags(seeds[0], {"rlsweep.host": "node-2"})  # a key's value replaced
        for run, status in zip(seeds, ("FINISHED", "FAILED", "KILLED"), strict=True):
            tracker.end_run(
                run,
                status,
                metrics={"eval/mean_return": 1.5},
                tags={keys.OUTCOME: status.lower()},
                texts={"error.txt": "Traceback: \u00e9chec\n"},
                files={"stability/verdict.json": b'{"verdict": "healthy"}', "curves.png": bytes(range(256))},
            )
        tracker.end_run(parent, "FINISHED", tags={keys.OUTCOME: "complete"})
        stores[way] = (db, root.resolve().as_uri(), tracker.client, [parent, *seeds])
    assert _runs_as_stored(*stores["plain"][:2]) == _runs_as_stored(*stores["mlflow"][:2])
    files = []  # every artifact file, its run named, and its bytes
    for way, (_db, _root, client, runs) in stores.items():
        names = {run: client.get_run(run).info.run_name for run in runs}
        folder = tmp_path / f"art-{way}"
        files.append(
            sorted(
                (names[p.relative_to(folder).parts[0]], *p.relative_to(folder).parts[1:], p.read_bytes())
                for p in folder.rglob("*")
                if p.is_file()
            )
        )
    assert files[0] == files[1] and len(files[0]) == 1 + 3 * 3
    # and the bytes are those MLflow's own log_dict and log_text write
    _db, _root, client, runs = stores["mlflow"]
    client.log_dict(runs[0], resolved, "own/spec.resolved.json")
    client.log_text(runs[1], "Traceback: \u00e9chec\n", "own/error.txt")
    read = lambda run, name: Path(client.download_artifacts(run, name)).read_bytes()  # noqa: E731
    plain_client, plain_runs = stores["plain"][2], stores["plain"][3]
    assert (
        read(runs[0], "own/spec.resolved.json")
        == Path(plain_client.download_artifacts(plain_runs[0], "spec.resolved.json")).read_bytes()
    )
    assert (
        read(runs[1], "own/error.txt") == Path(plain_client.download_artifacts(plain_runs[1], "error.txt")).read_bytes()
    )
    reads = []
    for _db, _root, client, runs in stores.values():
        got = [client.get_run(run) for run in runs]
        names = {r.info.run_id: r.info.run_name for r in got}
        reads.append(
            [
                (
                    r.info.run_name,
                    r.info.status,
                    r.info.lifecycle_stage,
                    {k: names.get(v, v) for k, v in r.data.tags.items()},
                    r.data.params,
                )
                for r in got
            ]
        )
        assert client.download_artifacts(runs[0], "spec.resolved.json")  # the trial's resolved spec is there
    assert reads[0] == reads[1]
    assert reads[0][0][4]["note"] == "x" * 6000


def test_plain_sql_leaves_deleted_runs_and_run_names_to_mlflow(tmp_path):
    """Tags and the end of a run deleted mid-sweep are refused by MLflow's own call, in its words;
    a run-name tag (which MLflow copies to the run's name) is MLflow's to set."""
    from mlflow.exceptions import MlflowException

    tracker = tracking.MlflowTracker(f"sqlite:///{tmp_path / 'm.db'}", "gone", "gone", tmp_path / "art")
    run = tracker.start_trial(0, {}, {}, key="a")
    tracker.set_tags(run, {"mlflow.runName": "renamed"})
    assert tracker.client.get_run(run).info.run_name == "renamed"
    tracker.client.delete_run(run)
    with pytest.raises(MlflowException, match="must be in the 'active' state"):
        tracker.set_tags(run, {"x": "1"})
    with pytest.raises(MlflowException, match="must be in the 'active' state"):
        tracker.end_run(run, "FINISHED")
    assert tracker.client.get_run(run).info.status == "RUNNING"


def test_curves_at_their_last_point_over_the_bound_are_not_thinned_again_at_each_dump(tmp_path, monkeypatch):
    """Thousands of runs, each curve at its one last point, can hold more than the bound by
    themselves: thinning, which keeps each curve's last point, then frees nothing, and is tried
    again only once another half of the bound has come, not at every dump."""
    tracker = tracking.MlflowTracker(f"sqlite:///{tmp_path / 'm.db'}", "many", "many", tmp_path / "art")
    monkeypatch.setattr(tracking, "_MAX_HELD", 10)
    thinned, real = [], tracker._thin
    monkeypatch.setattr(tracker, "_thin", lambda: (thinned.append(tracker._held), real())[1])
    for n in range(200):
        tracker.log_metrics(f"run-{n}", 0, {"x": float(n)})
    assert thinned == list(range(11, 201, 6)) and tracker._held == 200 and tracker.thinned == {}


def test_held_points_past_the_bound_are_thinned_each_curve_keeping_its_last_point(tmp_path, monkeypatch):
    """Back-pressure on a real SQLite store: past the bound, each held curve keeps every other
    point and its last; the run says how coarse its curves are; below it, nothing is dropped."""
    tracker = tracking.MlflowTracker(f"sqlite:///{tmp_path / 'm.db'}", "thin", "thin", tmp_path / "art")
    monkeypatch.setattr(tracking, "_MAX_HELD", 40)
    slow, calm = tracker.start_trial(0, {}, {}, key="a"), tracker.start_trial(1, {}, {}, key="b")
    for step in range(10):
        tracker.log_metrics(slow, step, {"x": float(step), "y": -float(step)})
    tracker.flush()
    history = lambda run, key: [m.step for m in tracker.client.get_metric_history(run, key)]  # noqa: E731
    assert history(slow, "x") == list(range(10)) and keys.METRICS_THINNED not in tracker.client.get_run(slow).data.tags
    for step in range(10, 30):  # 40 points held: at the bound, not past it
        tracker.log_metrics(slow, step, {"x": float(step), "y": -float(step)})
    tracker.log_metrics(calm, 0, {"z": 1.0})  # one past it: 20 points per curve -> 10, a lone point stays
    assert tracker._held == 21
    tracker.log_metrics(slow, 30, {"x": 30.0, "y": -30.0})
    tracker.end_run(slow, "FINISHED")
    tracker.flush()
    kept = history(slow, "x")
    assert kept == [*range(10), *range(11, 30, 2), 30]  # the curve's last held point (29) was kept
    assert history(slow, "y") == kept and history(calm, "z") == [0]
    assert tracker.client.get_run(slow).data.tags[keys.METRICS_THINNED] == "2"
    assert keys.METRICS_THINNED not in tracker.client.get_run(calm).data.tags


def test_a_partially_initialised_mlflow_met_by_the_setup_thread_is_retried(monkeypatch):
    monkeypatch.setattr(
        tracking,
        "MlflowTracker",
        lambda *args: _Flaky(
            2,
            "cannot import name '_get_store' from "
            "partially initialized module 'mlflow.tracking' (most likely due to a circular import)",
        ),
    )
    monkeypatch.setattr(tracking.time, "sleep", lambda s: None)
    assert tracking.BackgroundTracker(*_ARGS).ready and _Flaky.calls == 3


def test_a_half_imported_mlflow_met_as_an_attribute_error_is_retried_too(monkeypatch):
    # seen in CI while Ray was importing MLflow in the main thread
    message = "partially initialized module 'mlflow' has no attribute 'version' (most likely due to a circular import)"
    monkeypatch.setattr(tracking, "MlflowTracker", lambda *args: _Flaky(1, message, AttributeError))
    monkeypatch.setattr(tracking.time, "sleep", lambda s: None)
    assert tracking.BackgroundTracker(*_ARGS).ready and _Flaky.calls == 2


def test_other_import_errors_surface_at_first_use(monkeypatch):
    monkeypatch.setattr(tracking, "MlflowTracker", lambda *args: _Flaky(9, "No module named 'mlflow'"))
    with pytest.raises(ImportError, match="No module named"):
        _ = tracking.BackgroundTracker(*_ARGS).ready
    assert _Flaky.calls == 1


def test_a_server_out_of_reach_while_the_tracker_is_built_is_tried_again_at_the_next_use(monkeypatch):
    """An outage as the sweep starts: the use that meets it fails as a write to an absent server
    does (the driver holds it and tries again later), and the next use builds the tracker."""
    refused = "API request to endpoint /api/2.0/mlflow/experiments/get-by-name failed: Connection refused"
    monkeypatch.setattr(tracking, "MlflowTracker", lambda *args: _Flaky(1, refused, ConnectionError))
    tracker = tracking.BackgroundTracker("http://127.0.0.1:5000", "experiment", "sweep", Path("artifacts"))
    assert tracker.server  # known without the build: the driver reads it while handling the failure
    with pytest.raises(ConnectionError):
        _ = tracker.ready
    assert tracker.ready and _Flaky.calls == 2


def test_a_method_read_before_an_outage_at_the_build_fails_only_when_called(monkeypatch):
    """The driver reads a method before its guarded write calls it (``partial(tracker.end_run, ...)``):
    reading it neither builds nor raises; the call meets the outage, and a later call the tracker."""
    flushed: list[str] = []

    class Built:
        def flush(self) -> None:
            flushed.append("flushed")

    attempts = iter([ConnectionError("Connection refused"), Built()])

    def build(*args: object) -> Built:
        outcome = next(attempts)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(tracking, "_build_tracker", build)
    flush = tracking.BackgroundTracker("http://127.0.0.1:5000", "experiment", "sweep", Path("artifacts")).flush
    with pytest.raises(ConnectionError):
        flush()
    flush()
    assert flushed == ["flushed"]


def test_a_local_store_that_fails_while_built_is_not_tried_again(monkeypatch):
    monkeypatch.setattr(tracking, "MlflowTracker", lambda *args: _Flaky(1, "Connection refused", ConnectionError))
    tracker = tracking.BackgroundTracker(*_ARGS)
    for _ in range(2):
        with pytest.raises(ConnectionError):
            _ = tracker.ready
    assert _Flaky.calls == 1 and not tracker.server


# --- a real shared tracking server ---------------------------------------------------------------
_DONE = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
SECRET = "s3cret-token-that-must-not-leak"  # noqa: S105 (a marker searched for, no credential)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real tracking server for the module: its URI and its folder."""
    folder, port = tmp_path_factory.mktemp("server"), free_port()
    proc = serve_mlflow(folder, port)
    try:
        yield f"http://127.0.0.1:{port}", folder
    finally:
        stop_server(proc)


@pytest.mark.slow
def test_a_sweep_tracks_to_a_shared_server_and_every_command_reads_it_back(
    mlflow_server, write_spec, cli, workdir, monkeypatch
):
    uri, server_dir = mlflow_server
    # credentials reach MLflow only from its own environment variables, and are written nowhere
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", SECRET)
    write_spec(tiny_spec("served", trials=2, tracking={"mlflow_uri": uri}))
    ran = cli("run", "sweep.yaml", "--workers", "2")
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("served")
    trials, seeds = split_runs(client, experiment.experiment_id)
    assert len(trials) == 2 and len(seeds) == 4 and {r.info.status for r in trials + seeds} == {"FINISHED"}
    assert experiment.artifact_location.startswith("mlflow-artifacts:")  # proxied: stored by the server
    assert "spec.resolved.json" in {a.path for a in client.list_artifacts(trials[0].info.run_id)}
    assert (server_dir / "art").is_dir() and not (workdir / "mlruns").exists()
    for command in (("status", "served"), ("export", "served"), ("report", "served")):
        result = cli(*command)
        assert result.returncode == 0, (command, result.stderr[-2000:])
    assert client.search_runs([experiment.experiment_id], filter_string="attributes.run_name = 'report'")
    diagnosed = cli("diagnose", seeds[0].info.run_id, "--tracking-uri", uri, "--json")
    assert diagnosed.returncode == 0 and json.loads(diagnosed.stdout)["verdict"], diagnosed.stderr[-2000:]
    ui = cli("ui", "served")
    assert ui.returncode == 0 and f"MLflow UI: {uri}" in ui.stdout and "nothing to start" in ui.stdout
    for root in (workdir, server_dir):
        for path in root.rglob("*"):
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path


def test_an_unreachable_server_is_refused_in_one_line_before_anything_runs(write_spec, cli, workdir):
    port = free_port()  # closed again: nothing listens there
    write_spec(tiny_spec("nowhere", tracking={"mlflow_uri": f"http://127.0.0.1:{port}"}))
    started = time.monotonic()
    result = cli("run", "sweep.yaml")
    assert result.returncode == 2 and time.monotonic() - started < 60
    assert "tracking.mlflow_uri: no MLflow server answers at" in result.stderr and "Traceback" not in result.stderr
    assert not (workdir / "results").exists()


def test_credentials_in_the_tracking_uri_are_refused(write_spec, cli):
    write_spec(tiny_spec("creds", tracking={"mlflow_uri": f"https://alice:{SECRET}@mlflow.example.com"}))
    result = cli("validate", "sweep.yaml")
    assert (
        result.returncode == 2
        and "tracking.mlflow_uri" in result.stderr
        and "MLFLOW_TRACKING_PASSWORD" in result.stderr
    )
    assert SECRET not in result.stderr  # the refusal does not echo them either


_OUTAGE_TRIALS = 6  # of two seeds each, on two workers: several waves of training after the first run


@pytest.mark.slow
def test_a_tracking_server_that_goes_away_mid_sweep_loses_and_repeats_nothing(tmp_path, write_spec, workdir):
    """The server is stopped as soon as the sweep has asked Optuna for its first trial, for 12 s,
    then started again on the same store: the driver trains and writes Optuna meanwhile, holds its
    MLflow writes and retries them, and every run, metric point and artifact arrives exactly once.

    The outage is timed by Optuna, not MLflow. The driver puts training and Optuna first, and on a
    fast machine with a slow MLflow every trial was in Optuna before MLflow had a run, so an outage
    timed by the first run had nothing left to train through. A trial is asked before any of its
    seeds trains, so none is done yet; whether the tracker was built before the outage or meets it
    varies, and both must hold."""
    import optuna

    port = free_port()
    uri, server = f"http://127.0.0.1:{port}", serve_mlflow(tmp_path, port)
    write_spec(tiny_spec("outage", trials=_OUTAGE_TRIALS, tracking={"mlflow_uri": uri}))
    log = (workdir / "run.log").open("w")
    command = [sys.executable, "-m", "sweeps", "run", "sweep.yaml", "--workers", "2"]
    sweep = subprocess.Popen(command, cwd=workdir, env=subprocess_env(), stdout=log, stderr=subprocess.STDOUT)
    db = workdir / "results" / "outage" / "optuna.db"
    try:
        asked = wait_for_states(db, lambda states: bool(states) or sweep.poll() is not None, timeout=180)
        assert asked and sweep.poll() is None, (workdir / "run.log").read_text()[-3000:]
        stop_server(server)
        stopped = time.monotonic()
        storage = f"sqlite:///{db}"
        done_before = len(optuna.load_study(study_name="outage", storage=storage).get_trials(states=_DONE))
        assert done_before < _OUTAGE_TRIALS, "the sweep was over before the outage began"
        time.sleep(12)  # retried after 1, 2, 4 and 8 s meanwhile
        done_during = len(optuna.load_study(study_name="outage", storage=storage).get_trials(states=_DONE))
        assert done_during > done_before and sweep.poll() in (None, 0)  # trained and told Optuna meanwhile
        server = serve_mlflow(tmp_path, port)
        assert sweep.wait(timeout=300) == 0, (workdir / "run.log").read_text()[-3000:]
        assert time.monotonic() - stopped > 12
        _check_exactly_once(uri, (workdir / "run.log").read_text())
    finally:
        if sweep.poll() is None:
            sweep.kill()
        stop_server(server)


def _check_exactly_once(uri: str, output: str) -> None:
    assert "MLflow server unreachable" in output and "reachable again" in output, output[-3000:]
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("outage")
    trials, seeds = split_runs(client, experiment.experiment_id)
    assert sorted(r.info.run_name for r in trials) == [f"trial-{n}" for n in range(_OUTAGE_TRIALS)]  # none twice
    assert len(seeds) == 2 * _OUTAGE_TRIALS and {r.info.status for r in trials + seeds} == {"FINISHED"}
    for run in seeds:
        assert len(client.get_metric_history(run.info.run_id, "eval/mean_return")) == 1
        for key in run.data.metrics:
            steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
            assert len(steps) == len(set(steps)), (run.info.run_name, key, steps)
    for run in trials:
        assert "spec.resolved.json" in {a.path for a in client.list_artifacts(run.info.run_id)}
        assert run.data.tags["rlsweep.outcome"] == "complete" and "objective" in run.data.metrics
