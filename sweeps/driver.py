"""The driver: asks Optuna for configs, hands seed jobs to a backend, writes MLflow and Optuna.

It is the only process that opens either store, which is what lets parallel and resumed
sweeps lose nothing. Every sampled trial ends as ``complete`` (told its objective), ``unstable``
(a seed was stopped by its verdict: told PRUNED) or ``crashed`` (told FAIL, with the exception
recorded on the trial and on the failing seed's run). A failing trial may then be repaired
(:mod:`sweeps.repair`): its attempts run as jobs like any trial's, keyed by negative numbers,
and are added to the study as new finished trials when they end.
"""

from __future__ import annotations

import json
import math
import statistics
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from stability import keys
from stability.verdict import rank
from sweeps import repair as rp
from sweeps import scoring
from sweeps import space as sp
from sweeps import study as st
from sweeps.backends import Backend, Cancelled, Event, Failure, Metrics, Pool, Retried, Started
from sweeps.configs import stability_settings, trial_configs
from sweeps.errors import UsageError
from sweeps.results import TrialRecord, record
from sweeps.spec import SweepSpec
from sweeps.tracking import BackgroundTracker, MlflowTracker, closed_as, unreachable
from sweeps.trial import PERIODIC_RETURN, TrialResult

# After training ends, how long the driver waits for an absent tracking server to take the writes held.
OUTAGE_LIMIT = 600.0
# The most time one turn of the driver's loop spends on MLflow writes: a backlog of them (a slow
# store, a server back from an outage) must not keep events waiting, since a pruning or stop_on
# decision taken late lets the seeds it stops train on meanwhile.
WRITE_BUDGET = 0.5
# A finished trial's run made from the study on resume (Driver._restore_runs): what it lacks.
RESTORED_WHY = (
    "made from the Optuna study when the sweep was resumed: the driver that ran this trial stopped before it wrote "
    "the trial to MLflow, so its curves, plots and per-seed details were not kept"
)


@dataclass
class ActiveTrial:
    number: int
    optuna_trial: Any
    params: dict[str, Any]
    seeds: list[int]
    parent_run: str = ""
    logged: dict[str, Any] = field(default_factory=dict)  # every hyperparameter, fixed and sampled
    started: dict[int, Started] = field(default_factory=dict)  # seed -> who took it (its last start)
    child_runs: dict[int, str] = field(default_factory=dict)
    returns: dict[int, float] = field(default_factory=dict)
    train_seconds: dict[int, float] = field(default_factory=dict)
    errors: dict[int, Failure] = field(default_factory=dict)
    verdicts: dict[int, dict[str, Any]] = field(default_factory=dict)  # seed -> Verdict.to_dict()
    unstable: dict[int, str] = field(default_factory=dict)  # seed -> class that ended it
    skipped: set[int] = field(default_factory=set)  # never run: the trial was doomed
    periodic: dict[int, dict[int, float]] = field(default_factory=dict)  # step -> seed -> periodic return
    reported: int = -1  # the last step told to Optuna
    pruned: str = ""  # why the pruner stopped it
    run_key: str = field(default_factory=lambda: uuid.uuid4().hex)  # its MLflow runs', created once each
    # a repair's attempt (or its confirmation on fresh seeds): not an Optuna trial while it runs
    plan: rp.Plan | None = None
    attempt: rp.Attempt | None = None
    confirming: bool = False

    @property
    def ended(self) -> int:
        """How many of its seeds have an outcome."""
        return len(self.returns) + len(self.errors) + len(self.unstable) + len(self.skipped)

    @property
    def finished(self) -> bool:
        return self.ended == len(self.seeds)


@dataclass
class Progress:
    """What the live display shows; updated by the driver, read by :mod:`sweeps.progress`."""

    target: int
    done: int = 0  # trials counted towards the target, this run and before
    failed: int = 0
    pruned: int = 0
    running: int = 0
    jobs_done: int = 0
    jobs_total: int = 0
    best: float | None = None
    best_trial: int | None = None
    started: float = field(default_factory=time.monotonic)
    requeued: list[int] = field(default_factory=list)
    restored: list[int] = field(default_factory=list)  # finished trials whose MLflow runs were made on resume
    # trials failed by a verdict a reference return could have excused (no reference known)
    unreferenced: list[int] = field(default_factory=list)
    retried: int = 0  # jobs run again after their worker died
    verdicts: dict[str, int] = field(default_factory=dict)  # trial verdict -> trials
    repairs: dict[str, int] = field(default_factory=dict)  # repair status -> failing trials
    repairing: int = 0  # repair attempts running
    tracking_down: float | None = None  # since when (monotonic) the tracking server has not answered
    tracking_held: int = 0  # MLflow writes held meanwhile
    deadline: float | None = None  # (monotonic) the time budget's end: no trial or repair opens after it
    out_of_time: bool = False  # the time budget closed the sweep before its target

    def eta(self) -> float | None:
        if not self.jobs_done:
            return None
        rate = (time.monotonic() - self.started) / self.jobs_done
        return rate * max(self.jobs_total - self.jobs_done, 0)


