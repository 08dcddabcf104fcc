"""MLflow tracking, written by the driver alone: a parent run per trial, a child run per seed.

Metrics are buffered per run. On a SQLite store whose schema this module knows
(``MLFLOW_SCHEMA``), the points of every run that is due are written together, as plain SQL on
MLflow's own metric tables, in one transaction (:class:`_StoreRows`: about 6 us of CPU a point,
against about 0.1 ms through MLflow's store, whose ``log_batch`` reads and locks each run's
latest values and adds every point through the ORM); anywhere else (a tracking server, another
schema) each run's points go with ``log_batch`` (about 15x faster than one call per point). On
such a store a run's creation with its tags and params, its later tags and its end are plain SQL
too, one transaction each: about 2 ms of CPU per seed for all of them, against about 28 ms through
MLflow's client (each call reads the run back through the ORM and commits on its own), which at a
few hundred concurrent short seeds was most of the driver's core. With a SQLite or file store,
artifacts go under ``results/`` rather than ``./mlruns``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sqlite3
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from stability import keys
from sweeps.errors import UsageError
from sweeps.spec import alembic_revision, sqlite_file
from sweeps.study_storage import on_local_filesystem, write_ahead

_BATCH = 500  # per log_batch call: measured cheapest per point with MLflow 3.17 + SQLite (0.12 ms)
_FLUSH_SECONDS = 10.0  # a run's buffered points are sent once the oldest has waited this long...
# ...or this long, where they are written as plain SQL: one transaction for every run that is due
# costs about what one run's does, so a point is in the store within about a second.
_FLUSH_SECONDS_SQL = 1.0
# The alembic revision of MLflow's SQL schema the plain-SQL metric writes are made for (MLflow
# 3.17); a store with another one gets MLflow's own writes.
MLFLOW_SCHEMA = "dc11669786a5"
# The most time one turn of the driver's loop spends sending due points (at least one run is sent):
# sending every run's buffer at once stalled the loop for (runs x one call) at a time, which with
# 64 fast seeds on SQLite held events back for seconds (tests/bench/driver_scale.py).
_FLUSH_BUDGET = 0.25
# Back-pressure: the most metric points held for MLflow at once (about 200 bytes each). Past it,
# every held curve keeps every other point (its last one always), and the run is tagged with how
# coarse its curves became, instead of the held points growing without bound when seeds log
# faster than the store writes. (At 256 fast seeds the backlog is in events waiting for the loop,
# not here: see tests/bench/driver_scale.py --bounds on,off.) A short outage of the tracking server, or a
# sweep of tens of seeds, never comes near it; the detectors in the workers see every update.
_MAX_HELD = 50_000

# A run's held metric points: its logger's dumps, (timestamp ms, step, {key: value}) each, oldest
# first. Held as the dumps came (one append per dump, not one per point); points are made only as
# they are written.
Dumps = list[tuple[int, int, dict[str, float]]]


# MLflow 3's UI opens an experiment in its GenAI (traces) view unless told it holds training runs.
_KIND = {"mlflow.experimentKind": "custom_model_development"}


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def check_server(uri: str, timeout: float = 5.0) -> None:
    """Refuse (exit 2, in one line) a tracking server that does not answer, before anything runs:
    MLflow's own client would retry for minutes, then fail with a traceback."""
    import urllib.error
    import urllib.request

    if not is_server(uri):
        return
    try:
        url = f"{uri.rstrip('/')}/health"  # http(s) only (is_server above): no file: or custom schemes
        with urllib.request.urlopen(url, timeout=timeout) as answer:  # noqa: S310
            if answer.status == 200:
                return
            why = f"HTTP {answer.status}"
    except urllib.error.HTTPError as exc:
        why = f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        why = str(getattr(exc, "reason", exc))
    raise UsageError(
        f"tracking.mlflow_uri: no MLflow server answers at {uri} ({why}); start it (mlflow server ...) "
        "or fix the address"
    )


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the tracking server could not be reached (down, restarting, timing
    out), so the write may be tried again later, rather than that the write itself was wrong."""
    text = f"{type(exc).__name__}: {exc}"
    signs = (
        "Connection refused",
        "Max retries exceeded",
        "Connection aborted",
        "RemoteDisconnected",
        "Read timed out",
        "ConnectionError",
        "ConnectTimeout",
        "TEMPORARILY_UNAVAILABLE",
        "error code 502",
        "error code 503",
        "error code 504",
    )
    return any(sign in text for sign in signs)


def _local_store(uri: str) -> bool:
    return uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:6000]


def _tag_values(tags: dict[str, str] | None) -> dict[str, str]:
    return {k: v[:5000] for k, v in (tags or {}).items()}


# How the runs of a trial the study finished are closed, by its outcome: its trial run, and each
# seed run that has no return (one with a return is FINISHED). As the driver closes them live.
CLOSED_AS = {"complete": "FINISHED", "crashed": "FAILED", "unstable": "FAILED", "pruned": "KILLED"}


def closed_as(known: dict[str, Any], seed: int | None) -> tuple[str, str, dict[str, float]]:
    """(status, outcome, final metrics) of a run of a trial as the study says, for the trial run
    (``seed`` None) or one seed's. ``known``: the trial's entry in ``sweeps.study.outcomes``, or empty
    for a trial the study did not finish (its runs are KILLED as interrupted)."""
    outcome = known.get("outcome", "interrupted")
    if outcome not in keys.OUTCOMES:
        return "KILLED", outcome, {}
    if seed is None:
        return CLOSED_AS[outcome], outcome, {"objective": float(known["value"])} if outcome == "complete" else {}
    value = known.get("returns", {}).get(seed)
    if value is not None:
        return "FINISHED", "complete", {"eval/mean_return": float(value)}
    return CLOSED_AS[outcome], outcome, {}


class MlflowTracker:
    def __init__(self, uri: str, experiment: str, sweep: str, artifact_dir: Path) -> None:
        import logging

        from mlflow.tracking import MlflowClient

        logging.getLogger("mlflow").setLevel(logging.WARNING)  # no schema-migration chatter on first use
        logging.getLogger("alembic").setLevel(logging.WARNING)

        self.sweep = sweep
        self.server = is_server(uri)
        if self.server:  # fail fast and let the driver hold and retry writes, instead of MLflow's
            # client retrying each call for minutes while the driver waits
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
        self.client = MlflowClient(tracking_uri=uri)
        found = self.client.get_experiment_by_name(experiment)
        if found is None:
            location = artifact_dir.resolve().as_uri() if _local_store(uri) else None
            self.experiment_id = self.client.create_experiment(
                experiment, artifact_location=location, tags={keys.SWEEP: sweep, **_KIND}
            )
        else:
            self.experiment_id = found.experiment_id
            if found.lifecycle_stage == "deleted":  # deleted in the UI, then the sweep rerun: bring it back
                self.client.restore_experiment(found.experiment_id)
        self._buffers: dict[str, Dumps] = {}  # run -> its held dumps
        self._tried: set[str] = set()  # run keys whose creation was asked for
        self._since: dict[str, float] = {}  # run -> when its oldest buffered point came (oldest first)
        self._held = 0  # points in all buffers
        # Thinned again only past this too. Each curve keeps its last point, so with thousands of runs
        # a thinning can leave over half the bound; it is then tried again only once another half of
        # it has come, not at each dump (each thinning reads every held dump).
        self._thin_at = 0
        self.thinned: dict[str, int] = {}  # run -> its curves keep one point in this many (since thinned)
        self._tagged: dict[str, int] = {}  # run -> the thinning its tag says
        self._rows = _StoreRows.open(uri)  # after the experiment: its store and schema exist
        self._artifact_root = ""  # the experiment's artifact location, where the plain-SQL writer makes runs
        self._local_artifacts: Path | None = None  # runs' artifact folders, where written straight to them
        if self._rows is not None:
            self._artifact_root = (found or self.client.get_experiment(self.experiment_id)).artifact_location
            if self._artifact_root.startswith("file:"):
                from mlflow.utils.file_utils import local_file_uri_to_path

                self._local_artifacts = Path(local_file_uri_to_path(self._artifact_root))

    # --- runs -----------------------------------------------------------------------------
    def start_trial(
        self,
        trial: int | None,
        params: dict[str, Any],
        resolved_spec: dict[str, Any],
        name: str | None = None,
        tags: dict[str, str] | None = None,
        key: str | None = None,
    ) -> str:
        """A trial's parent run. ``trial=None`` (a repair attempt) has no ``rlsweep.trial`` tag: it is
        not one of the study's sampled trials, so resuming never closes it as one."""
        base = {keys.SWEEP: self.sweep} | ({keys.TRIAL: str(trial)} if trial is not None else {})
        run_id = self._create(name or f"trial-{trial}", base | (tags or {}), key, params)
        # as MLflow's log_dict writes it
        self._artifact(run_id, "spec.resolved.json", json.dumps(resolved_spec, indent=2, default=str).encode())
        return run_id

    def start_seed(
        self,
        trial: int | None,
        seed: int,
        parent_id: str,
        params: dict[str, Any],
        name: str | None = None,
        tags: dict[str, str] | None = None,
        key: str | None = None,
    ) -> str:
        base = {keys.SWEEP: self.sweep, keys.SEED: str(seed), "mlflow.parentRunId": parent_id} | (
            {keys.TRIAL: str(trial)} if trial is not None else {}
        )
        return self._create(name or f"trial-{trial}-seed-{seed}", base | (tags or {}), key, {**params, "seed": seed})

    def _create(self, name: str, tags: dict[str, str], key: str | None, params: dict[str, Any]) -> str:
        """A new run with its tags and params, once: ``key`` (unique to the run) is tagged on it,
        and when creating it is tried again (the tracking server went away during the first try,
        perhaps after creating it), a run already holding ``key`` is taken instead of a second one."""
        if key is not None:
            if key in self._tried:
                found = self.client.search_runs(
                    [self.experiment_id], filter_string=f"tags.`{keys.RUN_KEY}` = '{key}'", max_results=1
                )
                if found:
                    return found[0].info.run_id
            self._tried.add(key)
            tags = tags | {keys.RUN_KEY: key}
        values = {k[:250]: _param_value(v) for k, v in params.items()}
        if self._rows is not None:
            run_id = self._rows.create_run(self.experiment_id, self._artifact_root, name, tags, values)
            if run_id is not None:
                return run_id
        run_id = self.client.create_run(self.experiment_id, run_name=name, tags=tags).info.run_id
        self._log_params(run_id, values)
        return run_id

    def _artifact(self, run_id: str, name: str, data: bytes) -> None:
        """One artifact file of the run, at ``name`` (a path relative to its artifacts). On a SQLite
        store this module writes runs to, with a local artifact folder, written straight to the
        run's folder, where MLflow's own store puts it (``<experiment location>/<run>/artifacts``):
        MLflow's client first reads the whole run back through the ORM, about 10 ms a file. Else
        through MLflow's client."""
        relative = PurePosixPath(name)
        if self._local_artifacts is not None and not relative.is_absolute() and ".." not in relative.parts:
            path = self._local_artifacts.joinpath(run_id, "artifacts", *relative.parts)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            return
        import tempfile

        with tempfile.TemporaryDirectory() as folder:
            local = Path(folder) / relative.name
            local.write_bytes(data)
            parent = str(relative.parent)  # "." for a file at the top, which MLflow refuses as a folder
            self.client.log_artifact(run_id, str(local), artifact_path=None if parent == "." else parent)

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        values = _tag_values(tags)
        if values and (self._rows is None or self._rows.set_tags({run_id: values})):
            self._client_tags(run_id, values)

    def _client_tags(self, run_id: str, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def find_trial_run(self, trial: int) -> str | None:
        """The parent run of a sampled trial of this sweep, or None."""
        runs = self.client.search_runs(
            [self.experiment_id],
            max_results=1,
            filter_string=f"tags.`{keys.SWEEP}` = '{self.sweep}' and "
            f"tags.`{keys.TRIAL}` = '{trial}' and "
            f"attributes.run_name = 'trial-{trial}'",
        )
        return runs[0].info.run_id if runs else None

    def _log_params(self, run_id: str, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        self.client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()])

    def end_run(
        self,
        run_id: str,
        status: str,
        metrics: dict[str, float] | None = None,
        tags: dict[str, str] | None = None,
        texts: dict[str, str] | None = None,
        files: dict[str, bytes] | None = None,
    ) -> None:
        """Flush ``run_id``'s curves, log final values, tags and artifacts (``texts``/``files``:
        artifact path -> content), and close it as FINISHED/FAILED/KILLED."""
        if metrics:
            self.log_metrics(run_id, 0, metrics)
        for name, text in (texts or {}).items():
            self._artifact(run_id, name, text.encode("utf-8"))  # as MLflow's log_text writes it
        for name, data in (files or {}).items():
            self._artifact(run_id, name, data)
        values = _tag_values(tags)
        held = self._buffers.get(run_id, [])
        if self._rows is not None and self._rows.end_run(run_id, held, values, status, int(time.time() * 1000)):
            self._held -= _count(held)
            self._done([run_id])  # (an empty buffer is done too)
            return
        self._flush_run(run_id, tags=values)  # what the plain-SQL writer leaves: MLflow's own calls
        self.client.set_terminated(run_id, status=status)

    def reconcile(self, outcomes: dict[int, dict[str, Any]]) -> int:
        """Close runs left RUNNING by a driver that died, as the Optuna study (the record of truth) says.

        ``outcomes``: trial number -> {"outcome", "value", "returns" {seed (int): return}, "error"}. A trial
        the study finished gets its runs FINISHED/FAILED with its results; any other is KILLED (its
        config is rerun as a new trial). Returns how many runs were closed.
        """
        from mlflow.entities import Metric, RunTag

        runs = self.client.search_runs(
            [self.experiment_id], filter_string="attributes.status = 'RUNNING'", max_results=5000
        )
        now = int(time.time() * 1000)
        for run in runs:
            tags = run.data.tags
            seed = tags.get(keys.SEED)
            known = outcomes.get(int(tags.get(keys.TRIAL, -1)), {})
            status, outcome, values = closed_as(known, None if seed is None else int(seed))
            metrics = [Metric(name, value, now, 0) for name, value in values.items()]
            run_tags = [RunTag(keys.OUTCOME, outcome)]
            if outcome == "crashed" and known.get("error"):
                run_tags.append(RunTag(keys.ERROR, known["error"][:5000]))
            self.client.log_batch(run.info.run_id, metrics=metrics, tags=run_tags)
            self.client.set_terminated(run.info.run_id, status=status)
        return len(runs)

    def trial_runs(self) -> dict[int, tuple[str | None, set[int]]]:
        """The runs this sweep's sampled trials have in the store, deleted ones included (a run
        deleted in the UI was meant to go): trial -> (its trial run's id, or None; the seeds that
        have a run). Read as plain SQL where this module writes the store (a 1000-trial sweep's
        4000 runs: milliseconds, against 2.5 s through MLflow's search, which reads every run's
        params, metrics and tags)."""
        found: dict[int, tuple[str | None, set[int]]] = {}
        rows = self._rows.trial_runs(self.experiment_id, self.sweep) if self._rows is not None else self._searched()
        for run_id, trial, seed in rows:
            parent, seeds = found.get(int(trial), (None, set()))
            found[int(trial)] = (parent, seeds | {int(seed)}) if seed is not None else (run_id, seeds)
        return found

    def _searched(self) -> list[tuple[str, str, str | None]]:
        """(run id, trial, seed or None) of every run of this sweep's sampled trials, through MLflow's search."""
        from mlflow.entities import ViewType

        rows: list[tuple[str, str, str | None]] = []
        token = None
        while True:
            page = self.client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.`{keys.SWEEP}` = '{self.sweep}'",
                run_view_type=ViewType.ALL,
                max_results=5000,
                page_token=token,
            )
            tagged = ((r.info.run_id, r.data.tags) for r in page)
            rows += [(run, t[keys.TRIAL], t.get(keys.SEED)) for run, t in tagged if keys.TRIAL in t]
            token = page.token
            if not token:
                return rows

    # --- metrics --------------------------------------------------------------------------
    def log_metrics(self, run_id: str, step: int, values: dict[str, float]) -> None:
        # sent by flush_if_due (the driver's loop) or end_run: never a network call here
        self._since.setdefault(run_id, time.monotonic())
        self._buffers.setdefault(run_id, []).append((int(time.time() * 1000), int(step), dict(values)))
        self._held += len(values)
        if self._held > max(_MAX_HELD, self._thin_at):
            self._thin()

    def _thin(self) -> None:
        """Halve every held curve: of each run's dumps of the same keys (a logger dumps the same
        keys at each update), keep every other one, the last always (a curve still ends where the
        run is). A step per dump, not per point."""
        self._held = 0
        for run_id, dumps in self._buffers.items():
            alike: dict[tuple[str, ...], list[int]] = {}
            for i, dump in enumerate(dumps):
                alike.setdefault(tuple(dump[2]), []).append(i)
            keep = sorted(i for same in alike.values() for i in same[len(same) - 1 :: -2])
            if len(keep) < len(dumps):
                dumps[:] = [dumps[i] for i in keep]
                self.thinned[run_id] = self.thinned.get(run_id, 1) * 2
            self._held += _count(dumps)
        self._thin_at = self._held + _MAX_HELD // 2 if self._held > _MAX_HELD // 2 else 0

    def flush_if_due(self, budget: float = _FLUSH_BUDGET) -> None:
        """Send the runs whose oldest point has waited long enough (``_FLUSH_SECONDS``, or
        ``_FLUSH_SECONDS_SQL`` where points are written as plain SQL): as plain SQL, all of them in
        one transaction; else one run at a time, oldest first, for about ``budget`` seconds at most
        (at least one run), the rest waiting for the next turn of the loop."""
        now = time.monotonic()
        wait = _FLUSH_SECONDS_SQL if self._rows is not None else _FLUSH_SECONDS
        due = [run for run, _ in itertools.takewhile(lambda item: now - item[1] >= wait, self._since.items())]
        if self._rows is not None:
            self._send(due)
            return
        until = now + budget
        for run_id in due:
            self._flush_run(run_id)
            if time.monotonic() > until:
                break

    def flush(self) -> None:
        if self._rows is not None:
            self._send(list(self._buffers))
        for run_id in list(self._buffers):
            self._flush_run(run_id)

    def _flush_run(self, run_id: str, tags: dict[str, str] | None = None) -> None:
        """Send the run's buffered points, then ``tags``; what a failed call did not send stays
        buffered (MLflow stores a point sent twice once: same key, step, timestamp and value)."""
        from mlflow.entities import Metric

        if self._rows is not None:
            self._send([run_id])
        points, sent = _points(self._buffers.get(run_id, [])), 0
        try:
            while sent < len(points):
                batch = points[sent : sent + _BATCH]
                self.client.log_batch(run_id, metrics=[Metric(*point) for point in batch])
                sent += len(batch)
        finally:
            if sent:  # what was sent leaves the buffer; the rest stays held, in order
                self._held -= sent
                self._buffers[run_id] = _dumps(points[sent:])
        if run_id in self._buffers:
            self._done([run_id])
        if tags:
            self.set_tags(run_id, tags)

    def _send(self, run_ids: list[str]) -> None:
        """Plain SQL: the runs' buffered points in one transaction. A run the writer leaves (not
        active: deleted in the UI) keeps its points, for MLflow's own call to refuse in its words."""
        points = {run: self._buffers[run] for run in run_ids if run in self._buffers}  # an empty one is done too
        if not points or self._rows is None:
            return
        left = set(self._rows.write(points))
        written = [run for run in points if run not in left]
        self._held -= sum(_count(points[run]) for run in written)
        self._done(written)

    def _done(self, run_ids: list[str]) -> None:
        """The runs' buffers are in the store: forget them, and tag each run whose curves were
        thinned since it was last tagged with how coarse they are."""
        for run_id in run_ids:
            self._buffers.pop(run_id, None)
            self._since.pop(run_id, None)
        self._sent(run_ids)
        due = {
            run: {keys.METRICS_THINNED: str(self.thinned[run])}
            for run in run_ids
            if self._tagged.get(run, 0) != self.thinned.get(run, 0)
        }
        # one transaction for all of them on the plain-SQL path; a run it leaves: MLflow's own call
        for run_id in self._rows.set_tags(due) if self._rows is not None and due else due:
            self._client_tags(run_id, due[run_id])
        for run_id in due:
            self._tagged[run_id] = self.thinned[run_id]

    def _sent(self, run_ids: list[str]) -> None:
        """Called once the runs' buffered points are in the store (a hook for benchmarks)."""


