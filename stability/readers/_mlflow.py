"""Metric histories and tags of one MLflow run. ``mlflow`` is imported only when called."""

from __future__ import annotations

import socket
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from stability.readers._errors import LogReadError

_PROBE_TIMEOUT_S = 5.0  # an unreachable server otherwise costs MLflow's retries (minutes)


def _redact(uri: str) -> str:
    """The URI without any user:password part, for messages."""
    parts = urllib.parse.urlsplit(uri)
    if parts.password is None and parts.username is None:
        return uri
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


def _check_store(uri: str, run_id: str) -> None:
    """Fail fast, without side effects, on stores that cannot hold the run: a SQLite file or a
    file-store folder that does not exist (MLflow would create an empty one), or an HTTP server
    that does not answer (MLflow would retry for minutes)."""
    shown = _redact(uri)
    parts = urllib.parse.urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        database = uri.split("://", 1)[1] if "://" in uri else ""
        database = database[1:] if database.startswith("/") else database  # sqlite:///rel, sqlite:////abs
        database = database.split("?", 1)[0]
        if database and database != ":memory:" and not Path(database).is_file():
            raise LogReadError(
                f"cannot read MLflow run {run_id!r}: the tracking store {shown!r} names the "
                f"SQLite database {database!r}, which does not exist",
                run_id,
            )
    elif scheme in ("", "file") and not uri.startswith("databricks"):
        folder = urllib.request.url2pathname(parts.path) if scheme == "file" else uri
        if not Path(folder).is_dir():
            raise LogReadError(
                f"cannot read MLflow run {run_id!r}: the tracking store {shown!r} is a local "
                f"folder that does not exist",
                run_id,
            )
    elif scheme in ("http", "https") and parts.hostname:
        if urllib.request.getproxies().get(scheme) and not urllib.request.proxy_bypass(parts.hostname):
            return  # the request goes through a proxy; a direct probe says nothing
        port = parts.port or (443 if scheme == "https" else 80)
        try:
            socket.create_connection((parts.hostname, port), timeout=_PROBE_TIMEOUT_S).close()
        except OSError as exc:
            raise LogReadError(
                f"cannot read MLflow run {run_id!r}: the tracking server {shown!r} is not "
                f"reachable ({type(exc).__name__}: {exc})",
                run_id,
            ) from exc


def read_mlflow_run(
    run_id: str, tracking_uri: str | None = None
) -> tuple[dict[str, list[tuple[int, float]]], dict[str, str]]:
    """The full history of every metric of run ``run_id`` (``{key: [(step, value), ...]}``,
    sorted by step, then by timestamp) and the run's tags (MLflow's own ``mlflow.*`` included).

    ``tracking_uri`` defaults to MLflow's current one (``MLFLOW_TRACKING_URI`` or its default).
    Raises :class:`LogReadError` for an unknown run id, a missing or unreachable store, or any
    other failure to read; it never creates a store.
    """
    try:
        import mlflow
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient
    except ImportError as exc:
        raise LogReadError(
            f"cannot read MLflow run {run_id!r}: the 'mlflow' package is not importable ({exc})", run_id
        ) from exc

    uri = tracking_uri or mlflow.get_tracking_uri()
    shown = _redact(uri)
    _check_store(uri, run_id)
    step_name = "opening the tracking store"
    try:
        client = MlflowClient(uri)
        step_name = "looking up the run"
        run = client.get_run(run_id)
        scalars: dict[str, list[tuple[int, float]]] = {}
        for key in sorted(run.data.metrics):
            step_name = f"reading the history of metric {key!r}"
            history: list[Any] = client.get_metric_history(run_id, key)
            history.sort(key=lambda m: (m.step, m.timestamp))
            scalars[key] = [(int(m.step), float(m.value)) for m in history]
        tags = {str(k): str(v) for k, v in run.data.tags.items()}
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            raise LogReadError(
                f"no MLflow run with id {run_id!r} in the tracking store {shown!r} (is the id "
                "complete, and is this the store the run logged to?)",
                run_id,
            ) from exc
        raise LogReadError(
            f"cannot read MLflow run {run_id!r} from the tracking store {shown!r}: {step_name} "
            f"failed ({exc.error_code}: {exc.message})",
            run_id,
        ) from exc
    except Exception as exc:  # sqlalchemy, requests, OS errors: the store itself is at fault
        raise LogReadError(
            f"cannot read MLflow run {run_id!r} from the tracking store {shown!r}: {step_name} "
            f"failed ({type(exc).__name__}: {exc})",
            run_id,
        ) from exc
    return scalars, tags
