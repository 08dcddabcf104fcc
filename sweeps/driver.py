"""The driver: asks Optuna for configs, hands seed jobs to a backend, writes MLflow and Optuna.

It is the only process that opens either store, which is what lets parallel and resumed
sweeps lose nothing. Every trial ends as ``complete`` (told its objective) or ``crashed``
(told FAIL, with the exception recorded on the trial and on the failing seed's run).
"""
from __future__ import annotations

import copy
import json
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from sweeps import space as sp
from sweeps import study as st
from sweeps.backends import Backend, Event
from sweeps.spec import ENV_PREFIX, PRESET, SweepSpec
from sweeps.tracking import MlflowTracker
from sweeps.trial import TrialConfig

_AGGREGATE: dict[str, Callable[[list[float]], float]] = {
    "mean": statistics.fmean, "median": statistics.median, "min": min}


@dataclass
class ActiveTrial:
    number: int
    optuna_trial: Any
    params: dict[str, Any]
    seeds: list[int]
    parent_run: str = ""
    logged: dict[str, Any] = field(default_factory=dict)  # every hyperparameter, fixed and sampled
    workers: dict[int, str] = field(default_factory=dict)
    child_runs: dict[int, str] = field(default_factory=dict)
    returns: dict[int, float] = field(default_factory=dict)
    errors: dict[int, dict[str, str]] = field(default_factory=dict)
    verdicts: dict[int, dict[str, Any]] = field(default_factory=dict)  # seed -> Verdict.to_dict()
    unstable: dict[int, str] = field(default_factory=dict)             # seed -> class that ended it
    skipped: set[int] = field(default_factory=set)                     # never run: the trial was doomed

    @property
    def finished(self) -> bool:
        return len(self.returns) + len(self.errors) + len(self.unstable) + len(self.skipped) == len(self.seeds)


@dataclass
class Progress:
    """What the live display shows; updated by the driver, read by :mod:`sweeps.progress`."""

    target: int
    done: int = 0          # trials counted towards the target, this run and before
    failed: int = 0
    running: int = 0
    jobs_done: int = 0
    jobs_total: int = 0
    best: float | None = None
    best_trial: int | None = None
    started: float = field(default_factory=time.monotonic)
    requeued: list[int] = field(default_factory=list)
    retried: int = 0       # jobs run again after their worker died
    verdicts: dict[str, int] = field(default_factory=dict)  # trial verdict -> trials

    def eta(self) -> float | None:
        if not self.jobs_done:
            return None
        rate = (time.monotonic() - self.started) / self.jobs_done
        return rate * max(self.jobs_total - self.jobs_done, 0)