class Driver:
    def __init__(
        self,
        spec: SweepSpec,
        backend: Backend,
        tracker: MlflowTracker | BackgroundTracker,
        study: Any,
        on_change: Callable[[Progress], None] | None = None,
        repair: rp.RepairSettings | None = None,
        open_trials: bool = True,
    ) -> None:
        self.spec, self.backend, self.tracker, self.study = spec, backend, tracker, study
        self.dims = spec.dims
        self.distributions = sp.to_optuna(self.dims)
        self.on_change = on_change or (lambda progress: None)
        self.active: dict[int, ActiveTrial] = {}
        self.pool = Pool(backend, spec.backend.max_failures)
        self._mlflow: deque[Callable[[], object]] = deque()  # MLflow writes, done after submitting work
        # Runs to create (after the reconcile of runs a dead driver left): done before the other
        # writes, so that a seed's metric points, held here until its run exists, wait for that
        # alone and not for every write queued before it
        self._creations: deque[Callable[[], object]] = deque()
        self.progress = Progress(target=spec.n_trials)
        self._aggregate = scoring.aggregator(spec.objective.aggregate) or statistics.fmean  # checked by the spec
        self._stability = stability_settings(spec)
        self.logged_step: dict[tuple[int, int], int] = {}  # job -> last step sent to MLflow
        self.retry_floor: dict[tuple[int, int], int] = {}  # retried job -> steps up to here are logged
        self._early: dict[tuple[int, int], list[Metrics]] = {}  # job -> its points, until its run exists
        # Repairs: by ``stability.repair.auto`` (bounded by the sweep's own size) or ``rlsweep repair``.
        auto = spec.stability.repair
        self.repair = repair or (
            rp.RepairSettings(auto.max_attempts, auto.confirm, budget=spec.n_trials * len(spec.seed_list))
            if auto.auto
            else None
        )
        self.open_trials = open_trials  # False: run only repairs (``rlsweep repair``)
        self.plans: list[rp.Plan] = []
        self._repair_jobs = 0
        self._next_key = -1  # repair jobs are keyed by negative numbers: never an Optuna trial's
        self._menu_facts: tuple[dict[str, Any], bool, bool] | None = None
        self._retry_at, self._backoff = 0.0, 1.0  # MLflow writes while the tracking server is away
        # on resume: finished trials missing runs, with their trial run's id (if it exists) and the seeds that have one
        self._missing: deque[tuple[TrialRecord, str | None, set[int]]] | None = None
        self._restore_key = uuid.uuid4().hex

    # --- the loop -------------------------------------------------------------------------
    # Each turn: submit work (Optuna only), then do the MLflow writes that have piled up, then
    # wait for events. A worker that finishes is handed its next job before the driver spends
    # time in MLflow, so workers do not sit idle between trials.
    def run(self) -> Progress:
        p = self.progress
        p.requeued = st.requeue_interrupted(self.study) if self.open_trials else []
        outcomes = st.outcomes(self.study)
        previous = st.counted(self.study)
        records = [record(t) for t in previous]
        # before any run of this one is made: it closes the runs a driver that died left RUNNING,
        # and makes those it died before writing at all
        self._creations.append(lambda: self.tracker.reconcile(outcomes))
        if records:
            self._creations.append(partial(self._restore_runs, records, outcomes))
        p.done = len(previous)
        p.failed = sum(t.state.name == "FAIL" for t in previous)
        for r in records:
            if r.verdict:
                p.verdicts[r.verdict] = p.verdicts.get(r.verdict, 0) + 1
        self._update_best(previous)
        p.jobs_total = max(p.target - p.done, 0) * len(self.spec.seed_list) if self.open_trials else 0
        if self.spec.time_budget is not None:  # counted from this run, as Optuna's own timeout is
            p.deadline = time.monotonic() + self.spec.time_budget
        for plan in self.plans:  # queued before run() by ``rlsweep repair``
            self._next_repair(plan)
        try:
            while self._fill() or self.active:
                self._write_mlflow(budget=WRITE_BUDGET)
                for event in self.pool.poll(timeout=0.25):
                    self._handle(event)
                self._tracked(self.tracker.flush_if_due)
                self.on_change(p)
            self._drain_writes()
        except BaseException:
            self._abandon()
            raise
        p.running = len(self.active)
        self.on_change(p)
        return p

    def _fill(self) -> bool:
        """Submit jobs while slots are free; open a new trial only when one is needed now."""
        self.pool.fill(self._open_trial)
        self.progress.running = sum(a.plan is None for a in self.active.values())
        self.progress.repairing = len(self.active) - self.progress.running
        return self.pool.busy

    def _write_mlflow(self, budget: float | None = None) -> None:
        """The MLflow writes that piled up, runs to create first, then the others in order, for at
        most ``budget`` seconds (all of them without one). While the tracking server is away they are
        held (training and Optuna go on) and tried again with backoff; each is done once."""
        until = math.inf if budget is None else time.monotonic() + budget
        for queue in (self._creations, self._mlflow):
            while queue and time.monotonic() < until and self._tracked(queue[0]):
                queue.popleft()
        self.progress.tracking_held = len(self._creations) + len(self._mlflow)

    def _tracked(self, write: Callable[[], object]) -> bool:
        """Do one MLflow write; False if the tracking server could not be reached (try later)."""
        now = time.monotonic()
        if self.progress.tracking_down is not None and now < self._retry_at:
            return False
        try:
            write()
        except Exception as exc:
            if not (getattr(self.tracker, "server", False) and unreachable(exc)):
                raise
            if self.progress.tracking_down is None:
                self.progress.tracking_down, self._backoff = now, 1.0
            self._retry_at, self._backoff = now + self._backoff, min(self._backoff * 2, 15.0)
            return False
        self.progress.tracking_down = None
        return True

    def _drain_writes(self) -> None:
        """Training is over: wait (up to OUTAGE_LIMIT) for the tracking server to take what is held."""
        deadline = time.monotonic() + OUTAGE_LIMIT
        while True:
            self._write_mlflow()
            if not self._creations and not self._mlflow and self._tracked(self.tracker.flush):
                return
            if time.monotonic() > deadline:
                raise UsageError(
                    f"the MLflow tracking server has not answered for {OUTAGE_LIMIT / 60:.0f} minutes; the "
                    f"sweep's trials are all in Optuna, {len(self._mlflow)} MLflow writes were not made. Run "
                    "the same command again once the server is back: it closes the runs from the study"
                )
            self.on_change(self.progress)
            time.sleep(0.5)

    def _open_trial(self) -> bool:
        """Ask Optuna for the next trial and queue its seeds, unless the target is reached."""
        opened = sum(a.plan is None for a in self.active.values())
        if not self.open_trials or self.progress.done + opened >= self.progress.target or self._out_of_time():
            return False
        trial = self.study.ask(self.distributions)
        params = sp.decode(self.dims, trial.params)
        trial.set_user_attr(keys.PARAMS, _jsonable(params))
        active = ActiveTrial(trial.number, trial, params, self.spec.seed_list)
        self.active[trial.number] = active
        active.logged, configs = trial_configs(self.spec, trial.number, params, active.seeds, self._stability)
        self.pool.add(configs)
        self._creations.append(lambda: self._start_runs(active))
        return True

    def _restore_runs(self, previous: list[TrialRecord], outcomes: dict[int, dict[str, Any]]) -> None:
        """Finished trials missing runs in MLflow get them, made from the study (the record of truth).
        A driver killed before it wrote a trial's runs (their creation queued behind the tracker's
        start-up or a tracking outage, while the trial ended and Optuna was told; or between its
        trial run and its seeds') leaves such trials. Their curves, plots and tags of where they ran
        died with it: the runs say so. Done again after an outage, it goes on where it stopped
        (runs are created once, by key)."""
        if self._missing is None:
            have = self.tracker.trial_runs()
            seeds = set(self.spec.seed_list)
            self._missing = deque(
                (r, *have.get(r.number, (None, set())))
                for r in previous
                if r.number not in have or have[r.number][0] is None or not seeds <= have[r.number][1]
            )
        while self._missing:
            r, parent, present = self._missing[0]
            known, why = outcomes[r.number], {keys.RESTORED: RESTORED_WHY}
            logged, _ = trial_configs(self.spec, r.number, r.params, self.spec.seed_list, self._stability)
            key = f"{self._restore_key}-{r.number}"
            made = parent is None
            run = parent or self.tracker.start_trial(r.number, logged, self._resolved(r.number, r.params), key=key)
            for seed in (s for s in self.spec.seed_list if s not in present):
                child = self.tracker.start_seed(r.number, seed, run, logged, key=f"{key}-{seed}")
                status, outcome, metrics = closed_as(known, seed)
                verdict = {keys.STABILITY_VERDICT: r.verdicts[seed]} if seed in r.verdicts else {}
                self.tracker.end_run(child, status, metrics=metrics, tags=why | verdict | {keys.OUTCOME: outcome})
            if made:  # (one that existed was closed by reconcile, or by the driver that ran it)
                status, outcome, metrics = closed_as(known, None)
                tags = why | {keys.OUTCOME: outcome} | ({keys.STABILITY_VERDICT: r.verdict} if r.verdict else {})
                tags |= {keys.ERROR: r.error} if r.error else {}
                self.tracker.end_run(run, status, metrics=metrics, tags=tags)
            self._missing.popleft()
            self.progress.restored.append(r.number)

    def _resolved(self, number: int, params: dict[str, Any]) -> dict[str, Any]:
        """The spec a trial ran, as its run's ``spec.resolved.json`` holds it."""
        return self.spec.resolved() | {"trial": number, "params": _jsonable(params)}

    def _start_runs(self, active: ActiveTrial) -> None:
        resolved = self._resolved(active.number, active.params)
        if not active.parent_run:  # (run again after a tracking outage: what was created stays)
            active.parent_run = self.tracker.start_trial(active.number, active.logged, resolved, key=active.run_key)
        for seed in active.seeds:
            if seed not in active.child_runs:
                active.child_runs[seed] = self.tracker.start_seed(
                    active.number, seed, active.parent_run, active.logged, key=f"{active.run_key}-{seed}"
                )
        self._created(active)

    # --- events ---------------------------------------------------------------------------
    def _handle(self, event: Event | Retried) -> None:
        trial_number, seed = event.key
        active = self.active.get(trial_number)
        if active is None:
            return
        if isinstance(event, Retried):  # its worker died; it runs again, and repeats steps already logged
            self.retry_floor[event.key] = self.logged_step.get(event.key, -1)
            self.progress.retried += 1
            return
        payload = event.payload
        if isinstance(payload, Metrics):
            if payload.step > self.retry_floor.get(event.key, -1):
                self.logged_step[event.key] = max(payload.step, self.logged_step.get(event.key, -1))
                if seed in active.child_runs and event.key not in self._early:
                    self.tracker.log_metrics(active.child_runs[seed], payload.step, payload.values)
                else:  # its run is still to be created (writes piled up, or the tracking server was
                    # away): held until it is (_created)
                    self._early.setdefault(event.key, []).append(payload)
            if PERIODIC_RETURN in payload.values and active.plan is None:
                active.periodic.setdefault(payload.step, {})[seed] = payload.values[PERIODIC_RETURN]
                self._report(active)
            return
        if isinstance(payload, Started):
            active.started[seed] = payload
            # a running seed's run says where it runs (a retried one: where it runs again), as a
            # finished one does: an operator watching a cluster sees which seeds a node holds
            self._mlflow.append(partial(self._tag_seed_run, active, seed, _where(active, seed)))
            return
        self.progress.jobs_done += 1
        tags = self._attempt_tags(event.key)
        # run ids are read when a write runs, not now: it may wait for its run's creation
        if isinstance(payload, TrialResult):
            self._seed_finished(active, seed, payload)
        elif isinstance(payload, Cancelled):
            active.skipped.add(seed)
            tags |= {keys.OUTCOME: "skipped", keys.CANCELLED: payload.reason}
            self._mlflow.append(partial(self._end_seed_run, active, seed, "KILLED", tags=tags))
        else:
            active.errors[seed] = payload
            tags |= {
                keys.OUTCOME: "crashed",
                **_where(active, seed),
                keys.ERROR: f"{payload.type}: {payload.message}",
            }
            texts = {"error.txt": payload.traceback or payload.message}
            self._mlflow.append(partial(self._end_seed_run, active, seed, "FAILED", tags=tags, texts=texts))
        if active.finished:
            self._close_trial(active)
        elif active.periodic:
            self._report(active)  # a step may have waited only on the seed that just ended

    def _tag_seed_run(self, active: ActiveTrial, seed: int, tags: dict[str, str]) -> None:
        """Tag a seed's run; its id is read now, when the write runs (after the run's creation)."""
        self.tracker.set_tags(active.child_runs[seed], tags)

    def _end_seed_run(self, active: ActiveTrial, seed: int, status: str, **fields: Any) -> None:
        """End a seed's run; its id is read now, when the write runs (after the run's creation)."""
        self.tracker.end_run(active.child_runs[seed], status, **fields)

    def _created(self, active: ActiveTrial) -> None:
        """The trial's seed runs exist: hand MLflow the points that came before, in order."""
        for seed, run_id in active.child_runs.items():
            for early in self._early.pop((active.number, seed), []):
                self.tracker.log_metrics(run_id, early.step, early.values)

    def _attempt_tags(self, key: tuple[int, int]) -> dict[str, str]:
        tries = self.pool.tries.get(key)
        return {keys.ATTEMPTS: str(len(tries) + 1), keys.RETRIED_AFTER: " | ".join(tries)[:5000]} if tries else {}

    def _seed_finished(self, active: ActiveTrial, seed: int, result: TrialResult) -> None:
        verdict = result.verdict or {"verdict": "healthy", "onset_step": None, "findings": []}
        active.verdicts[seed] = verdict
        tags = {
            **_where(active, seed),
            **_verdict_tags(verdict),
            keys.STABILITY_CONTEXT: json.dumps(result.context, default=str),
            **{f"rlsweep.{k}": str(v) for k, v in result.extra.items()},
            **self._attempt_tags((active.number, seed)),
        }
        files = {"stability/signals.png": result.plot_png} if result.plot_png else None
        texts = {"stability/verdict.json": json.dumps(verdict, indent=2)}
        metrics = {"time/train_seconds": result.train_seconds, "time/eval_seconds": result.eval_seconds}
        if result.stopped_by:
            # the seed's verdict names the failure; stopped_by only says which stop_on class ended it
            active.unstable[seed] = (
                verdict["verdict"] if verdict.get("verdict", "healthy") != "healthy" else result.stopped_by
            )
            tags |= {keys.OUTCOME: "unstable", keys.STABILITY_STOPPED_BY: result.stopped_by}
            crash = next(
                (f["evidence"]["error"] for f in verdict.get("findings", []) if "error" in f["evidence"]), None
            )
            if crash:  # the crash that ended it (torch's "Expected parameter ..."): diagnose reads it back
                tags[keys.ERROR] = crash
            self._skip_rest(active)
            self._mlflow.append(
                partial(
                    self._end_seed_run, active, seed, "FAILED", metrics=metrics, tags=tags, texts=texts, files=files
                )
            )
            return
        active.returns[seed] = result.mean_return
        active.train_seconds[seed] = result.train_seconds
        metrics |= {"eval/mean_return": result.mean_return, "eval/std_return": result.std_return}
        tags[keys.OUTCOME] = "complete"
        self._mlflow.append(
            partial(self._end_seed_run, active, seed, "FINISHED", metrics=metrics, tags=tags, texts=texts, files=files)
        )

    def _values(self, returns: dict[int, float], train_seconds: dict[int, float]) -> list[float]:
        """The trial's objective values (one, or one per ``objective.directions`` metric)."""
        return scoring.objective_values(
            self.spec.objective.names, self._aggregate, list(returns.values()), list(train_seconds.values())
        )

    def _report(self, active: ActiveTrial) -> None:
        """Tell Optuna the trial's intermediate value at each step every seed still in it has
        reported (aggregated as the objective is), in order; stop the trial if its pruner says so."""
        if self.spec.pruner.kind == "none" or active.pruned:
            return
        # as the driver has seen it so far (the pool is ahead of it within a batch of events)
        queued = {c.seed for c in self.pool.queue if c.trial == active.number}
        ended = {*active.returns, *active.errors, *active.unstable, *active.skipped}
        running = {s for s in active.seeds if s not in queued and s not in ended}
        last = {s: max((at for at, v in active.periodic.items() if s in v), default=-1) for s in active.returns}
        for step in sorted(s for s in active.periodic if s > active.reported):
            # seeds still training, and those that ended after evaluating at this step
            seeds = sorted(running | {s for s, at in last.items() if at >= step})
            values = active.periodic[step]
            if not seeds or any(s not in values for s in seeds):
                return
            active.reported = step
            value = self._aggregate([values[s] for s in seeds])
            active.optuna_trial.report(value, step)
            if active.optuna_trial.should_prune():
                active.pruned = (
                    f"pruned by the {self.spec.pruner.kind} pruner at step {step}: "
                    f"periodic return {value:.4g} (objective.aggregate of seeds {seeds})"
                )
                self._stop(active, active.pruned, cancel=True)
                return

    def _skip_rest(self, active: ActiveTrial) -> None:
        """A seed proved the trial doomed (``stability.stop_on``): its queued seeds never run, and
        with ``stability.stop_siblings`` those already running are stopped."""
        seeds = ", ".join(str(s) for s in active.unstable)
        reason = f"seed {seeds} of this trial was found {next(iter(active.unstable.values()))}"
        self._stop(active, reason, cancel=self.spec.stability.stop_siblings)

    def _stop(self, active: ActiveTrial, reason: str, cancel: bool) -> None:
        """End a trial early: its queued seeds never run and, with ``cancel``, its running ones are
        stopped (Ray: by a Tune stopper; local: by their worker at the next update)."""
        running = self.pool.running(active.number)
        if running and cancel:
            self.backend.cancel(running, reason)
        for config in self.pool.unqueue(active.number):
            active.skipped.add(config.seed)
            self.progress.jobs_total -= 1
            self._mlflow.append(
                partial(
                    self._end_seed_run,
                    active,
                    config.seed,
                    "KILLED",
                    tags={keys.OUTCOME: "skipped", keys.CANCELLED: reason},  # why it never ran
                )
            )

    def _close_trial(self, active: ActiveTrial) -> None:
        from optuna.trial import TrialState

        del self.active[active.number]
        if active.plan is not None:
            self._close_repair(active)
            return
        trial, p = active.optuna_trial, self.progress
        trial.set_user_attr(keys.RETURNS, {str(s): r for s, r in active.returns.items()})
        verdict = trial_verdict(active.verdicts)
        if active.verdicts:
            trial.set_user_attr(keys.VERDICT, verdict["verdict"])
            trial.set_user_attr(keys.VERDICTS, {str(s): v["verdict"] for s, v in active.verdicts.items()})
            p.verdicts[verdict["verdict"]] = p.verdicts.get(verdict["verdict"], 0) + 1
        tags = _verdict_tags(verdict) if active.verdicts else {}
        failing = bool(active.errors or active.unstable) or verdict["verdict"] != "healthy"
        if any(_unreferenced(v, verdict["verdict"]) for v in active.verdicts.values()):
            p.unreferenced.append(active.number)
        patches, env_broke = rp.candidates(active.verdicts), rp.env_broke(active.verdicts)
        if failing:  # what ``rlsweep repair`` will try (set now: a finished trial's attributes are final)
            trial.set_user_attr(keys.PATCHES, patches)
            if env_broke:
                trial.set_user_attr(keys.ENV_BROKE, True)
        texts = {
            "stability/verdict.json": json.dumps(
                verdict | {"seeds": {str(s): v for s, v in active.verdicts.items()}}, indent=2
            )
        }
        if active.errors:
            seed, error = next(iter(active.errors.items()))
            message = f"seed {seed}: {error.type}: {error.message}"
            trial.set_user_attr(keys.OUTCOME, "crashed")
            trial.set_user_attr(keys.ERROR, message[:1000])
            self.study.tell(trial, state=TrialState.FAIL)
            self._mlflow.append(
                lambda: self.tracker.end_run(
                    active.parent_run,
                    "FAILED",
                    tags={keys.OUTCOME: "crashed", keys.ERROR: message} | tags,
                    texts=texts,
                )
            )
            p.failed += 1
        elif active.unstable:
            # Ended by its verdict: pruned in Optuna (samplers learn the region is bad), never scored.
            # A verdict outranks a pruning that also ended it (recorded beside it).
            if active.pruned:
                trial.set_user_attr(keys.PRUNED, active.pruned)
            trial.set_user_attr(keys.OUTCOME, "unstable")
            self.study.tell(trial, state=TrialState.PRUNED)
            self._mlflow.append(
                lambda: self.tracker.end_run(
                    active.parent_run, "FAILED", tags={keys.OUTCOME: "unstable"} | tags, texts=texts
                )
            )
            p.failed += 1
        elif active.pruned:
            trial.set_user_attr(keys.OUTCOME, "pruned")
            trial.set_user_attr(keys.PRUNED, active.pruned)
            self.study.tell(trial, state=TrialState.PRUNED)
            self._mlflow.append(
                lambda: self.tracker.end_run(
                    active.parent_run,
                    "KILLED",
                    tags={keys.OUTCOME: "pruned", keys.PRUNED: active.pruned} | tags,
                    texts=texts,
                )
            )
            p.pruned += 1
        else:
            values = self._values(active.returns, active.train_seconds)
            value = values[0]
            trial.set_user_attr(keys.OUTCOME, "complete")
            self.study.tell(trial, values if len(values) > 1 else value)
            metrics = {"objective": value} | {f"eval/return_seed_{s}": r for s, r in active.returns.items()}
            if len(values) > 1:
                metrics |= {f"objective/{n}": v for n, v in zip(self.spec.objective.names, values, strict=True)}
            self._mlflow.append(
                lambda: self.tracker.end_run(
                    active.parent_run,
                    "FINISHED",
                    metrics=metrics,
                    tags={keys.OUTCOME: "complete"} | tags,
                    texts=texts,
                )
            )
            if p.best is None or value > p.best:
                p.best, p.best_trial = value, active.number
        p.done += 1
        if failing and self.repair is not None:
            plan = self.plan_for(
                active.number,
                active.params,
                verdict["verdict"] if active.verdicts else "crashed",
                dict(active.returns),
                active.seeds,
                patches,
                dict(trial.params),
                dict(trial.distributions),
                active.parent_run,
                env_broke=env_broke,
            )
            self.plans.append(plan)
            self._next_repair(plan)

    # --- repairs ----------------------------------------------------------------------------
    def plan_for(
        self,
        number: int,
        params: dict[str, Any],
        verdict: str,
        returns: dict[int, float],
        seeds: list[int],
        patches: list[dict[str, Any]],
        optuna_params: dict[str, Any],
        distributions: dict[str, Any],
        parent_run: str = "",
        env_broke: bool = False,
    ) -> rp.Plan:
        """A repair plan for a failing trial (see :mod:`sweeps.repair`)."""
        settings = self.repair or rp.RepairSettings()
        seeds = settings.seeds or seeds
        _, (config,) = trial_configs(self.spec, number, params, [0], {})
        if self._menu_facts is None:  # the same for every plan of this sweep
            self._menu_facts = rp.menu_facts(self.spec.algo, self.spec.env.model_dump())
        defaults, continuous, on_policy = self._menu_facts
        plan = rp.Plan(
            number,
            params,
            verdict,
            returns,
            seeds,
            rp.fresh_seeds(sorted(set(self.spec.seed_list) | set(seeds)), len(seeds)),
            patches,
            settings.max_attempts,
            settings.strategy,
            rp.menu(config.hyperparams, defaults, continuous, on_policy),
            settings.rng_seed,
        )
        raw = self.spec.model_dump(mode="json", exclude_unset=True)
        plan.check = lambda patch: rp.patch_problem(raw, config.hyperparams, patch)
        plan.context = {"optuna_params": optuna_params, "distributions": distributions, "parent_run": parent_run}
        plan.env_broke = env_broke
        return plan

    def _next_repair(self, plan: rp.Plan, confirm: rp.Attempt | None = None) -> None:
        """Queue the plan's next attempt (or ``confirm``'s run on fresh seeds); close the plan when
        there is none or the repair budget is spent."""
        attempt = confirm or plan.next_attempt()
        if attempt is None:
            self._plan_done(plan)
            return
        seeds = plan.fresh if confirm else plan.seeds
        if confirm is None and self._out_of_time():
            plan.attempts.pop()
            plan.finish("budget", "the sweep's time budget is spent: run `rlsweep repair`")
            self._plan_done(plan)
            return
        budget = self.repair.budget if self.repair else None
        if budget is not None and self._repair_jobs + len(seeds) > budget:
            if confirm is None:
                plan.attempts.pop()
                plan.finish("budget", f"the repair budget ({budget} seed runs, the sweep's own size) is spent")
            else:  # it passed on the trial's seeds; told as it is, unconfirmed
                self._tell_repair(plan, confirm)
                plan.finish(
                    "budget",
                    f"attempt {confirm.number} ({rp.describe(confirm.patch)}) passed on seeds "
                    f"{plan.seeds} but the repair budget ({budget} seed runs, the sweep's own "
                    "size) leaves none to confirm it on fresh seeds: run `rlsweep repair`",
                )
            self._plan_done(plan)
            return
        self._repair_jobs += len(seeds)
        key, self._next_key = self._next_key, self._next_key - 1
        active = ActiveTrial(key, None, plan.params, seeds, plan=plan, attempt=attempt, confirming=confirm is not None)
        self.active[key] = active
        active.logged, configs = trial_configs(self.spec, key, plan.params, seeds, self._stability, patch=attempt.patch)
        self.pool.add(configs)
        self.progress.jobs_total += len(configs)
        self._creations.append(lambda: self._start_repair_runs(active))

    def _out_of_time(self) -> bool:
        p = self.progress
        if p.deadline is not None and time.monotonic() >= p.deadline:
            p.out_of_time = True
            left = sum(len(a.seeds) - a.ended for a in self.active.values())
            p.jobs_total = p.jobs_done + left  # for the ETA: only what is running or queued is left
        return p.out_of_time

    def _start_repair_runs(self, active: ActiveTrial) -> None:
        plan, attempt = active.plan, active.attempt
        if plan is None or attempt is None:
            return
        name = f"trial-{plan.origin}-repair-{attempt.number}" + ("-confirm" if active.confirming else "")
        tags = {
            keys.REPAIR_OF: str(plan.origin),
            keys.REPAIR_ATTEMPT: str(attempt.number),
            keys.REPAIR_PATCH: json.dumps(attempt.patch),
        }
        if active.confirming:
            tags[keys.REPAIR_CONFIRM] = attempt.run_id
        resolved = self.spec.resolved() | {
            "repair_of": plan.origin,
            "params": _jsonable(plan.params),
            "patch": attempt.patch,
        }
        if not active.parent_run:
            active.parent_run = self.tracker.start_trial(
                None, active.logged, resolved, name=name, tags=tags, key=active.run_key
            )
        for seed in active.seeds:
            if seed in active.child_runs:
                continue
            active.child_runs[seed] = self.tracker.start_seed(
                None,
                seed,
                active.parent_run,
                active.logged,
                name=f"{name}-seed-{seed}",
                tags=tags,
                key=f"{active.run_key}-{seed}",
            )
        self._created(active)

    def _close_repair(self, active: ActiveTrial) -> None:
        plan, attempt = active.plan, active.attempt
        if plan is None or attempt is None:
            return
        names = {s: v["verdict"] for s, v in active.verdicts.items()} | {s: "crashed" for s in active.errors}
        verdict = trial_verdict(active.verdicts)
        label = verdict["verdict"] if verdict["verdict"] != "healthy" or not active.errors else "crashed"
        outcome = "crashed" if active.errors else "unstable" if active.unstable else "complete"
        tags = {keys.OUTCOME: outcome} | _verdict_tags({"verdict": label, "onset_step": verdict["onset_step"]})
        if active.confirming:
            ok = plan.confirmed(attempt, names, dict(active.returns), active.verdicts)
            self._mlflow.append(
                lambda: self.tracker.end_run(
                    active.parent_run,
                    "FINISHED" if ok else "FAILED",
                    tags=tags | {keys.REPAIR_CONFIRMED: str(ok)},
                    metrics={f"eval/return_seed_{s}": r for s, r in active.returns.items()},
                )
            )
            self._tell_repair(plan, attempt)
            if ok:
                self._plan_done(plan)
            else:
                self._next_repair(plan)
            return
        attempt.verdicts, attempt.returns, attempt.crashed = names, dict(active.returns), sorted(active.errors)
        attempt.verdict, attempt.run_id = label, active.parent_run
        attempt.offered = rp.candidates(active.verdicts)
        attempt.env_broke = rp.env_broke(active.verdicts)
        attempt.state = {
            "outcome": outcome,
            "returns": dict(active.returns),
            "train_seconds": dict(active.train_seconds),
            "verdicts": active.verdicts,
        }
        ok, why = plan.passes(attempt)
        attempt.result = why
        metrics = {f"eval/return_seed_{s}": r for s, r in active.returns.items()}
        self._mlflow.append(
            lambda: self.tracker.end_run(
                active.parent_run,
                "FINISHED" if outcome == "complete" else "FAILED",
                metrics=metrics,
                tags=tags | {keys.REPAIR_RESULT: why},
                texts={
                    "stability/verdict.json": json.dumps(
                        verdict | {"seeds": {str(s): v for s, v in active.verdicts.items()}}, indent=2
                    )
                },
            )
        )
        if ok and self.repair is not None and self.repair.confirm:
            self._next_repair(plan, confirm=attempt)
            return
        self._tell_repair(plan, attempt)
        if ok:
            plan.accept(attempt)
            self._plan_done(plan)
        else:
            self._next_repair(plan)

    def _tell_repair(self, plan: rp.Plan, attempt: rp.Attempt) -> None:
        """The attempt as a finished Optuna trial with its real params: the failing trial's sampled
        values, a patched swept key at its new value, and each other patched knob as a one-value
        parameter (see :func:`_patch_param`). The failing trial itself is never changed."""
        import optuna
        from optuna.trial import TrialState

        state_of = attempt.state
        params = dict(plan.context.get("optuna_params", {}))
        dists = dict(plan.context.get("distributions", {}))
        decoded = dict(plan.params)
        for knob, value in attempt.patch.items():
            dist, dim = dists.get(knob), self.dims.get(knob)
            stored = dim.encode(value) if dim is not None else value
            if dist is not None and sp.holds(dist, stored):
                params[knob], decoded[knob] = stored, value
            else:
                name, params[name], dists[name] = _patch_param(knob, value)
        attrs = {
            keys.OUTCOME: state_of["outcome"],
            keys.PARAMS: _jsonable(decoded),
            keys.REPAIR_OF: plan.origin,
            keys.REPAIR_ATTEMPT: attempt.number,
            keys.REPAIR_PATCH: attempt.patch,
            keys.RETURNS: {str(s): r for s, r in state_of["returns"].items()},
            keys.VERDICT: attempt.verdict,
            keys.VERDICTS: {str(s): v for s, v in attempt.verdicts.items()},
            keys.PATCHES: attempt.offered,
            keys.REPAIR_RESULT: attempt.result,
        }
        if attempt.confirm is not None:
            attrs[keys.CONFIRM] = attempt.confirm
        values = (
            self._values(state_of["returns"], state_of.get("train_seconds", {}))
            if state_of["outcome"] == "complete" and state_of["returns"]
            else [math.nan]
        )
        told = (
            {"values": values}
            if all(math.isfinite(v) for v in values)
            else {"state": TrialState.FAIL if state_of["outcome"] == "crashed" else TrialState.PRUNED}
        )
        try:
            self.study.add_trial(
                optuna.trial.create_trial(params=params, distributions=dists, user_attrs=attrs, **told)
            )
        except ValueError:  # a study that recorded a patched knob another way (before this encoding)
            kept = [k for k in params if k in plan.context.get("distributions", {})]
            self.study.add_trial(
                optuna.trial.create_trial(
                    params={k: params[k] for k in kept},
                    distributions={k: dists[k] for k in kept},
                    user_attrs=attrs,  # the patch stays in rlsweep.repair_patch
                    **told,
                )
            )
        attempt.trial = self.study.get_trials(deepcopy=False)[-1].number

    def _plan_done(self, plan: rp.Plan) -> None:
        status = plan.status if plan.status != "pending" else "failed"
        self.progress.repairs[status] = self.progress.repairs.get(status, 0) + 1
        fixed = plan.repaired
        tags = {keys.REPAIR: f"{status}: {plan.message}"}
        if fixed is not None:
            tags[keys.REPAIRED_BY] = fixed.run_id

        def link() -> None:  # the failing trial's run points at its repair
            parent = plan.context.get("parent_run") or self.tracker.find_trial_run(plan.origin)
            if parent:
                self.tracker.set_tags(parent, tags)

        self._mlflow.append(link)

    def _abandon(self) -> None:
        """On Ctrl-C or a driver error: stop workers and close open runs as KILLED.

        The Optuna trials stay RUNNING, so the next run of the same command marks them
        interrupted and queues their configs again.
        """
        for plan in self.plans:
            plan.finish("interrupted", "the run stopped before this repair ended; run `rlsweep repair` again")
        try:
            self.backend.close()
        finally:
            self.progress.tracking_down = None  # one last try each, however the server is doing
            self._write_mlflow()
            self._tracked(self.tracker.flush)
            killed = {keys.OUTCOME: "interrupted"}
            for active in self.active.values():
                for run_id in [*active.child_runs.values(), active.parent_run]:
                    if run_id:
                        self._tracked(partial(self.tracker.end_run, run_id, "KILLED", tags=killed))

    def _update_best(self, trials: list[Any]) -> None:
        complete = [r for r in map(record, trials) if r.value is not None and r.state == "COMPLETE"]
        if complete:
            best = max(complete, key=lambda r: r.value or 0.0)
            self.progress.best, self.progress.best_trial = best.value, best.number


