"""The storage the sweep's one driver opens its Optuna study with (the sweep's lock makes it the
study's only writer): what it reads, it reads from memory; what it writes goes to the database at
once, one commit per write.

Optuna's own cache reads every unfinished trial again from the database at each ``ask`` and each
pruner check, since another process might have changed it, and its SQL storage spends about 1.5 ms
of SQLAlchemy per write (about 14 ms per trial: its creation, its params, its attributes and its
end). With hundreds of seeds in flight both were most of the driver's time
(``tests/bench/driver_scale.py``). Here:

- the study's trials are read in full once; after that the cache holds every trial as this
  process wrote it (nothing else can have changed it), and nothing is read again;
- on a SQLite study with the schema this module knows (``SCHEMA``), each trial write is a few plain
  SQL statements on Optuna's own tables, the values encoded by Optuna's own models, committed
  before the call returns (about 0.2 ms per trial). A study with another schema keeps Optuna's
  writes, and reads again only the trials this process wrote to.

Crash-safe resume is unchanged: every write is committed when its call returns, in the same order.
Readers of a study a driver is writing (``status``, the UI, ``optuna.load_study``) keep Optuna's
storage and see the same rows (``tests/test_driver.py`` checks the two agree).
"""

from __future__ import annotations

import copy
import json
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

from sweeps.spec import alembic_revision, sqlite_file

# The alembic revision of Optuna's RDB schema the plain-SQL writes are made for; a study with
# another one keeps Optuna's own writes.
SCHEMA = "v3.2.0.a"

# Filesystems on which SQLite's write-ahead log is safe: local ones (all of a WAL database's users
# must share memory with it, which network filesystems cannot give).
_LOCAL_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", "f2fs", "bcachefs"})


def filesystem_type(path: Path, mountinfo: Path = Path("/proc/self/mountinfo")) -> str | None:
    """The type of the filesystem ``path`` is on (Linux: the mount with the longest matching
    mount point); None where that cannot be told."""
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return None
    where, best, found = str(path.resolve()), -1, None
    for line in lines:
        fields = line.split()
        if "-" not in fields:
            continue
        point = fields[4].replace("\\040", " ")
        dash = fields.index("-")
        inside = where == point or where.startswith(point.rstrip("/") + "/")
        if inside and len(point) > best and dash + 1 < len(fields):
            best, found = len(point), fields[dash + 1]
    return found


def on_local_filesystem(db: Path) -> bool:
    """Whether the SQLite file ``db`` is on a filesystem where its write-ahead log is safe."""
    return filesystem_type(db.parent) in _LOCAL_FILESYSTEMS


def write_ahead(con: sqlite3.Connection) -> None:
    """``synchronous=NORMAL`` on this connection, and SQLite's write-ahead log for its database
    (kept in the file, so its other readers and writers use it too): a commit is then an append,
    not an fsync of a journal and of the database. A database another process holds at that moment
    keeps its journal (within the connection's busy timeout)."""
    con.execute("PRAGMA synchronous=NORMAL")  # per connection: no lock needed
    try:
        con.execute("PRAGMA journal_mode=WAL")
    except sqlite3.OperationalError:  # e.g. another process holds the file: the default stays
        pass


def _fast_commits(engine: Any) -> None:
    """SQLite's write-ahead log with ``synchronous=NORMAL`` for the study on a local filesystem:
    a commit is an append, not an fsync of the journal and the database (``--optuna
    sole,sole-journal`` in ``tests/bench/driver_scale.py`` compares the two). A driver killed by
    any signal loses nothing committed; only a power cut or an OS crash can lose the last commits
    (the trials then run again on resume). Elsewhere (a network filesystem, or one that cannot be
    told) the default journal stays."""
    from sqlalchemy import event

    event.listen(engine, "connect", lambda connection, _record: write_ahead(connection))
    engine.dispose()  # connections made while the schema was checked: opened again with the above


def _stamp(when: datetime | None) -> str | None:
    """A datetime as SQLAlchemy stores it in SQLite (microseconds always written)."""
    return None if when is None else when.strftime("%Y-%m-%d %H:%M:%S.%f")


