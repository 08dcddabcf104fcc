"""Ray backend: seed jobs become Ray Tune trials; the driver stays the only writer of both stores.

Tune runs in a thread of the driver process and asks a :class:`_Feed` searcher for work: the
driver's submitted jobs, one Tune trial per (trial, seed). Tune does what it is good at (placing
trials on the cluster's CPUs and GPU shares, reusing actors so torch and SB3 are imported once
per actor, stopping trials); everything Optuna or MLflow must learn comes back to the driver as
:class:`Event` s through a :class:`_Relay` callback, exactly as from the local backend.

Workers report through ``tune.report``, which waits for the driver's Tune loop to take each
report; metric dumps are therefore sent in batches, at most one report per ``REPORT_EVERY``
seconds, so training never waits on the driver.

Retries of jobs whose worker died are the driver's (``backend.max_failures``), the same on every
backend; Tune's own ``max_failures`` stays 0 so no trial runs twice behind the driver's back.
"""

from __future__ import annotations

import base64
import logging
import math
import os
import queue
import sys
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import ray
from ray import tune
from ray.tune.search import Searcher

from sweeps.backends._base import (
    JOB,
    WORKER_DIED,
    Backend,
    Cancelled,
    Event,
    Failure,
    Payload,
    failure,
    from_wire,
    load_job,
)
from sweeps.backends._reaper import Reaper
from sweeps.errors import UsageError
from sweeps.trial import TrialConfig

REPORT_EVERY = 1.0  # seconds between a worker's metric reports to Tune
NODES_EVERY = 5.0  # seconds between looks at the cluster's nodes (joined or left: the capacity follows)


# --- driver side: state shared between the driver thread and Tune's thread ------------------------
@dataclass
class _Channel:
    jobs: queue.Queue[TrialConfig] = field(default_factory=queue.Queue)
    events: queue.Queue[Event] = field(default_factory=queue.Queue)
    closing: threading.Event = field(default_factory=threading.Event)
    tune_ids: dict[str, tuple[int, int]] = field(default_factory=dict)  # Tune trial id -> job key
    cancelled: dict[tuple[int, int], str] = field(default_factory=dict)  # job key -> reason
    ended: set[tuple[int, int]] = field(default_factory=set)
    job: str = JOB  # what a worker runs for each job


# Tune pickles its searcher, callbacks and stopper into the experiment state; they hold only the
# id of their channel, and find it here (they always run in the driver process).
_CHANNELS: dict[str, _Channel] = {}


class Feed(Searcher):
    """Hands Tune the driver's submitted jobs; ``None`` means "nothing yet, ask again"."""

    def __init__(self, channel_id: str) -> None:
        super().__init__(metric=None, mode=None)
        self.channel_id = channel_id

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        channel = _CHANNELS[self.channel_id]
        if channel.closing.is_set():
            return Searcher.FINISHED
        while True:
            try:
                job = channel.jobs.get_nowait()
            except queue.Empty:
                return None
            if job.key in channel.cancelled:  # cancelled before it started
                _end(channel, job.key, Cancelled(channel.cancelled[job.key]))
                continue
            channel.tune_ids[trial_id] = job.key
            channel.ended.discard(job.key)  # a retry of a job whose worker died starts afresh
            return {"job": job, "entry": channel.job}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        pass


class Relay(tune.Callback):
    """Turns what Tune hears from a trial into driver events."""

    def __init__(self, channel_id: str) -> None:
        self.channel_id = channel_id

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        channel = _CHANNELS[self.channel_id]
        key = channel.tune_ids.get(trial.trial_id)
        if key is None:
            return
        for kind, payload in result.get("rlsweep", ()):
            event = from_wire(kind, key, decode_result(payload) if kind == "finished" else payload)
            if kind in ("finished", "failed"):
                _end(channel, key, event.payload)
            elif key not in channel.ended:
                channel.events.put(event)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        channel = _CHANNELS[self.channel_id]
        key = channel.tune_ids.get(trial.trial_id)
        text = _error_text(trial)
        last = text.strip().splitlines()[-1][:500] if text.strip() else "no error text"
        message = f"the Ray worker running this seed failed: {last}"
        _end(channel, key, Failure(WORKER_DIED, message, text))

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        channel = _CHANNELS[self.channel_id]
        key = channel.tune_ids.get(trial.trial_id)
        # ended without a result of ours: Tune stopped it (a cancelled job, or the sweep closing)
        _end(channel, key, Cancelled(channel.cancelled.get(key, "stopped by Tune")))


class VerdictStopper(tune.Stopper):
    """Tune-side stopping: a job the driver cancelled (its trial was already proved doomed by a
    sibling seed's verdict) is stopped at its next report, freeing its CPU and GPU share."""

    def __init__(self, channel_id: str) -> None:
        self.channel_id = channel_id

    def __call__(self, trial_id: str, result: dict) -> bool:
        channel = _CHANNELS[self.channel_id]
        return channel.tune_ids.get(trial_id) in channel.cancelled

    def stop_all(self) -> bool:
        return _CHANNELS[self.channel_id].closing.is_set()