# MLflow keeps +-inf as the largest doubles (SQL has no infinity) and NaN as 0 marked is_nan.
_LARGEST = 1.7976931348623157e308
_INSERT_POINTS = (
    "INSERT OR IGNORE INTO metrics (key, value, timestamp, run_uuid, step, is_nan) VALUES (?, ?, ?, ?, ?, ?)"
)
_UPSERT_LATEST = (
    "INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid) VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (key, run_uuid) DO UPDATE SET value = excluded.value, timestamp = excluded.timestamp, "
    "step = excluded.step, is_nan = excluded.is_nan WHERE (excluded.step, excluded.timestamp, excluded.value) "
    "> (latest_metrics.step, latest_metrics.timestamp, latest_metrics.value)"
)


_RUN_NAME = "mlflow.runName"
_INSERT_RUN = (
    "INSERT INTO runs (run_uuid, name, source_type, source_name, entry_point_name, user_id, status, start_time, "
    "end_time, deleted_time, source_version, lifecycle_stage, artifact_uri, experiment_id) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPSERT_TAG = (
    "INSERT INTO tags (key, value, run_uuid) VALUES (?, ?, ?) "
    "ON CONFLICT (key, run_uuid) DO UPDATE SET value = excluded.value"
)
_END_RUN = "UPDATE runs SET status = ?, end_time = ? WHERE run_uuid = ? AND lifecycle_stage = 'active'"
_TRIAL_RUNS = (
    "SELECT r.run_uuid, t.value, s.value FROM runs r "
    "JOIN tags w ON w.run_uuid = r.run_uuid AND w.key = ? AND w.value = ? "
    "JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = ? "
    "LEFT JOIN tags s ON s.run_uuid = r.run_uuid AND s.key = ? "
    "WHERE r.experiment_id = ?"
)