class Driver:
    def __init__(self, spec: SweepSpec, backend: Backend, tracker: MlflowTracker, study: Any,
                 on_change: Callable[[Progress], None] | None = None) -> None:
        self.spec, self.backend, self.tracker, self.study = spec, backend, tracker, study
        self.dims = spec.dims
        self.distributions = sp.to_optuna(self.dims)
        self.on_change = on_change or (lambda progress: None)
        self.active: dict[int, ActiveTrial] = {}
        self.jobs: deque[TrialConfig] = deque()
        self.in_flight: set[tuple[int, int]] = set()
        self._mlflow: deque[Callable[[], None]] = deque()  # MLflow writes, done after submitting work
        self.progress = Progress(target=spec.n_trials)
        self._stability = stability_settings(spec)
        self.attempts: dict[tuple[int, int], list[str]] = {}  # job -> why its earlier attempts failed
        self.logged_step: dict[tuple[int, int], int] = {}     # job -> last step sent to MLflow
        self.retry_floor: dict[tuple[int, int], int] = {}     # retried job -> steps up to here are logged

    # --- the loop -------------------------------------------------------------------------
    # Each turn: submit work (Optuna only), then do the MLflow writes that have piled up, then
    # wait for events. A worker that finishes is handed its next job before the driver spends
    # time in MLflow, so workers do not sit idle between trials.
    def run(self) -> Progress:
        p = self.progress
        p.requeued = st.requeue_interrupted(self.study)
        outcomes = st.outcomes(self.study)
        self._mlflow.append(lambda: self.tracker.reconcile(outcomes))
        previous = st.counted(self.study)
        p.done = len(previous)
        p.failed = sum(t.state.name == "FAIL" for t in previous)
        for t in previous:
            verdict = t.user_attrs.get(st.VERDICT)
            if verdict:
                p.verdicts[verdict] = p.verdicts.get(verdict, 0) + 1
        self._update_best(previous)
        p.jobs_total = max(p.target - p.done, 0) * len(self.spec.seed_list)
        try:
            while self._fill() or self.active:
                self._write_mlflow()
                for event in self.backend.poll(timeout=0.25):
                    self._handle(event)
                self.tracker.flush_if_due()
                self.on_change(p)
            self._write_mlflow()
        except BaseException:
            self._abandon()
            raise
        finally:
            self.tracker.flush()
        p.running = len(self.active)
        self.on_change(p)
        return p

    def _fill(self) -> bool:
        """Submit jobs while slots are free; open a new trial only when one is needed now."""
        while len(self.in_flight) < self.backend.capacity:
            if not self.jobs:
                if self.progress.done + len(self.active) >= self.progress.target:
                    break
                self._open_trial()
            config = self.jobs.popleft()
            self.backend.submit(config)
            self.in_flight.add(config.key)
        self.progress.running = len(self.active)
        return bool(self.jobs) or bool(self.in_flight)

    def _write_mlflow(self) -> None:
        while self._mlflow:
            self._mlflow.popleft()()

    def _open_trial(self) -> None:
        trial = self.study.ask(self.distributions)
        params = sp.decode(self.dims, trial.params)
        trial.set_user_attr("rlsweep.params", _jsonable(params))
        active = ActiveTrial(trial.number, trial, params, self.spec.seed_list)
        self.active[trial.number] = active
        active.logged, configs = trial_configs(self.spec, trial.number, params, active.seeds, self._stability)
        self.jobs.extend(configs)
        self._mlflow.append(lambda: self._start_runs(active))

    def _start_runs(self, active: ActiveTrial) -> None:
        resolved = self.spec.resolved() | {"trial": active.number, "params": _jsonable(active.params)}
        active.parent_run = self.tracker.start_trial(active.number, active.logged, resolved)
        for seed in active.seeds:
            active.child_runs[seed] = self.tracker.start_seed(active.number, seed, active.parent_run, active.logged)

    # --- events ---------------------------------------------------------------------------
    def _handle(self, event: Event) -> None:
        trial_number, seed = event.key
        active = self.active.get(trial_number)
        if active is None:
            return
        if event.kind == "metrics":
            step, values = event.payload
            if step > self.retry_floor.get(event.key, -1):  # a retry repeats steps its first attempt logged
                self.logged_step[event.key] = max(step, self.logged_step.get(event.key, -1))
                self.tracker.log_metrics(active.child_runs[seed], step, values)
            return
        if event.kind == "started":
            active.workers[seed] = str(event.payload.get("worker"))
            return
        self.in_flight.discard(event.key)
        run_id = active.child_runs[seed]
        if event.kind == "failed" and self._retry(active, event):
            return
        self.progress.jobs_done += 1
        if event.kind == "finished":
            self._seed_finished(active, seed, run_id, event.payload)
        elif event.kind == "cancelled":
            active.skipped.add(seed)
            self._mlflow.append(lambda: self.tracker.end_run(
                run_id, "KILLED", tags={"rlsweep.outcome": "skipped", "rlsweep.cancelled": event.payload["reason"]}
                | self._attempt_tags(event.key)))
        elif event.kind == "failed":
            error = event.payload
            active.errors[seed] = error
            self._mlflow.append(lambda: self.tracker.end_run(
                run_id, "FAILED", tags={"rlsweep.outcome": "crashed", "rlsweep.worker": active.workers.get(seed, ""),
                                        "rlsweep.error": f"{error['type']}: {error['message']}"}
                | self._attempt_tags(event.key),
                texts={"error.txt": error.get("traceback") or error["message"]}))
        if active.finished:
            self._close_trial(active)

    def _retry(self, active: ActiveTrial, event: Event) -> bool:
        """A job whose worker died (killed, out of memory, node lost) runs again, up to
        ``backend.max_failures`` times; an exception raised by the trial itself is not retried:
        the same config and seed would raise it again."""
        tries = self.attempts.setdefault(event.key, [])
        if event.payload.get("type") != "WorkerDied" or len(tries) >= self.spec.backend.max_failures:
            return False
        tries.append(event.payload["message"])
        self.retry_floor[event.key] = self.logged_step.get(event.key, -1)
        _, (config,) = trial_configs(self.spec, active.number, active.params, [event.key[1]], self._stability)
        self.jobs.appendleft(config)
        self.progress.retried += 1
        return True

    def _attempt_tags(self, key: tuple[int, int]) -> dict[str, str]:
        tries = self.attempts.get(key)
        return {"rlsweep.attempts": str(len(tries) + 1), "rlsweep.retried_after": " | ".join(tries)[:5000]} \
            if tries else {}

    def _seed_finished(self, active: ActiveTrial, seed: int, run_id: str, result: dict[str, Any]) -> None:
        verdict = result.get("verdict") or {"verdict": "healthy", "onset_step": None, "findings": []}
        active.verdicts[seed] = verdict
        tags = {"rlsweep.worker": active.workers.get(seed, ""), **_verdict_tags(verdict),
                "stability.context": json.dumps(result.get("context") or {}, default=str),
                **{f"rlsweep.{k}": str(v) for k, v in (result.get("extra") or {}).items()},
                **self._attempt_tags((active.number, seed))}
        files = {"stability/signals.png": result["plot_png"]} if result.get("plot_png") else None
        texts = {"stability/verdict.json": json.dumps(verdict, indent=2)}
        metrics = {"time/train_seconds": result["train_seconds"], "time/eval_seconds": result["eval_seconds"]}
        if result.get("stopped_by"):
            # the seed's verdict names the failure; stopped_by only says which stop_on class ended it
            active.unstable[seed] = verdict["verdict"] if verdict.get("verdict", "healthy") != "healthy" \
                else result["stopped_by"]
            tags |= {"rlsweep.outcome": "unstable", "stability.stopped_by": result["stopped_by"]}
            crash = next((f["evidence"]["error"] for f in verdict.get("findings", []) if "error" in f["evidence"]), None)
            if crash:  # the crash that ended it (torch's "Expected parameter ..."): diagnose reads it back
                tags["rlsweep.error"] = crash
            self._skip_rest(active)
            self._mlflow.append(lambda: self.tracker.end_run(run_id, "FAILED", metrics=metrics, tags=tags,
                                                             texts=texts, files=files))
            return
        active.returns[seed] = result["mean_return"]
        metrics |= {"eval/mean_return": result["mean_return"], "eval/std_return": result["std_return"]}
        tags["rlsweep.outcome"] = "complete"
        self._mlflow.append(lambda: self.tracker.end_run(run_id, "FINISHED", metrics=metrics, tags=tags,
                                                         texts=texts, files=files))

    def _skip_rest(self, active: ActiveTrial) -> None:
        """A seed proved the trial doomed (``stability.stop_on``): its queued seeds never run, and
        with ``stability.stop_siblings`` those already running are stopped (Ray: by a Tune stopper;
        local: by their worker at the next update)."""
        running = [k for k in self.in_flight if k[0] == active.number]
        if running and self.spec.stability.stop_siblings:
            seeds = ", ".join(str(s) for s in active.unstable)
            self.backend.cancel(running, f"seed {seeds} of this trial was found {next(iter(active.unstable.values()))}")
        queued = [c for c in self.jobs if c.trial == active.number]
        for config in queued:
            self.jobs.remove(config)
            active.skipped.add(config.seed)
            self.progress.jobs_total -= 1
            self._mlflow.append(lambda seed=config.seed: self.tracker.end_run(
                active.child_runs[seed], "KILLED", tags={"rlsweep.outcome": "skipped"}))

    def _close_trial(self, active: ActiveTrial) -> None:
        from optuna.trial import TrialState

        del self.active[active.number]
        trial, p = active.optuna_trial, self.progress
        trial.set_user_attr("rlsweep.returns", {str(s): r for s, r in active.returns.items()})
        verdict = trial_verdict(active.verdicts)
        if active.verdicts:
            trial.set_user_attr(st.VERDICT, verdict["verdict"])
            trial.set_user_attr("rlsweep.verdicts", {str(s): v["verdict"] for s, v in active.verdicts.items()})
            p.verdicts[verdict["verdict"]] = p.verdicts.get(verdict["verdict"], 0) + 1
        tags = _verdict_tags(verdict) if active.verdicts else {}
        texts = {"stability/verdict.json": json.dumps(verdict | {"seeds": {str(s): v for s, v in
                                                                           active.verdicts.items()}}, indent=2)}
        if active.errors:
            seed, error = next(iter(active.errors.items()))
            message = f"seed {seed}: {error['type']}: {error['message']}"
            trial.set_user_attr(st.OUTCOME, "crashed")
            trial.set_user_attr("rlsweep.error", message[:1000])
            self.study.tell(trial, state=TrialState.FAIL)
            self._mlflow.append(lambda: self.tracker.end_run(
                active.parent_run, "FAILED", tags={"rlsweep.outcome": "crashed", "rlsweep.error": message} | tags,
                texts=texts))
            p.failed += 1
        elif active.unstable:
            # Ended by its verdict: pruned in Optuna (samplers learn the region is bad), never scored.
            trial.set_user_attr(st.OUTCOME, "unstable")
            self.study.tell(trial, state=TrialState.PRUNED)
            self._mlflow.append(lambda: self.tracker.end_run(
                active.parent_run, "FAILED", tags={"rlsweep.outcome": "unstable"} | tags, texts=texts))
            p.failed += 1
        else:
            value = _AGGREGATE[self.spec.objective.aggregate](list(active.returns.values()))
            trial.set_user_attr(st.OUTCOME, "complete")
            self.study.tell(trial, value)
            metrics = {"objective": value} | {f"eval/return_seed_{s}": r for s, r in active.returns.items()}
            self._mlflow.append(lambda: self.tracker.end_run(active.parent_run, "FINISHED", metrics=metrics,
                                                             tags={"rlsweep.outcome": "complete"} | tags,
                                                             texts=texts))
            if p.best is None or value > p.best:
                p.best, p.best_trial = value, active.number
        p.done += 1

    def _abandon(self) -> None:
        """On Ctrl-C or a driver error: stop workers and close open runs as KILLED.

        The Optuna trials stay RUNNING, so the next run of the same command marks them
        interrupted and queues their configs again.
        """
        try:
            self.backend.close()
        finally:
            self._write_mlflow()
            self.tracker.flush()
            for active in self.active.values():
                for run_id in [*active.child_runs.values(), active.parent_run]:
                    if run_id:
                        self.tracker.end_run(run_id, "KILLED", tags={"rlsweep.outcome": "interrupted"})

    def _update_best(self, trials: list[Any]) -> None:
        complete = [t for t in trials if t.value is not None and t.state.name == "COMPLETE"]
        if complete:
            best = max(complete, key=lambda t: t.value)
            self.progress.best, self.progress.best_trial = best.value, best.number


