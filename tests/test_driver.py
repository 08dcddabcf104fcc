"""The driver's logic against a scripted backend and a recording tracker (tests/fakes.py), with a
real in-memory Optuna study: retries of jobs whose worker died, doomed trials, how each ending is
told to Optuna, and Ctrl-C. The end-to-end tests run the same paths on real workers and stores."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from stability import keys
from sweeps import study as st
from sweeps import study_storage as ss
from sweeps.backends import Failure, Metrics, Pool
from sweeps.driver import Driver
from sweeps.spec import from_dict
from sweeps.trial import TrialConfig
from tests.fakes import Recorder, Scripted, died, metrics, result


def _driver(
    script: Any,
    capacity: int = 2,
    study: Any = None,
    interrupt_after: int | None = None,
    backend_class: type[Scripted] = Scripted,
    tracker: Recorder | None = None,
    **spec: Any,
):
    doc = {
        "name": "scripted",
        "env": {"id": "Pendulum-v1"},
        "algo": "PPO",
        "total_timesteps": 1000,
        "seeds": 2,
        "trials": 1,
        "space": {"learning_rate": {"type": "choice", "values": [0.001, 0.002]}},
    } | spec
    study = study or optuna.create_study(direction="maximize")
    backend, tracker = backend_class(script, capacity, interrupt_after), tracker or Recorder()
    return Driver(from_dict(doc), backend, tracker, study), study, backend, tracker


def _healthy(config: TrialConfig, attempt: int) -> list:
    return [result(mean_return=10.0 * config.trial + config.seed)]


# --- jobs whose worker died ---------------------------------------------------------------------
def test_a_retried_job_logs_each_step_once_and_records_why_it_was_retried():
    def script(config: TrialConfig, attempt: int) -> list:
        if config.seed == 0 and attempt == 1:
            return [*metrics(100, 200, 300), died("worker process local-1 died (exit code -9, signal 9)")]
        return [*metrics(100, 200, 300, 400, 500), result(mean_return=5.0)]

    driver, study, backend, tracker = _driver(script, backend={"max_failures": 1})
    progress = driver.run()
    (trial,) = study.get_trials()
    assert trial.state.name == "COMPLETE" and trial.value == 5.0
    assert [c.key for c in backend.submitted].count((0, 0)) == 2 and progress.retried == 1
    seed0 = tracker.run("trial-0-seed-0")
    assert seed0["steps"] == [100, 200, 300, 400, 500]  # the retry's repeat of 100-300 is not logged again
    assert seed0["tags"]["rlsweep.attempts"] == "2" and "signal 9" in seed0["tags"]["rlsweep.retried_after"]
    assert "rlsweep.attempts" not in tracker.run("trial-0-seed-1")["tags"]
    assert progress.jobs_done == 2  # a retried attempt is not a finished job


def test_a_seed_s_run_names_its_worker_and_node_while_it_runs_and_again_where_its_retry_ran():
    class Watching(Recorder):
        """Notes each tag write with the run's state when it came."""

        def __init__(self) -> None:
            super().__init__()
            self.writes: list[tuple[str, str | None, dict[str, str]]] = []

        def set_tags(self, run_id, tags) -> None:
            self.writes.append((self.runs[run_id]["name"], self.runs[run_id]["end"], dict(tags)))
            super().set_tags(run_id, tags)

    def script(config: TrialConfig, attempt: int) -> list:
        return [*metrics(100), died()] if (config.seed, attempt) == (0, 1) else [*metrics(100), result()]

    watching = Watching()
    driver, study, backend, tracker = _driver(script, backend={"max_failures": 1}, tracker=watching)
    driver.run()
    seed0 = [(end, tags) for name, end, tags in watching.writes if name == "trial-0-seed-0"]
    where = {keys.WORKER: "scripted", keys.NODE: ""}
    assert seed0 == [(None, where), (None, where)]  # written while running, at each start
    assert tracker.run("trial-0-seed-0")["end"] == "FINISHED"