def trial_verdict(verdicts: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """A trial's verdict from its seeds': the highest-priority failure any seed showed (a config
    is unsafe if one seed fails), with the earliest onset of that failure; else healthy."""
    failing = [v for v in verdicts.values() if v["verdict"] != "healthy"]
    if not failing:
        return {"verdict": "healthy", "onset_step": None, "failed_seeds": 0}
    worst = min(failing, key=lambda v: rank(v["verdict"]))
    onsets = [v["onset_step"] for v in failing if v["verdict"] == worst["verdict"] and v["onset_step"] is not None]
    return {"verdict": worst["verdict"], "onset_step": min(onsets) if onsets else None, "failed_seeds": len(failing)}


def _where(active: ActiveTrial, seed: int) -> dict[str, str]:
    """The tags naming the worker and the machine a seed ran on (its last start)."""
    started = active.started.get(seed)
    return {keys.WORKER: started.worker if started else "", keys.NODE: started.node if started else ""}


def _unreferenced(verdict: dict[str, Any], trial_verdict: str) -> bool:
    """A seed's verdict is the trial's, and rests on a certain finding that a reference return could
    have made a warning (a critic off its returns beside returns that rose; stuck_value_loss)."""
    return verdict.get("verdict") == trial_verdict and any(
        f.get("kind") == trial_verdict and f.get("certain") and (f.get("evidence") or {}).get(keys.UNREFERENCED_RISE)
        for f in verdict.get("findings", [])
    )


def _verdict_tags(verdict: dict[str, Any]) -> dict[str, str]:
    onset = verdict.get("onset_step")
    return {keys.STABILITY_VERDICT: verdict["verdict"], keys.STABILITY_ONSET: "" if onset is None else str(onset)}


def _jsonable(params: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v if isinstance(v, (int, float, str, bool, type(None), list, dict)) else str(v) for k, v in params.items()
    }


def _patch_param(knob: str, value: Any) -> tuple[str, Any, Any]:
    """How a patched knob outside the sweep's space is recorded among a repair trial's params:
    ``(name, value, distribution)``. Optuna refuses a param whose distribution differs from the
    one the study recorded under its name, and a categorical's choices may never change, so a
    one-value categorical per knob (``patch.learning_rate: [0.0333]``) breaks the second repair
    that patches the same knob to another value. A number is a one-point float range under
    ``patch.KNOB`` (any two are compatible); anything else is a flag named by its value
    (``patch.log_std_bounds=[-5, 2]: True``), the same distribution wherever it recurs."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return f"patch.{knob}", float(value), FloatDistribution(float(value), float(value))
    return f"patch.{knob}={json.dumps(value, sort_keys=True)}", True, CategoricalDistribution([True])