def _count(dumps: Dumps) -> int:
    return sum(len(dump[2]) for dump in dumps)


def _points(dumps: Dumps) -> list[tuple[str, float, int, int]]:
    """The dumps as MLflow's metric points, (key, value, timestamp, step) each, in order."""
    return [(key, float(value), ts, step) for ts, step, values in dumps for key, value in values.items()]


def _dumps(points: list[tuple[str, float, int, int]]) -> Dumps:
    """Points (key, value, timestamp, step) held again: a dump each."""
    return [(timestamp, step, {key: value}) for key, value, timestamp, step in points]


class _StoreRows:
    """Plain SQL on MLflow's own tables, on a connection of its own, with the meaning MLflow's store
    gives the rows it writes there.

    Metric points (``metrics``, ``latest_metrics``): a point already stored (same run, key, step,
    timestamp and value) is stored once; NaN is 0 marked ``is_nan`` and +-inf the largest doubles;
    a key's latest value is its point with the largest (step, timestamp, value).

    Runs (``runs``, ``tags``, ``params``): created as MLflow's ``create_run`` makes them (its
    ``mlflow.runName`` tag, user ``unknown``, artifacts under the experiment's location), with
    their tags and params in the same transaction; tags set later replace a key's value; an end
    sets the status and end time. Names and values pass MLflow's own checks (a value too long is
    cut as MLflow cuts it).

    Only active runs of active experiments are written to. Anything else (a run deleted in the UI,
    a run-name tag, which MLflow also copies to the run) is left to MLflow's own call, which
    refuses it in its words or does it: the methods say so by returning ``None`` or ``False``."""

    def __init__(self, db: Path) -> None:
        from mlflow.entities import RunStatus
        from mlflow.utils.uri import append_to_uri_path
        from mlflow.utils.validation import _validate_metric_name, _validate_param, _validate_tag

        # The write-ahead log where the store is local, as the study has (``sweeps.study_storage``).
        # Each run's creation, tags and end in the default journal cost about 1 ms of fsync, most
        # of the driver's commit time with hundreds of seeds (``tests/bench/driver_scale.py``). A
        # driver killed by any signal loses nothing committed; only a power cut or an OS crash can
        # lose the last commits, as it can the study's. A store another process holds keeps its
        # journal: the switch waits a second at most, then the connection's own timeout is set.
        self.con = sqlite3.connect(db, timeout=1.0, check_same_thread=False)
        if on_local_filesystem(db):
            write_ahead(self.con)
        self.con.execute("PRAGMA busy_timeout=60000")
        self._check_name = _validate_metric_name
        self._param, self._tag, self._status = _validate_param, _validate_tag, RunStatus
        self._under = append_to_uri_path
        self._names: set[str] = set()  # the metric names already checked

    @classmethod
    def open(cls, uri: str) -> _StoreRows | None:
        """The writer, for a SQLite store with the schema it knows (and a SQLite with upserts); else None."""
        db = sqlite_file(uri)
        if db is None or sqlite3.sqlite_version_info < (3, 24) or alembic_revision(db) != MLFLOW_SCHEMA:
            return None
        return cls(db)

    def create_run(
        self, experiment_id: str, artifact_root: str, name: str, tags: dict[str, str], params: dict[str, str]
    ) -> str | None:
        """A new RUNNING run named ``name`` with its tags and params, in one transaction; its id.
        None where MLflow's own call must decide: the experiment is not active, or a run-name tag
        is given."""
        if _RUN_NAME in tags:
            return None
        run_id, now = uuid.uuid4().hex, int(time.time() * 1000)
        tag_rows = self._tag_rows(run_id, {**tags, _RUN_NAME: name})
        param_rows = [(p.key, p.value, run_id) for p in (self._param(k, v) for k, v in params.items())]
        run = (run_id, name, "UNKNOWN", "", "", "unknown", "RUNNING", now, None, None, "", "active")
        with self.con:
            found = self.con.execute(
                "SELECT lifecycle_stage FROM experiments WHERE experiment_id = ?", (int(experiment_id),)
            ).fetchone()
            if found is None or found[0] != "active":
                return None
            self.con.execute(_INSERT_RUN, (*run, self._under(artifact_root, run_id, "artifacts"), int(experiment_id)))
            self.con.executemany("INSERT INTO tags (key, value, run_uuid) VALUES (?, ?, ?)", tag_rows)
            self.con.executemany("INSERT INTO params (key, value, run_uuid) VALUES (?, ?, ?)", param_rows)
        return run_id

    def set_tags(self, tags: dict[str, dict[str, str]]) -> list[str]:
        """Set runs' tags (run -> key -> value; a key's value replaced), all in one transaction; the
        runs left to MLflow's own call (not active, or given a run-name tag) are returned."""
        mine = [run for run, values in tags.items() if _RUN_NAME not in values]
        rows = [row for run in mine for row in self._tag_rows(run, tags[run])]
        with self.con:
            active = self._active(mine)
            self.con.executemany(_UPSERT_TAG, [row for row in rows if row[2] in active])
        return [run for run in tags if run not in active]

    def write(self, points: dict[str, Dumps]) -> list[str]:
        """Store the runs' dumps (timestamp, step, {key: value}) in one transaction; the runs left
        unwritten (not active) are returned."""
        active = self._active(list(points))
        rows, latest = self._point_rows({run: points[run] for run in active})
        with self.con:  # one transaction: committed here, or nothing of it on an error
            self._insert_points(rows, latest)
        return [run for run in points if run not in active]

    def end_run(self, run_id: str, points: Dumps, tags: dict[str, str], status: str, end_time: int) -> bool:
        """The run's last points, its tags and its end (``status`` at ``end_time``), in one
        transaction; False, with nothing written, where MLflow's own calls must decide (the run is
        not active, or a run-name tag is given)."""
        if _RUN_NAME in tags:
            return False
        self._status.from_string(status)  # an unknown status is refused in MLflow's words
        rows, latest = self._point_rows({run_id: points})
        tag_rows = self._tag_rows(run_id, tags)
        with self.con:
            if not self._active([run_id]):
                return False
            self._insert_points(rows, latest)
            self.con.executemany(_UPSERT_TAG, tag_rows)
            self.con.execute(_END_RUN, (status, end_time, run_id))
        return True

    def trial_runs(self, experiment_id: str, sweep: str) -> list[tuple[str, str, str | None]]:
        """(run id, trial, seed or None) of every run of the experiment tagged with ``sweep`` and a
        trial (a repair's runs and the report's are not), deleted ones included."""
        return self.con.execute(_TRIAL_RUNS, (keys.SWEEP, sweep, keys.TRIAL, keys.SEED, int(experiment_id))).fetchall()

    def _tag_rows(self, run_id: str, tags: dict[str, str]) -> list[tuple[str, str, str]]:
        """The ``tags`` rows of the run's tags, each checked (and cut) as MLflow checks it."""
        return [(t.key, t.value, run_id) for t in (self._tag(k, v) for k, v in tags.items())]

    def _point_rows(self, points: dict[str, Dumps]) -> tuple[list[tuple], list[tuple]]:
        """The ``metrics`` rows of the runs' points, and the ``latest_metrics`` row of each run's key."""
        rows: list[tuple[str, float, int, str, int, int]] = []
        latest: dict[tuple[str, str], tuple[tuple[int, int, float], tuple[str, float, int, int, int, str]]] = {}
        for run_id, dumps in points.items():
            for timestamp, step, values in dumps:
                for key, raw in values.items():
                    if key not in self._names:
                        self._check_name(key)
                        self._names.add(key)
                    value = float(raw)
                    nan = math.isnan(value)
                    stored = 0.0 if nan else math.copysign(_LARGEST, value) if math.isinf(value) else value
                    rows.append((key, stored, timestamp, run_id, step, int(nan)))
                    order, best = (step, timestamp, stored), latest.get((run_id, key))
                    if best is None or order > best[0]:
                        latest[(run_id, key)] = (order, (key, stored, timestamp, step, int(nan), run_id))
        return rows, [row for _, row in latest.values()]

    def _insert_points(self, rows: list[tuple], latest: list[tuple]) -> None:
        self.con.executemany(_INSERT_POINTS, rows)
        self.con.executemany(_UPSERT_LATEST, latest)

    def _active(self, run_ids: list[str]) -> set[str]:
        found: set[str] = set()
        for i in range(0, len(run_ids), 500):
            chunk = run_ids[i : i + 500]
            marks = ", ".join("?" * len(chunk))
            query = f"SELECT run_uuid FROM runs WHERE lifecycle_stage = 'active' AND run_uuid IN ({marks})"  # noqa: S608
            found.update(run for (run,) in self.con.execute(query, chunk))
        return found