def test_a_worker_that_dies_past_max_failures_crashes_the_trial():
    def script(config: TrialConfig, attempt: int) -> list:
        return [died(f"died on attempt {attempt}")] if config.seed == 0 else [result()]

    driver, study, backend, tracker = _driver(script, backend={"max_failures": 2})
    driver.run()
    (trial,) = study.get_trials()
    assert trial.state.name == "FAIL" and trial.user_attrs["rlsweep.outcome"] == "crashed"
    assert trial.user_attrs["rlsweep.error"] == "seed 0: WorkerDied: died on attempt 3"
    assert [c.seed for c in backend.submitted].count(0) == 3
    seed0 = tracker.run("trial-0-seed-0")
    assert seed0["end"] == "FAILED" and seed0["tags"]["rlsweep.attempts"] == "3"
    assert seed0["tags"]["rlsweep.retried_after"] == "died on attempt 1 | died on attempt 2"


def test_a_job_that_raises_is_never_retried():
    def script(config: TrialConfig, attempt: int) -> list:
        return [Failure("ValueError", "bad obs", "Traceback ...")] if config.seed == 1 else [result()]

    driver, study, backend, _ = _driver(script, backend={"max_failures": 3})
    driver.run()
    assert len(backend.submitted) == 2
    assert study.get_trials()[0].user_attrs["rlsweep.error"] == "seed 1: ValueError: bad obs"


def test_the_pool_resubmits_the_config_it_was_given():
    config = TrialConfig("s", 3, 0, "PPO", "MlpPolicy", {}, {"lr": 1}, 10)
    backend = Scripted(lambda c, attempt: [died()] if attempt == 1 else [result()], capacity=1)
    pool = Pool(backend, max_failures=1)
    pool.add([config])
    seen = []
    while pool.busy:
        pool.fill()
        seen += pool.poll(0)
    assert backend.submitted == [config, config] and pool.tries == {(3, 0): [died().message]}
    assert [type(e).__name__ for e in seen] == ["Event", "Retried", "Event", "Event"]


# --- doomed trials ------------------------------------------------------------------------------
def test_a_doomed_trial_never_runs_its_queued_seeds():
    def script(config: TrialConfig, attempt: int) -> list:
        return [result("nan_scale", stopped_by="nan_scale")] if config.seed == 0 else [result()]

    driver, study, backend, tracker = _driver(script, capacity=1, seeds=3, stability={"stop_on": ["nan_scale"]})
    progress = driver.run()
    assert [c.seed for c in backend.submitted] == [0]
    (trial,) = study.get_trials()
    assert trial.state.name == "PRUNED" and trial.user_attrs["rlsweep.outcome"] == "unstable"
    assert trial.user_attrs["rlsweep.verdict"] == "nan_scale"
    for seed in (1, 2):
        run = tracker.run(f"trial-0-seed-{seed}")
        assert run["end"] == "KILLED" and run["tags"]["rlsweep.outcome"] == "skipped"
        assert run["tags"]["rlsweep.cancelled"] == "seed 0 of this trial was found nan_scale"  # why it never ran
    assert tracker.run("trial-0-seed-0")["tags"][keys.STABILITY_STOPPED_BY] == "nan_scale"
    assert progress.jobs_total == 1 and progress.jobs_done == 1 and progress.failed == 1


@pytest.mark.parametrize("siblings", [True, False])
def test_stop_siblings_cancels_the_running_seeds_of_a_doomed_trial(siblings: bool):
    def script(config: TrialConfig, attempt: int) -> list:
        if config.seed == 0:
            return [result("dead_policy_gradient", stopped_by="dead_policy_gradient")]
        return metrics(100) if siblings else [result(mean_return=3.0)]  # with siblings: runs until cancelled

    driver, study, backend, tracker = _driver(
        script,
        capacity=3,
        seeds=3,
        stability={"stop_on": ["dead_policy_gradient"], "stop_siblings": siblings},
    )
    driver.run()
    assert study.get_trials()[0].state.name == "PRUNED"
    if siblings:
        ((cancelled, reason),) = backend.cancelled
        assert sorted(cancelled) == [(0, 1), (0, 2)] and reason == "seed 0 of this trial was found dead_policy_gradient"
        run = tracker.run("trial-0-seed-1")
        assert run["end"] == "KILLED" and run["tags"]["rlsweep.cancelled"] == reason
    else:
        assert backend.cancelled == [] and tracker.run("trial-0-seed-1")["end"] == "FINISHED"