def stability_settings(spec: SweepSpec) -> dict[str, Any]:
    """What a worker's StabilityCallback needs: plain data, thresholds resolved."""
    return {"enabled": spec.stability.enabled, "stop_on": list(spec.stability.stop_on),
            "thresholds": spec.stability_thresholds(), "override_keys": spec.stability.override_keys}


def trial_configs(spec: SweepSpec, number: int, params: dict[str, Any], seeds: list[int],
                  stability: dict[str, Any]) -> tuple[dict[str, Any], list[TrialConfig]]:
    """One job per seed for a configuration: the spec's hyperparameters and env with ``params``
    (sampled values, by dotted name) set. Also returns every hyperparameter, flattened, for logging."""
    hyperparams = copy.deepcopy(spec.hyperparams)
    env = spec.env.model_dump()
    for name, value in params.items():
        if name.startswith(ENV_PREFIX):
            sp.set_nested(env, name[len("env."):], value)
        elif name == PRESET:  # a whole set of hyperparameters, applied over the fixed ones
            for key, item in sp.flatten(value).items():
                sp.set_nested(hyperparams, key, item)
        else:
            sp.set_nested(hyperparams, name, value)
    logged = sp.flatten(hyperparams) | {k: v for k, v in params.items() if k.startswith(ENV_PREFIX)}
    configs = [TrialConfig(sweep=spec.name, trial=number, seed=seed, algo=spec.algo, policy=spec.policy, env=env,
                           hyperparams=hyperparams, total_timesteps=spec.total_timesteps,
                           eval_episodes=spec.objective.eval_episodes, eval_seed=spec.objective.eval_seed_offset + seed,
                           deterministic=spec.objective.deterministic, stability=stability,
                           device=spec.backend.device) for seed in seeds]
    return logged, configs


def trial_verdict(verdicts: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """A trial's verdict from its seeds': the highest-priority failure any seed showed (a config
    is unsafe if one seed fails), with the earliest onset of that failure; else healthy."""
    from stability.verdict import PRIORITY

    failing = [v for v in verdicts.values() if v["verdict"] != "healthy"]
    if not failing:
        return {"verdict": "healthy", "onset_step": None, "failed_seeds": 0}
    worst = min(failing, key=lambda v: PRIORITY.index(v["verdict"]) if v["verdict"] in PRIORITY else 99)
    onsets = [v["onset_step"] for v in failing if v["verdict"] == worst["verdict"] and v["onset_step"] is not None]
    return {"verdict": worst["verdict"], "onset_step": min(onsets) if onsets else None, "failed_seeds": len(failing)}


def _verdict_tags(verdict: dict[str, Any]) -> dict[str, str]:
    onset = verdict.get("onset_step")
    return {"stability.verdict": verdict["verdict"], "stability.onset_step": "" if onset is None else str(onset)}


def _jsonable(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v if isinstance(v, (int, float, str, bool, type(None), list, dict)) else str(v)
            for k, v in params.items()}