class BackgroundTracker:
    """An :class:`MlflowTracker` built in a thread (importing MLflow and creating a new store's
    schema takes ~4 s); the first use waits for it. Errors surface at that first use.

    A tracking server that could not be reached while it was built (an outage as the sweep
    starts) is not the end of the sweep: that use fails as any write to an absent server does,
    the driver holds its writes, and the next use builds the tracker again. ``server`` is known
    without building it, since the driver reads it to tell such a failure from a wrong write, and
    a method read from it is bound when called, not when read: the failure then happens inside
    the call the driver guards (``partial(tracker.end_run, ...)`` reads the method before it)."""

    def __init__(self, uri: str, experiment: str, sweep: str, artifact_dir: Path) -> None:
        from concurrent.futures import Future, ThreadPoolExecutor

        self.server = is_server(uri)
        self._args = (uri, experiment, sweep, artifact_dir)
        self._tracker: MlflowTracker | None = None
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlflow-setup")
        self._future: Future[MlflowTracker] | None = pool.submit(_build_tracker, *self._args)
        pool.shutdown(wait=False)

    def __getattr__(self, name: str) -> Any:
        if callable(getattr(MlflowTracker, name, None)):
            return lambda *args, **kwargs: getattr(self._built(), name)(*args, **kwargs)
        return getattr(self._built(), name)

    def _built(self) -> MlflowTracker:
        if self._tracker is None:
            try:
                self._tracker = self._future.result() if self._future else _build_tracker(*self._args)
            except Exception as exc:
                if self.server and unreachable(exc):
                    self._future = None  # built again (in this thread) at the next use
                raise
        return self._tracker


def _build_tracker(*args: Any) -> MlflowTracker:
    """MlflowTracker(*args), built off the main thread. When the main thread imports something
    that imports MLflow at the same moment, this thread can meet a partially initialised
    ``mlflow`` package (MLflow's own modules import each other in a cycle) and fail with an
    ImportError that a moment later would not happen: retried a few times, then raised."""
    for _ in range(4):
        try:
            return MlflowTracker(*args)
        except (ImportError, AttributeError) as exc:  # either, as the half-imported module is met
            if "partially initialized" not in str(exc):
                raise
            time.sleep(0.5)
    return MlflowTracker(*args)