# --- how a trial ends in Optuna -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("seed1", "state", "outcome"),
    [
        (result(mean_return=7.0), "COMPLETE", "complete"),
        (result("stuck_value_loss", mean_return=7.0), "COMPLETE", "complete"),  # judged, not stopped: scored
        (result("stuck_value_loss", stopped_by="stuck_value_loss"), "PRUNED", "unstable"),
        (Failure("RuntimeError", "CUDA error"), "FAIL", "crashed"),
    ],
)
def test_each_ending_is_told_to_optuna_as_its_state(seed1: Any, state: str, outcome: str):
    driver, study, _, tracker = _driver(
        lambda config, attempt: [seed1] if config.seed == 1 else [result(mean_return=3.0)],
        stability={"stop_on": ["stuck_value_loss"]},
    )
    progress = driver.run()
    (trial,) = study.get_trials()
    assert trial.state.name == state and trial.user_attrs["rlsweep.outcome"] == outcome
    assert tracker.run("trial-0")["tags"]["rlsweep.outcome"] == outcome
    assert progress.failed == (state != "COMPLETE")
    if state == "COMPLETE":
        assert trial.value == 5.0 and trial.user_attrs["rlsweep.returns"] == {"0": 3.0, "1": 7.0}
        assert trial.user_attrs["rlsweep.verdict"] == (
            "healthy" if seed1.verdict["verdict"] == "healthy" else "stuck_value_loss"
        )


@pytest.mark.parametrize(
    ("aggregate", "value"),
    [("mean", 6.0), ("median", 6.0), ("min", 2.0), ("mean - std", 6.0 - 3.2660), ("mean-0.5*std", 6.0 - 1.6330)],
)
def test_the_objective_aggregates_the_seeds_returns(aggregate: str, value: float):
    returns = {0: 2.0, 1: 6.0, 2: 10.0}
    driver, study, _, _ = _driver(
        lambda config, attempt: [result(mean_return=returns[config.seed])],
        seeds=3,
        objective={"aggregate": aggregate},
    )
    driver.run()
    assert study.get_trials()[0].value == pytest.approx(value, abs=1e-4)


def test_the_sweep_opens_trials_until_its_target_and_never_more():
    driver, study, backend, _ = _driver(_healthy, capacity=3, trials=4)
    progress = driver.run()
    assert len(study.get_trials()) == 4 and len(backend.submitted) == 8
    assert (
        progress.done == 4
        and (progress.best, progress.best_trial) == (30.5, 3)
        and progress.jobs_done == progress.jobs_total == 8
    )


def test_finished_trials_missing_from_mlflow_get_runs_made_from_the_study_once():
    """A driver killed before it wrote a finished trial's runs at all leaves a trial the study holds
    and MLflow lacks: the next driver makes its runs, closed as the study says, and says so."""

    def script(config: TrialConfig, attempt: int) -> list:
        crash = config.trial == 1 and config.seed == 1
        return [Failure("ValueError", "bad obs", "Traceback ...")] if crash else [result(mean_return=7.0)]

    driver, study, _, _ = _driver(script, trials=2)
    driver.run()
    lost = Recorder()  # a store that never got the runs
    driver, _, backend, _ = _driver(script, study=study, tracker=lost, trials=2)
    progress = driver.run()
    assert not backend.submitted and progress.restored == [0, 1]
    ends = {d["name"]: (d["end"], d["tags"][keys.OUTCOME]) for d in lost.runs.values()}
    assert ends == {
        "trial-0": ("FINISHED", "complete"),
        "trial-0-seed-0": ("FINISHED", "complete"),
        "trial-0-seed-1": ("FINISHED", "complete"),
        "trial-1": ("FAILED", "crashed"),
        "trial-1-seed-0": ("FINISHED", "complete"),  # its return is in the study
        "trial-1-seed-1": ("FAILED", "crashed"),
    }
    assert all(keys.RESTORED in d["tags"] for d in lost.runs.values())
    assert lost.run("trial-1")["tags"][keys.ERROR] == "seed 1: ValueError: bad obs"
    driver, _, _, _ = _driver(script, study=study, tracker=lost, trials=2)
    assert driver.run().restored == [] and len(lost.runs) == 6  # made once
    half = Recorder()  # killed between writing trial 0's trial run and its seeds' (closed on resume)
    half.start_seed(0, 0, half.start_trial(0, {}, {}), {})
    driver, _, _, _ = _driver(script, study=study, tracker=half, trials=2)
    assert driver.run().restored == [0, 1]
    assert sorted(d["name"] for d in half.runs.values() if keys.RESTORED in d["tags"]) == [
        "trial-0-seed-1",
        "trial-1",
        "trial-1-seed-0",
        "trial-1-seed-1",
    ]
    assert half.run("trial-0")["end"] is None and half.run("trial-0-seed-1")["end"] == "FINISHED"