def _end(channel: _Channel, key: tuple[int, int] | None, payload: Payload) -> None:
    """The one terminal event of a job; Tune may tell of its end twice (result, then complete)."""
    if key is None or key in channel.ended:
        return
    channel.ended.add(key)
    channel.events.put(Event(key, payload))


def _error_text(trial: Any) -> str:
    try:
        path = trial.error_file
        if path and Path(path).is_file():
            return Path(path).read_text(errors="replace")[-20000:]
    except Exception:  # noqa: S110 - the error text is a courtesy; its absence must not stop the sweep
        pass
    return str(getattr(trial, "error_msg", "") or "")


# --- worker side --------------------------------------------------------------------------------
class _TuneReporter:
    """Collects a job's events and reports them to Tune in batches (see REPORT_EVERY).

    When Tune stops the job (a cancelled seed, the sweep closing), the ``tune.report`` it is
    blocked in raises ``SystemExit`` to end the job's thread. Every later report is dropped: the
    trial's clean-up (the last metric flush, in a ``finally``) would otherwise report again and
    wait for ever for a Tune loop that no longer reads this trial, and the actor, kept for the
    next job, would never be free."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, Any]] = []
        self.last = time.monotonic()
        self.stopped = False

    def send(self, kind: str, payload: Any, now: bool = False) -> None:
        if self.stopped:
            return
        self.pending.append((kind, payload))
        if now or time.monotonic() - self.last >= REPORT_EVERY:
            batch, self.pending = self.pending, []
            self.last = time.monotonic()
            try:
                tune.report({"rlsweep": batch})
            except SystemExit:
                self.stopped = True
                raise

    def metrics(self, step: int, values: dict[str, float]) -> None:
        self.send("metrics", (int(step), values))


def run_job(tune_config: dict[str, Any]) -> None:
    """The Tune trainable: one seed job, on whatever CPU and GPU share Tune placed it."""
    from sweeps import trial

    run = load_job(tune_config.get("entry", JOB))
    job: TrialConfig = tune_config["job"]
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1.0)
    gpu_ids = ray.get_gpu_ids()
    job = replace(
        job, device=trial.resolve_device(job.device, gpu_assigned=bool(gpu_ids)), torch_threads=max(1, int(cpus))
    )
    reporter = _TuneReporter()
    reporter.send(
        "started",
        {
            "worker": f"ray:{ray.util.get_node_ip_address()}:{os.getpid()}",
            "node": f"{ray.util.get_node_ip_address()}/{ray.get_runtime_context().get_node_id()[:12]}",
            "pid": os.getpid(),
            "device": job.device,
            "gpu_ids": [str(g) for g in gpu_ids],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        },
        now=True,
    )
    try:
        result = run(job, reporter).to_dict()
    except (Exception, KeyboardInterrupt) as exc:  # a trial may raise anything; the sweep goes on
        reporter.send("failed", failure(exc, traceback.format_exc()), now=True)
        return
    if result.get("plot_png") is not None:
        result["plot_png"] = base64.b64encode(result["plot_png"]).decode()
        result["plot_png_b64"] = True
    reporter.send("finished", result, now=True)


def decode_result(payload: dict[str, Any]) -> dict[str, Any]:
    if payload.get("plot_png_b64"):
        payload = dict(payload, plot_png=base64.b64decode(payload["plot_png"]))
        payload.pop("plot_png_b64")
    return payload


# --- the cluster's versions ----------------------------------------------------------------------
VERSIONED = ("rlsweep", "stable-baselines3")


def installed_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in VERSIONED:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


@ray.remote(num_cpus=0)
def _node_versions() -> dict[str, str]:
    return installed_versions() | {"node": ray.util.get_node_ip_address()}


def version_mismatches(mine: dict[str, str], nodes: list[dict[str, str]]) -> list[str]:
    """One line per node whose versions differ from ``mine`` (the driver's)."""
    out = []
    for node in nodes:
        differ = [f"{k} {node.get(k)} (driver: {mine[k]})" for k in VERSIONED if node.get(k) != mine[k]]
        if differ:
            out.append(f"node {node.get('node', '?')} has {', '.join(differ)}")
    return out


# --- the backend ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class RaySettings:
    address: str | None = None  # None: start a local instance for this sweep
    cpu: float = 1.0  # per trial seed
    gpu: float = 0.0
    max_concurrent: int | None = None
    storage: Path | None = None  # Tune's experiment folder (results/NAME/ray)
    job: str = JOB  # what a worker runs (see sweeps.backends._base.JOB)


class RayBackend(Backend):
    name = "ray"

    def __init__(self, settings: RaySettings, limit: int | None = None) -> None:
        """``limit``: the most jobs at once, on top of what the cluster's resources allow."""
        self.settings = settings
        self._started_ray = False
        self._channel: _Channel | None = None
        self._thread: threading.Thread | None = None
        self._reaper: Reaper | None = None
        self._tracked = 0.0
        self._limit = limit
        self._nodes: set[str] = set()  # alive nodes counted in the capacity (their versions checked)
        self._asked: dict[Any, str] = {}  # a joining node's version check in flight -> its node id
        self._refreshed = time.monotonic()
        os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # the driver logs; Tune writes no CSV/JSON
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
        if not ray.is_initialized():  # else: use the connection this process already has
            self._init_ray()
        try:
            if settings.address is not None:  # a cluster's nodes were installed by others
                self._check_versions()
            self._nodes = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
            self.capacity = self._capacity(limit)
            self._start_tune()
        except BaseException:
            self.close()
            raise

    def _init_ray(self) -> None:
        s = self.settings
        quiet = dict(log_to_driver=False, logging_level=logging.ERROR, configure_logging=True)
        try:
            if s.address is None:
                # workers on this machine import what the driver can (entry points of the spec included)
                path = os.pathsep.join([os.getcwd(), *(p for p in sys.path if p and Path(p).is_dir())])
                self._reaper = Reaper()  # the instance's processes die with the driver, however it ends
                # "local": a new instance, never one that RAY_ADDRESS or a `ray start` on this machine names
                # (ray.init() would join that, and then refuse num_cpus)
                ray.init(
                    address="local",
                    num_cpus=os.cpu_count() or 1,
                    include_dashboard=False,
                    runtime_env={"env_vars": {"PYTHONPATH": path}},
                    **quiet,
                )
                self._reaper.track()
            else:  # a cluster's nodes need rlsweep (and the spec's entry points) installed
                ray.init(address=s.address, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            if self._reaper is not None:
                self._reaper.close()
                self._reaper = None
            where = "start a local Ray instance" if s.address is None else f"connect to Ray at '{s.address}'"
            raise UsageError(
                f"cannot {where}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}. "
                f"Check 'backend.address' (null starts a local instance; 'auto' joins the cluster "
                f"this machine belongs to; 'ray://HOST:10001' a remote one)."
            ) from None
        self._started_ray = True  # ours to shut down (a local instance) or disconnect from (a cluster)

    def _check_versions(self) -> None:
        """Refuse a cluster with a node whose rlsweep or stable-baselines3 differs from the driver's:
        its trials would run other code than the one the driver validated and records."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        alive = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        asks = [
            _node_versions.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
            for node in alive
        ]
        answers = []
        for ask in asks:
            try:
                answers.append(ray.get(ask, timeout=120))
            except ray.exceptions.RayError:  # the node left meanwhile: it runs nothing of ours
                continue
        problems = version_mismatches(installed_versions(), answers)
        if problems:
            raise UsageError(
                "the Ray cluster's nodes must run the driver's versions; "
                + "; ".join(problems)
                + ". Install the same versions on every node (see the README's 'Running on Ray')."
            )

    def _capacity(self, limit: int | None, refuse: bool = True) -> int:
        """How many jobs can run at once, from what each counted node offers. A request no node can
        ever meet is refused when the backend starts (``refuse``): Ray would leave such trials
        PENDING forever."""
        s = self.settings
        offers = [
            (n["Resources"].get("CPU", 0.0), n["Resources"].get("GPU", 0.0))
            for n in ray.nodes()
            if n.get("Alive") and n["NodeID"] in self._nodes
        ]
        slots = 0
        for cpu, gpu in offers:
            fit = math.floor(cpu / s.cpu + 1e-9)
            if s.gpu > 0:
                fit = min(fit, math.floor(gpu / s.gpu + 1e-9))
            slots += fit
        if slots == 0 and not refuse:
            return 0
        if slots == 0:
            have = "; ".join(f"CPU {c:g}, GPU {g:g}" for c, g in offers) or "no alive nodes"
            raise UsageError(
                f"backend.resources_per_trial asks for cpu {s.cpu:g} and gpu {s.gpu:g} per trial, but "
                f"no node of the Ray cluster has that much ({have}). Ray would leave every trial "
                f"waiting forever. Lower 'backend.resources_per_trial' or add a node that has it."
            )
        for bound in (s.max_concurrent, limit):
            if bound:
                slots = min(slots, bound)
        return slots

    def _start_tune(self) -> None:
        self._id = uuid.uuid4().hex
        self._channel = _CHANNELS[self._id] = _Channel(job=self.settings.job)
        s = self.settings
        resources = {"cpu": s.cpu} | ({"gpu": s.gpu} if s.gpu else {})
        storage = (s.storage or Path("results") / "ray").resolve()
        storage.mkdir(parents=True, exist_ok=True)
        tuner = tune.Tuner(
            tune.with_resources(run_job, resources),
            tune_config=tune.TuneConfig(
                search_alg=Feed(self._id),
                num_samples=-1,
                # on a local instance an actor runs job after job, so torch and SB3 are imported
                # once per actor, not per job; a stopped job's thread ends (see _TuneReporter) so
                # its actor is free. On a cluster (an address) each job gets a fresh actor: Tune
                # hands a finished job's cached actor to the next job before a node that joined
                # has started one, so a joining node could sit idle while every job ran on the
                # node that finished first (seen in the cluster test, 1 run in 3 on 2 cores)
                reuse_actors=s.address is None,
                # the driver submits no more than ``capacity`` jobs, which follows the nodes that
                # come and go; Tune is held only by the fixed bounds
                max_concurrent_trials=min((b for b in (s.max_concurrent, self._limit) if b), default=None),
                trial_name_creator=_trial_name,
                trial_dirname_creator=_trial_name,
            ),
            run_config=tune.RunConfig(
                storage_path=str(storage),
                name=f"tune-{time.strftime('%Y%m%d-%H%M%S')}",
                callbacks=[Relay(self._id)],
                stop=VerdictStopper(self._id),
                verbose=0,
                failure_config=tune.FailureConfig(max_failures=0),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            ),
        )
        self._tune_error: BaseException | None = None

        def fit() -> None:
            try:
                tuner.fit()
            except BaseException as exc:  # handed to the driver thread by poll()
                self._tune_error = exc

        self._thread = threading.Thread(target=fit, name="rlsweep-tune", daemon=True)
        self._thread.start()

    # --- the contract ---------------------------------------------------------------------------
    def submit(self, config: TrialConfig) -> None:
        self._channel.jobs.put(config)

    def cancel(self, keys: list[tuple[int, int]], reason: str) -> None:
        for key in keys:
            self._channel.cancelled[key] = reason

    def poll(self, timeout: float) -> list[Event]:
        if self._reaper is not None and time.monotonic() - self._tracked > 5:
            self._reaper.track()  # workers Ray started since
            self._tracked = time.monotonic()
        if time.monotonic() - self._refreshed > NODES_EVERY:
            self._refreshed = time.monotonic()
            self._follow_nodes()
        events: list[Event] = []
        try:
            events.append(self._channel.events.get(timeout=timeout))
            while True:
                events.append(self._channel.events.get_nowait())
        except queue.Empty:
            pass
        if (
            not events
            and self._thread is not None
            and not self._thread.is_alive()
            and not self._channel.closing.is_set()
        ):
            raise RuntimeError(f"Ray Tune stopped unexpectedly: {self._tune_error!r}")
        return events

    def _follow_nodes(self) -> None:
        """Nodes that joined (once their versions match the driver's) and nodes that left change
        how many jobs run at once. A joining node with other versions stops the sweep, as it
        would have been refused at the start; the finished trials are kept."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        for node in alive - self._nodes - set(self._asked.values()):
            if self.settings.address is None:  # a local instance's nodes run this installation
                self._nodes.add(node)
                continue
            strategy = NodeAffinitySchedulingStrategy(node, soft=False)
            self._asked[_node_versions.options(scheduling_strategy=strategy).remote()] = node
        if self._asked:
            ready, _ = ray.wait(list(self._asked), num_returns=len(self._asked), timeout=0)
            for ref in ready:
                node = self._asked.pop(ref)
                try:
                    answer = ray.get(ref)
                except ray.exceptions.RayError:  # it left again
                    continue
                if problems := version_mismatches(installed_versions(), [answer]):
                    raise UsageError(
                        f"a node joined the Ray cluster with other versions than the driver's: {problems[0]}. "
                        "Install the same versions on every node; run the same command again to continue "
                        "the sweep (its finished trials are kept)."
                    )
                self._nodes.add(node)
        self._nodes &= alive
        self.capacity = max(self._capacity(self._limit, refuse=False), 1)

    def close(self) -> None:
        """Idempotent, and safe after a constructor that failed part way (e.g. between creating
        the channel and starting Tune's thread): whatever was started is stopped, Ray included."""
        try:
            if self._channel is not None:
                self._channel.closing.set()
                if self._thread is not None:
                    self._thread.join(timeout=60)
                _CHANNELS.pop(self._id, None)
                self._channel = None
        finally:
            if self._started_ray:
                self._started_ray = False
                ray.shutdown()
            if self._reaper is not None:
                self._reaper, reaper = None, self._reaper
                reaper.close()


def _trial_name(trial: Any) -> str:
    job = trial.config.get("job")
    return f"trial{job.trial}_seed{job.seed}_{trial.trial_id}" if job is not None else trial.trial_id