_UPSERT_ATTR = (
    "INSERT INTO {table} (trial_id, key, value_json) VALUES (?, ?, ?) "
    "ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json"
)


class _Rows:
    """Plain SQL on Optuna's trial tables, on a connection of its own; each call is one
    transaction, committed before it returns."""

    def __init__(self, db: Path, local: bool) -> None:
        self.con = sqlite3.connect(db, timeout=60.0, check_same_thread=False)
        if local:  # (the engine has set the write-ahead log in the file already)
            write_ahead(self.con)

    @classmethod
    def open(cls, db: Path, local: bool) -> _Rows | None:
        """The writer, where the study's schema is the one it knows; else None."""
        return cls(db, local) if alembic_revision(db) == SCHEMA else None

    def insert_trial(self, study_id: int, number: int, trial: Any) -> int:
        cursor = self.con.execute(
            "INSERT INTO trials (number, study_id, state, datetime_start, datetime_complete) VALUES (?, ?, ?, ?, ?)",
            (number, study_id, trial.state.name, _stamp(trial.datetime_start), _stamp(trial.datetime_complete)),
        )
        return int(cursor.lastrowid or 0)  # set by every INSERT

    def param(self, trial_id: int, name: str, internal: float, distribution: Any) -> None:
        from optuna.distributions import distribution_to_json

        self.con.execute(
            "INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json) VALUES (?, ?, ?, ?)",
            (trial_id, name, internal, distribution_to_json(distribution)),
        )

    def value(self, trial_id: int, objective: int, value: float) -> float:
        from optuna.storages._rdb.models import TrialValueModel

        stored, kind = TrialValueModel.value_to_stored_repr(value)
        self.con.execute(
            "INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (trial_id, objective) DO UPDATE SET value = excluded.value, value_type = excluded.value_type",
            (trial_id, objective, stored, kind.name),
        )
        return TrialValueModel.stored_repr_to_value(stored, kind)

    def intermediate(self, trial_id: int, step: int, value: float) -> float:
        from optuna.storages._rdb.models import TrialIntermediateValueModel as Model

        stored, kind = Model.intermediate_value_to_stored_repr(value)
        self.con.execute(
            "INSERT INTO trial_intermediate_values (trial_id, step, intermediate_value, intermediate_value_type) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (trial_id, step) DO UPDATE SET "
            "intermediate_value = excluded.intermediate_value, "
            "intermediate_value_type = excluded.intermediate_value_type",
            (trial_id, step, stored, kind.name),
        )
        return Model.stored_repr_to_intermediate_value(stored, kind)

    def values(self, trial_id: int, values: Any) -> list[float]:
        """Every objective's value; as a reader gets them back."""
        return [self.value(trial_id, objective, v) for objective, v in enumerate(values)]

    def attr(self, table: str, trial_id: int, key: str, value: Any) -> Any:
        """A user or system attribute; as a reader gets it back (through JSON)."""
        text = json.dumps(value)
        self.con.execute(_UPSERT_ATTR.format(table=table), (trial_id, key, text))
        return json.loads(text)

    def state(self, trial_id: int, state: Any, start: datetime | None, complete: datetime | None) -> None:
        sets, args = ["state = ?"], [state.name]
        for column, when in (("datetime_start", start), ("datetime_complete", complete)):
            if when is not None:
                sets.append(f"{column} = ?")
                args.append(_stamp(when))
        self.con.execute(f"UPDATE trials SET {', '.join(sets)} WHERE trial_id = ?", (*args, trial_id))  # noqa: S608