def test_the_trials_failed_by_a_verdict_a_reference_return_could_excuse_are_named():
    """stuck_value_loss beside returns that rose, with no reference return known, may be a critic
    lagging a policy that learns: the sweep's summary names those trials (and only those)."""

    def script(config: TrialConfig, attempt: int) -> list:
        done = result("stuck_value_loss")
        if config.trial == 0:  # trial 1 is stuck for another reason (its returns did not rise)
            done.verdict["findings"][0]["evidence"][keys.UNREFERENCED_RISE] = True
        return [done]

    driver, _, _, _ = _driver(script, trials=2, seeds=1, capacity=1)
    assert driver.run().unreferenced == [0]


# --- Ctrl-C -------------------------------------------------------------------------------------
def test_no_trial_opens_once_the_time_budget_is_spent_and_the_running_ones_finish():
    holder: list[Driver] = []

    def script(config: TrialConfig, attempt: int) -> list:
        if config.trial == 2:  # the budget runs out while trial 2 is being submitted
            holder[0].progress.deadline = 0.0
        return [result(mean_return=float(config.trial))]

    driver, study, backend, _ = _driver(script, capacity=1, seeds=1, trials=10, time_budget="1h")
    holder.append(driver)
    progress = driver.run()
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE"] * 3
    assert [c.trial for c in backend.submitted] == [0, 1, 2]
    assert progress.out_of_time and progress.done == 3 and progress.jobs_total == progress.jobs_done == 3


def test_an_interrupted_sweep_abandons_its_jobs_and_the_next_run_requeues_them():
    driver, study, backend, tracker = _driver(lambda c, a: metrics(100), trials=2, interrupt_after=3)
    with pytest.raises(KeyboardInterrupt):
        driver.run()
    assert backend.closed == 1
    (trial,) = study.get_trials()  # one trial's 2 seeds fill the 2 slots; the second was never opened
    assert trial.state.name == "RUNNING"
    opened = [r for r in tracker.runs.values() if r["name"].startswith("trial-0")]
    assert len(opened) == 3 and all(r["end"] == "KILLED" for r in opened)
    assert {r["tags"]["rlsweep.outcome"] for r in opened} == {"interrupted"}

    again, study, _, _ = _driver(_healthy, trials=2, study=study)
    progress = again.run()
    states = [(t.state.name, t.user_attrs["rlsweep.outcome"]) for t in study.get_trials()]
    assert states == [("FAIL", "interrupted"), ("COMPLETE", "complete"), ("COMPLETE", "complete")]
    assert study.get_trials()[1].params == trial.params  # the interrupted config runs again first
    assert progress.requeued == [0] and [t.number for t in st.counted(study)] == [1, 2]


def test_metrics_of_a_job_reach_its_seed_run_in_order():
    driver, _, _, tracker = _driver(lambda c, a: [*metrics(1, 2, 3), result()], seeds=1)
    driver.run()
    assert tracker.run("trial-0-seed-0")["steps"] == [1, 2, 3]
    assert isinstance(metrics(1)[0], Metrics)


def test_points_that_arrive_before_their_run_exists_are_held_in_order_and_runs_are_created_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A seed's run could not be created at first (the tracking server went away after its
    trial's run was made): its points are held, in order, and handed over once it exists. Runs
    to create go before the other writes, but after the reconcile of the runs a dead driver left
    RUNNING (which would close the new ones too)."""

    class TwoEventsAPoll(Scripted):
        def poll(self, timeout: float) -> list:
            out, self.events = self.events[:2], self.events[2:]
            return out

    class AwayOnce(Recorder):
        server = True

        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []

        def reconcile(self, outcomes) -> int:
            self.calls.append("reconcile")
            return 0

        def start_trial(self, *args: Any, **kwargs: Any) -> str:
            self.calls.append("create")
            return super().start_trial(*args, **kwargs)

        def start_seed(self, *args: Any, **kwargs: Any) -> str:
            if "away" not in self.calls:
                self.calls.append("away")
                raise ConnectionError("Connection refused")
            return super().start_seed(*args, **kwargs)

        def log_metrics(self, run_id, step, values) -> None:
            self.calls.append(f"step {step}")
            super().log_metrics(run_id, step, values)

    script = lambda c, a: [*metrics(1, 2, 3, 4), result()]  # noqa: E731
    driver, _, _, tracker = _driver(script, capacity=1, backend_class=TwoEventsAPoll, tracker=AwayOnce(), seeds=1)
    driver.run()
    assert tracker.run("trial-0-seed-0")["steps"] == [1, 2, 3, 4]
    # the reconcile, the trial's run, then the seed's once the server was back (Recorder makes it
    # as a run too), then the points held meanwhile, in order
    assert tracker.calls == ["reconcile", "create", "away", "create", "step 1", "step 2", "step 3", "step 4"]
    assert driver._early == {}


def test_an_event_takes_its_kind_from_its_payload_and_the_wire_form_is_checked():
    from sweeps.backends._base import Event, from_wire

    assert Event((1, 0), Metrics(5, {})).kind == "metrics" and Event((1, 0), died()).kind == "failed"
    assert from_wire("started", [1, 0], {"worker": "w", "gpu_ids": ["0"]}).payload.gpu_ids == ("0",)
    with pytest.raises(ValueError, match="unknown event kind 'bogus'"):
        from_wire("bogus", (1, 0), {})


# --- tracking writes do not hold up events ------------------------------------------------------
def test_a_backlog_of_tracking_writes_is_done_in_order_a_budget_at_a_time():
    import time

    driver, *_ = _driver(_healthy)
    done: list[int] = []
    for n in range(6):
        driver._mlflow.append(lambda n=n: (time.sleep(0.1), done.append(n)))
    driver._write_mlflow(budget=0.25)  # a turn of the loop: some writes, then back to the events
    assert 1 <= len(done) <= 4 and done == list(range(len(done)))
    assert driver.progress.tracking_held == 6 - len(done)
    driver._write_mlflow()  # at the end: all of them, still in order
    assert done == list(range(6)) and driver.progress.tracking_held == 0


# --- the study's storage ------------------------------------------------------------------------
@pytest.mark.parametrize("writes", ["plain_sql", "optuna"])
def test_the_sole_writer_storage_reads_what_optuna_reads_and_asks_the_database_only_for_what_was_written(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, writes: str
) -> None:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
    from optuna.trial import TrialState, create_trial

    if writes == "optuna":  # a schema the plain-SQL writes were not made for: Optuna's own writes
        monkeypatch.setattr(ss, "SCHEMA", "another")
    url = f"sqlite:///{tmp_path / 'study.db'}"
    space = {"x": FloatDistribution(0.0, 1.0), "k": CategoricalDistribution(["a", "b"])}
    study = optuna.create_study(
        study_name="s",
        storage=ss.sole_writer_storage(url),
        direction="maximize",
        pruner=optuna.pruners.MedianPruner(0, 0),
    )
    assert type(study._storage).__name__ == ("PlainSqlStorage" if writes == "plain_sql" else "SoleWriterStorage")
    trials = [study.ask(space) for _ in range(4)]  # the sampler reads the study between asks
    trials[0].report(1.0, 10)
    trials[0].report(float("nan"), 11)
    trials[0].set_user_attr("u", {"a": (1, 2)})  # read back as JSON gives it: a list
    study._storage.set_trial_system_attr(trials[1]._trial_id, "s", 2)
    study.tell(trials[2], 3.0)
    study.tell(trials[3], state=TrialState.FAIL)
    study.enqueue_trial({"x": 0.5, "k": "b"}, user_attrs={"why": "queued"})
    queued = study.ask(space)  # takes the waiting trial: a state written by this process
    queued.report(2.0, 5)
    trials[1].report(0.5, 10)
    trials[1].should_prune()  # the pruner reads the study too
    added = create_trial(  # as a repair attempt is added: finished, with its real params
        params={"x": 0.25, "k": "a", "n": 3},
        distributions=space | {"n": IntDistribution(1, 5)},
        value=float("-inf"),
        user_attrs={"t": [1, {"2": 3}]},
        intermediate_values={1: float("inf")},
    )
    study.add_trial(added)
    with pytest.raises(ValueError, match="Cannot set different distribution kind"):
        study.ask({"x": IntDistribution(0, 3)})  # refused as Optuna refuses it (the trial stays running)
    mine = {t.number: t for t in study.get_trials()}
    theirs = {t.number: t for t in optuna.load_study(study_name="s", storage=url).get_trials()}
    assert sorted(mine) == sorted(theirs) == [0, 1, 2, 3, 4, 5, 6]
    for number, t in theirs.items():
        m = mine[number]
        assert (m._trial_id, m.state, m.values, m.params, m.distributions) == (
            t._trial_id,
            t.state,
            t.values,
            t.params,
            t.distributions,
        )
        assert (m.user_attrs, m.system_attrs) == (t.user_attrs, t.system_attrs)
        assert str(m.intermediate_values) == str(t.intermediate_values)  # NaN == NaN as text
        assert (m.datetime_start, m.datetime_complete) == (t.datetime_start, t.datetime_complete)
    assert mine[4].params == {"x": 0.5, "k": "b"} and mine[4].state == TrialState.RUNNING
    assert mine[0].user_attrs["u"] == {"a": [1, 2]} and mine[5].values == [float("-inf")]
    assert study.best_trial.number == 2

    backend = study._storage._backend
    asked: list[set[int]] = []
    read, get = backend._get_trials, backend.get_trial

    def spy(study_id: int, states: Any, included_trial_ids: set[int], trial_id_greater_than: int) -> Any:
        asked.append(set(included_trial_ids))
        return read(study_id, states, included_trial_ids, trial_id_greater_than)

    def spy_one(trial_id: int) -> Any:
        asked.append({trial_id})
        return get(trial_id)

    monkeypatch.setattr(backend, "_get_trials", spy)
    monkeypatch.setattr(backend, "get_trial", spy_one)
    study.get_trials()
    assert asked == []  # nothing written since the last read: the database is not asked
    trials[0].report(4.0, 20)
    assert study.get_trials()[0].intermediate_values[20] == 4.0
    assert trials[0].should_prune() in (True, False)
    # Optuna's writes: the one trial written is read again (not every unfinished one); plain SQL
    # keeps the cache as the database holds the trial, and reads nothing
    assert asked == ([] if writes == "plain_sql" else [{trials[0]._trial_id}])
    with pytest.raises(RuntimeError, match="finished"):  # a finished trial stays as it ended, either way
        study._storage.set_trial_user_attr(trials[2]._trial_id, "late", 1)


MOUNTS = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 252:1 / / rw,relatime - ext4 /dev/vda1 rw
40 27 0:51 / /home/me/shared\\040drive rw,relatime - nfs4 server:/export rw,vers=4.2
41 40 0:52 / /home/me/shared\\040drive/scratch rw - tmpfs tmpfs rw
"""