def sole_writer_storage(url: str) -> Any:
    """Optuna's storage for a study this process alone writes to (see the module's docstring)."""
    import optuna
    from optuna.distributions import check_distribution_compatibility
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.storages._cached_storage import _CachedStorage
    from optuna.trial import FrozenTrial, TrialState

    class SoleWriterStorage(_CachedStorage):
        """Reads the study once, then only the trials written since through Optuna's writes."""

        def __init__(self, backend: Any) -> None:
            super().__init__(backend)
            self._written: set[int] = set()  # trial ids written since the cache last read them
            self._synced: set[int] = set()  # studies read in full once

        def _read_trials_from_remote_storage(self, study_id: int) -> None:
            if study_id not in self._synced:
                super()._read_trials_from_remote_storage(study_id)
                self._synced.add(study_id)
                return
            with self._lock:
                ids = self._trial_id_to_study_id_and_number
                written = {t for t in self._written if ids.get(t, (None,))[0] == study_id}
                if not written:  # the common case on the hot path: nothing to scan, nothing to read
                    return
                newest = max(t for t, (sid, _) in ids.items() if sid == study_id)
                trials = self._backend._get_trials(
                    study_id, states=None, included_trial_ids=written, trial_id_greater_than=newest
                )  # those written, and any trial beyond the newest known (none: this process creates them)
                self._add_trials_to_cache(study_id, trials)
                self._written -= written

        def _wrote(self, trial_id: int) -> None:
            with self._lock:
                self._written.add(trial_id)

        def set_trial_param(self, trial_id: int, *args: Any, **kwargs: Any) -> None:
            super().set_trial_param(trial_id, *args, **kwargs)
            self._wrote(trial_id)

        def set_trial_state_values(self, trial_id: int, *args: Any, **kwargs: Any) -> bool:
            try:
                return super().set_trial_state_values(trial_id, *args, **kwargs)
            finally:  # also when it failed or changed nothing: read it again either way
                self._wrote(trial_id)

        def set_trial_intermediate_value(self, trial_id: int, *args: Any, **kwargs: Any) -> None:
            super().set_trial_intermediate_value(trial_id, *args, **kwargs)
            self._wrote(trial_id)

        def set_trial_user_attr(self, trial_id: int, *args: Any, **kwargs: Any) -> None:
            super().set_trial_user_attr(trial_id, *args, **kwargs)
            self._wrote(trial_id)

        def set_trial_system_attr(self, trial_id: int, *args: Any, **kwargs: Any) -> None:
            super().set_trial_system_attr(trial_id, *args, **kwargs)
            self._wrote(trial_id)

    class PlainSqlStorage(SoleWriterStorage):
        """Trial writes as plain SQL, and the cache kept as the database then holds each trial:
        after the first full read, nothing is read again. A trial the cache does not hold (none,
        in a driver) goes through Optuna's writes above."""

        def __init__(self, backend: Any, rows: _Rows) -> None:
            super().__init__(backend)
            self._rows = rows

        def _cached(self, trial_id: int) -> FrozenTrial | None:
            """The trial as this process last wrote it, once its study has been read in full."""
            where = self._trial_id_to_study_id_and_number.get(trial_id)
            if where is None or where[0] not in self._synced:
                return None
            return self._studies[where[0]].trials[where[1]]

        def get_trial(self, trial_id: int) -> FrozenTrial:
            with self._lock:
                trial = self._cached(trial_id)
                if trial is not None:  # a copy of a running one: its holder may change it (optuna's Trial does)
                    return trial if trial.state.is_finished() else copy.deepcopy(trial)
            return super().get_trial(trial_id)

        def _distribution_checked(self, study_id: int, name: str, distribution: Any) -> None:
            """Refuse a param whose distribution is incompatible with the study's, as Optuna does."""
            study = self._studies[study_id]
            known = study.param_distribution.get(name) or next(
                (t.distributions[name] for t in study.trials.values() if name in t.distributions), None
            )
            if known is not None:
                check_distribution_compatibility(known, distribution)
            study.param_distribution.setdefault(name, distribution)

        def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
            self._read_trials_from_remote_storage(study_id)  # the number counts every trial before it
            with self._lock, self._rows.con:
                study = self._studies[study_id]
                number = len(study.trials)
                if template_trial is None:
                    template = FrozenTrial(
                        number, TrialState.RUNNING, None, datetime.now(), None, {}, {}, {}, {}, {}, -1
                    )
                else:
                    template = template_trial
                    for name, distribution in template.distributions.items():
                        self._distribution_checked(study_id, name, distribution)
                trial_id = self._rows.insert_trial(study_id, number, template)
                rows, values = self._rows, template.values
                frozen = FrozenTrial(
                    number=number,
                    state=template.state,
                    value=None,
                    values=None if values is None else rows.values(trial_id, values),
                    datetime_start=template.datetime_start,
                    datetime_complete=template.datetime_complete,
                    params={},
                    distributions={},
                    user_attrs={
                        k: rows.attr("trial_user_attributes", trial_id, k, v) for k, v in template.user_attrs.items()
                    },
                    system_attrs={
                        k: rows.attr("trial_system_attributes", trial_id, k, v)
                        for k, v in template.system_attrs.items()
                    },
                    intermediate_values={
                        s: rows.intermediate(trial_id, s, v) for s, v in template.intermediate_values.items()
                    },
                    trial_id=trial_id,
                )
                for name, value in template.params.items():
                    distribution = template.distributions[name]
                    internal = distribution.to_internal_repr(value)
                    rows.param(trial_id, name, internal, distribution)
                    frozen.params[name] = distribution.to_external_repr(internal)
                    frozen.distributions[name] = distribution
                self._add_trials_to_cache(study_id, [frozen])
            return trial_id

        def _updatable(self, trial_id: int) -> FrozenTrial | None:
            trial = self._cached(trial_id)
            if trial is not None and trial.state.is_finished():  # Optuna's check, without its read (under the lock)
                raise UpdateFinishedTrialError(f"Trial#{trial.number} has already finished and can not be updated.")
            return trial

        def set_trial_param(
            self, trial_id: int, param_name: str, param_value_internal: float, distribution: Any
        ) -> None:
            with self._lock:
                trial = self._updatable(trial_id)
                if trial is not None:
                    with self._rows.con:
                        self._distribution_checked(
                            self._trial_id_to_study_id_and_number[trial_id][0], param_name, distribution
                        )
                        self._rows.param(trial_id, param_name, param_value_internal, distribution)
                    trial.params[param_name] = distribution.to_external_repr(param_value_internal)
                    trial.distributions[param_name] = distribution
                    return
            super().set_trial_param(trial_id, param_name, param_value_internal, distribution)

        def set_trial_state_values(self, trial_id: int, state: TrialState, values: Any = None) -> bool:
            with self._lock:
                trial = self._updatable(trial_id)
                if trial is not None:
                    if state == TrialState.RUNNING and trial.state != TrialState.WAITING:
                        return False  # already taken (Optuna's answer when a waiting trial is claimed twice)
                    now = datetime.now()
                    start = now if state == TrialState.RUNNING else None
                    complete = now if state.is_finished() else None
                    with self._rows.con:
                        stored = None if values is None else self._rows.values(trial_id, values)
                        self._rows.state(trial_id, state, start, complete)
                    trial.state = state
                    if stored is not None:
                        trial.values = stored
                    trial.datetime_start = start or trial.datetime_start
                    trial.datetime_complete = complete or trial.datetime_complete
                    return True
            return super().set_trial_state_values(trial_id, state, values)

        def set_trial_intermediate_value(self, trial_id: int, step: int, intermediate_value: float) -> None:
            with self._lock:
                trial = self._updatable(trial_id)
                if trial is not None:
                    with self._rows.con:
                        trial.intermediate_values[step] = self._rows.intermediate(trial_id, step, intermediate_value)
                    return
            super().set_trial_intermediate_value(trial_id, step, intermediate_value)

        def _attr(self, table: str, trial_id: int, key: str, value: Any) -> bool:
            with self._lock:
                trial = self._updatable(trial_id)
                if trial is None:
                    return False
                with self._rows.con:
                    stored = self._rows.attr(table, trial_id, key, value)
                (trial.user_attrs if table == "trial_user_attributes" else trial.system_attrs)[key] = stored
                return True

        def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
            if not self._attr("trial_user_attributes", trial_id, key, value):
                super().set_trial_user_attr(trial_id, key, value)

        def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
            if not self._attr("trial_system_attributes", trial_id, key, value):
                super().set_trial_system_attr(trial_id, key, value)

    backend = optuna.storages.RDBStorage(url)
    db = sqlite_file(url)
    if db is None:
        return SoleWriterStorage(backend)
    local = on_local_filesystem(db)
    if local:
        _fast_commits(backend.engine)
    rows = _Rows.open(db, local)
    return SoleWriterStorage(backend) if rows is None else PlainSqlStorage(backend, rows)