def test_the_filesystem_of_a_path_is_its_longest_mount_point(tmp_path: Any) -> None:
    from pathlib import Path

    mounts = tmp_path / "mountinfo"
    mounts.write_text(MOUNTS)
    where = lambda p: ss.filesystem_type(Path(p), mounts)  # noqa: E731
    assert where("/home/me/results") == "ext4"
    assert where("/home/me/shared drive/results") == "nfs4"  # mountinfo writes the space as an octal escape
    assert where("/home/me/shared drive/scratch/x") == "tmpfs"
    assert where("/home/me/shared drivex") == "ext4"  # a prefix of a name is not a mount point
    assert ss.filesystem_type(Path("/x"), tmp_path / "absent") is None


@pytest.mark.parametrize("fs", ["local", "nfs4"])
def test_the_study_commits_to_a_write_ahead_log_only_on_a_local_filesystem(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, fs: str
) -> None:
    import sqlite3

    local = next(iter(ss._LOCAL_FILESYSTEMS))
    monkeypatch.setattr(ss, "filesystem_type", lambda path: local if fs == "local" else fs)
    db = tmp_path / "study.db"
    study = optuna.create_study(study_name="s", storage=ss.sole_writer_storage(f"sqlite:///{db}"))
    study.tell(study.ask(), 1.0)
    with study._storage._backend.engine.connect() as conn:
        mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
        sync = conn.exec_driver_sql("PRAGMA synchronous").scalar()
    assert (mode, sync) == (("wal", 1) if fs == "local" else ("delete", 2))
    # what was committed is there for a plain reader, the log not yet folded into the file
    assert [t.value for t in optuna.load_study(study_name="s", storage=f"sqlite:///{db}").trials] == [1.0]
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == mode
