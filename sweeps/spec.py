"""The sweep spec: a frozen pydantic model loaded from YAML, checked in full before anything runs.

``load(path)`` returns a :class:`SweepSpec` or raises :class:`~sweeps.errors.SpecError` listing
every problem with its key path. Nothing is written to disk while loading.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, field_validator

from stability.thresholds import DEFAULTS, ThresholdError, Thresholds
from sweeps import algos, envs, knobs, pruners, samplers, schedules, scoring
from sweeps import space as sp
from sweeps._yaml import YamlError, load_yaml
from sweeps.algos import ACTIVATIONS, CLASS_KWARGS, MANAGED, SCHEDULED, class_name_problem
from sweeps.errors import Issue, SpecError, did_you_mean, one_of

RESULTS_DIR = Path("results")
SQLITE = "sqlite:///"  # the one spelling of a local SQLite store's URL (Optuna's and MLflow's)


def sqlite_url(path: Path) -> str:
    """The URL of the SQLite file at ``path``, absolute: it names the same file from any cwd."""
    return f"{SQLITE}{path.resolve()}"


def sqlite_file(url: str) -> Path | None:
    """The file a ``sqlite:///`` URL names; None for any other store (a server, another database)."""
    return Path(url.removeprefix(SQLITE)) if url.startswith(SQLITE) else None


def alembic_revision(db: Path) -> str | None:
    """The schema revision alembic stamped in the SQLite store ``db`` (Optuna's and MLflow's both keep
    one); None where it cannot be read (no such table, not a database)."""
    import sqlite3
    from contextlib import closing

    try:
        with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=60.0)) as con:
            row = con.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def optuna_url(folder: Path) -> str:
    """The Optuna study of the sweep stored in ``folder``."""
    return sqlite_url(folder / "optuna.db")


ENV_PREFIX = "env.kwargs."  # space keys under this prefix go to the env's constructor
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)\s*$")
_UNIT_SECONDS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any) -> float:
    """Seconds from a positive number or a string such as ``"45s"``, ``"90m"``, ``"2h"``, ``"1d"``."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError("expected seconds or a duration such as '90m' or '2h'")
    if isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise ValueError("expected seconds or a duration such as '90m' or '2h' (units s, m, h, d)")
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    else:
        seconds = float(value)
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError("a time budget must be positive and finite")
    return seconds


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WrapperSpec(_Model):
    entry_point: str = Field(description="'package.module:callable' taking the env as first argument")
    kwargs: dict[str, Any] = {}


class EnvSpec(_Model):
    id: str = Field(description="a Gymnasium id such as 'CartPole-v1', or 'package.module:callable'")
    kwargs: dict[str, Any] = {}
    n_envs: PositiveInt = 1
    wrappers: list[str | WrapperSpec] = []

    @property
    def is_entry_point(self) -> bool:
        return ":" in self.id


class SamplerSpec(_Model):
    """Any of Optuna's samplers by name; other keys are the sampler's own keyword arguments
    (e.g. ``multivariate: true`` for tpe, ``restart_strategy: ipop`` for cmaes), checked against
    its signature when the spec is validated."""

    model_config = ConfigDict(extra="allow", frozen=True)
    kind: Literal["tpe", "random", "grid", "cmaes", "gp", "qmc", "nsgaii"] = "tpe"
    seed: int | None = 0
    n_startup_trials: PositiveInt = 5  # for the samplers that take it (tpe, cmaes, gp)

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class PrunerSpec(_Model):
    """Any of Optuna's pruners by name, fed by ``objective.eval_every``; other keys are the pruner's
    own keyword arguments (its warm-up among them), checked against its signature."""

    model_config = ConfigDict(extra="allow", frozen=True)
    kind: Literal["none", "median", "percentile", "successive_halving", "hyperband"] = "none"

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class ObjectiveSpec(_Model):
    eval_episodes: PositiveInt = 10
    # evaluate each seed every N env steps (0: only at the end) with the final evaluation's episodes;
    # the trial's aggregate of those is what a pruner judges
    eval_every: int = Field(0, ge=0)
    # a multi-objective study: {return: maximize, spread: minimize, ...} (see scoring.OBJECTIVE_METRICS)
    directions: dict[str, Literal["maximize", "minimize"]] | None = None

    @field_validator("directions")
    @classmethod
    def _known_metrics(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        unknown = [k for k in value if k not in scoring.OBJECTIVE_METRICS]
        if unknown:
            raise ValueError(f"{unknown[0]!r} is not one of {', '.join(scoring.OBJECTIVE_METRICS)}")
        if "return" not in value or len(value) < 2:
            raise ValueError("a multi-objective sweep has 'return' and at least one more metric")
        return value

    @property
    def names(self) -> list[str]:
        """The objective's values in the study's order: the return first."""
        return ["return"] + [k for k in self.directions or {} if k != "return"]

    @property
    def maximize(self) -> list[bool]:
        directions = self.directions or {"return": "maximize"}
        return [directions[n] == "maximize" for n in self.names]

    aggregate: str = "mean"  # see sweeps.scoring.AGGREGATES
    deterministic: bool = True
    eval_seed_offset: int = 1_000_000

    @field_validator("aggregate")
    @classmethod
    def _known_aggregate(cls, value: str) -> str:
        if scoring.aggregator(value) is None:
            raise ValueError(f"expected {scoring.AGGREGATES}")
        return value


class WarmStartSpec(_Model):
    """``warm_start: {from: OTHER_SWEEP, top: 5}``: a new sweep first runs the other sweep's ``top``
    best safe configs, and its sampler sees the other sweep's finished trials (their params that
    exist in this space, with their values)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    from_: str = Field(alias="from")
    top: int = Field(5, ge=0)


class StorageSpec(_Model):
    dir: str | None = None


class TrackingSpec(_Model):
    mlflow_uri: str | None = None
    experiment: str | None = None

    @field_validator("mlflow_uri")
    @classmethod
    def _no_credentials(cls, value: str | None) -> str | None:
        if value is not None and re.match(r"^[a-z+]+://[^/@]*@", value):
            raise ValueError(
                "holds credentials; a spec is copied into results and MLflow, so give them to MLflow "
                "through MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)"
            )
        return value


class RepairSpec(_Model):
    """``stability.repair``: after a trial fails, re-train it with the knob patches its findings carry
    (see :mod:`sweeps.repair`), inside the sweep's worker pool. Bounded: repair jobs never exceed the
    sweep's own jobs (trials x seeds), so a sweep's budget at most doubles."""

    auto: bool = False
    max_attempts: int = Field(2, ge=1, le=10)
    confirm: bool = True  # confirm a repair on fresh seeds (as many as the trial had)


class StabilitySpec(_Model):
    """Failure classification. ``stop_on`` ends a trial as soon as its verdict is one of these;
    ``stop_siblings`` also stops the trial's other seeds already running (else they run to their
    end, each reaching its own verdict); queued seeds never start either way."""

    enabled: bool = True
    stop_on: list[str] = []
    stop_siblings: bool = True
    thresholds: str | None = None  # a YAML file overriding conf/stability.yaml's defaults
    # info keys by which the env says it replaced the agent's action (None: the built-in list)
    override_keys: list[str] | None = None
    # the episode return at which the env counts as learnt (None: the env's registered
    # reward_threshold, where it has one); stuck_value_loss is then a warning on a run that got
    # learned_fraction of the way to it (see stability.references)
    reference_return: float | None = Field(None, allow_inf_nan=False)
    repair: RepairSpec = RepairSpec()

    @field_validator("reference_return", mode="before")
    @classmethod
    def _a_number(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise ValueError("give the episode return as a number, not true/false")
        return v


class ResourcesSpec(_Model):
    """What one trial seed holds while it runs (Ray backend): CPUs and a share of a GPU."""

    cpu: float = Field(1.0, gt=0, le=1024)
    gpu: float = Field(0.0, ge=0, le=64)

    @field_validator("gpu")
    @classmethod
    def _gpu_ok(cls, v: float) -> float:
        if v > 1 and v != int(v):
            raise ValueError("a GPU share above 1 must be a whole number of GPUs")
        return v


class BackendSpec(_Model):
    """Where trials run. ``local``: worker processes on this machine. ``ray``: Ray Tune, on a Ray
    instance started for the sweep (``address: null``) or an existing cluster."""

    kind: Literal["local", "ray"] = "local"
    address: str | None = None
    resources_per_trial: ResourcesSpec = ResourcesSpec()
    max_concurrent: PositiveInt | None = None
    max_failures: int = Field(0, ge=0, le=100)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # local: the GPUs its workers share (CUDA ids as the driver sees them), jobs_per_gpu workers each
    gpus: list[Annotated[int, Field(ge=0)]] | None = None
    jobs_per_gpu: int = Field(1, ge=1, le=64)
    # local, with gpus: a CUDA MPS daemon for the workers (auto: when two share a GPU, if it can start)
    mps: Literal["auto", "on", "off"] = "auto"

    @field_validator("address")
    @classmethod
    def _address_ok(cls, v: str | None) -> str | None:
        if v is not None and not (v == "auto" or v.startswith("ray://") or re.match(r"^[\w.-]+:\d+$", v)):
            raise ValueError(
                "expected null (start a local Ray), 'auto' (the cluster this machine belongs to), "
                "'ray://HOST:PORT' or 'HOST:PORT'"
            )
        return v


class SweepSpec(_Model):
    name: str
    env: EnvSpec
    algo: str
    policy: str = "MlpPolicy"
    total_timesteps: PositiveInt
    hyperparams: dict[str, Any] = {}
    space: dict[str, Any] = {}
    seeds: PositiveInt | list[int] = 1
    trials: PositiveInt | None = None
    time_budget: float | None = None  # seconds (or "90m", "2h"): no trial is opened after it
    workers: PositiveInt | None = None
    sampler: SamplerSpec = SamplerSpec()
    objective: ObjectiveSpec = ObjectiveSpec()
    pruner: PrunerSpec = PrunerSpec()
    warm_start: WarmStartSpec | None = None
    storage: StorageSpec = StorageSpec()
    tracking: TrackingSpec = TrackingSpec()
    stability: StabilitySpec = StabilitySpec()
    backend: BackendSpec = BackendSpec()

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("use letters, digits, '_', '-', '.' (at most 100), starting with a letter or digit")
        return v

    @field_validator("time_budget", mode="before")
    @classmethod
    def _budget_ok(cls, v: Any) -> float | None:
        return None if v is None else parse_duration(v)

    @field_validator("seeds")
    @classmethod
    def _seeds_ok(cls, v: int | list[int]) -> int | list[int]:
        if isinstance(v, list) and (not v or len(set(v)) != len(v) or min(v) < 0):
            raise ValueError("a list of seeds must be non-empty, distinct and >= 0")
        return v

    # --- resolved views -------------------------------------------------------------------
    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)

    @property
    def dims(self) -> dict[str, sp.Dist]:
        return sp.parse_space(self.space)[0]

    @property
    def n_trials(self) -> int:
        if self.trials is not None:
            return self.trials
        return sp.grid_size(self.dims) if self.sampler.kind == "grid" else 10

    @property
    def storage_dir(self) -> Path:
        return Path(self.storage.dir) if self.storage.dir else RESULTS_DIR / self.name

    @property
    def optuna_url(self) -> str:
        return optuna_url(self.storage_dir)

    @property
    def mlflow_uri(self) -> str:
        return self.tracking.mlflow_uri or sqlite_url(RESULTS_DIR / "mlflow.db")

    @property
    def experiment(self) -> str:
        return self.tracking.experiment or self.name

    def resolved(self) -> dict[str, Any]:
        """The spec with every default filled in, as plain data (logged as an artifact)."""
        data = self.model_dump(mode="json", by_alias=True)
        data.update(seeds=self.seed_list, trials=self.n_trials)
        data["storage"] = {"dir": str(self.storage_dir), "optuna": self.optuna_url}
        data["tracking"] = {"mlflow_uri": self.mlflow_uri, "experiment": self.experiment}
        data["stability"]["thresholds"] = self.stability_thresholds()
        return data

    def stability_thresholds(self) -> dict[str, dict[str, Any]]:
        """The detector thresholds in force: defaults with the spec's file applied."""
        if self.stability.thresholds is None:
            return Thresholds().values
        return Thresholds.load(self.stability.thresholds).values


MAX_SPEC_BYTES = 1_000_000


def load(path: str | Path) -> SweepSpec:
    """Read, parse and fully check a sweep file. Raises :class:`SpecError`; writes nothing."""
    path = Path(path)
    source = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_SPEC_BYTES:
            raise SpecError(
                source,
                [
                    Issue(
                        "",
                        f"too large ({size / 1e6:.1f} MB); a sweep spec is a few KB, at most "
                        f"{MAX_SPEC_BYTES // 1_000_000} MB",
                    )
                ],
            )
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise SpecError(source, [Issue("", "file not found")]) from None
    except IsADirectoryError:
        raise SpecError(source, [Issue("", "is a directory, expected a YAML file")]) from None
    except UnicodeDecodeError as exc:
        raise SpecError(source, [Issue("", f"not UTF-8 text (byte {exc.start})")]) from None
    except OSError as exc:
        raise SpecError(source, [Issue("", f"cannot read: {exc.strerror}")]) from None
    try:
        raw = load_yaml(text)
    except YamlError as exc:
        raise SpecError(source, [Issue("", str(exc))]) from None
    return from_dict(raw, source=source, default_name=path.stem)


def from_dict(raw: Any, source: str = "<spec>", default_name: str | None = None) -> SweepSpec:
    if raw is None:
        raise SpecError(
            source, [Issue("", "the file is empty; a sweep needs at least name, env, algo and total_timesteps")]
        )
    if not isinstance(raw, dict):
        raise SpecError(source, [Issue("", f"expected a mapping of keys, got {type(raw).__name__}")])
    if default_name and "name" not in raw and _NAME.match(default_name):
        raw = {"name": default_name, **raw}
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(source, [_pydantic_issue(e) for e in exc.errors()]) from None
    issues = _semantic_issues(spec)
    if issues:
        raise SpecError(source, issues)
    return spec


# --- messages for structural errors ----------------------------------------------------------
def _model_at(loc: tuple) -> type[BaseModel] | None:
    model: Any = SweepSpec
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        ann = getattr(field, "annotation", None)
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return None
        model = ann
    return model


_UNION_TAGS = ("str", "WrapperSpec", "int", "list[int]")


def _pydantic_issue(err: Any) -> Issue:  # pydantic's ErrorDetails
    # pydantic inserts the union member's type name after a field ('seeds', 'list[int]', 0); a
    # user's own top-level key is never one of those, whatever it is called
    raw_loc = tuple(err["loc"])
    loc = raw_loc[:1] + tuple(p for p in raw_loc[1:] if not (isinstance(p, str) and p in _UNION_TAGS))
    path = ".".join(str(p) for p in loc)
    kind, got = err["type"], err.get("input")
    if isinstance(got, str):  # credentials in a URI are never echoed (errors end up in logs)
        got = re.sub(r"^([a-z+]+://)[^/@]*@", r"\1***@", got)
    if kind == "extra_forbidden":
        owner = _model_at(loc[:-1])
        allowed = sorted(owner.model_fields) if owner else []
        return Issue(path, f"unknown key; allowed: {', '.join(allowed)}{did_you_mean(loc[-1], allowed)}")
    if kind == "missing":
        return Issue(path, "required key is missing")
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", err.get("ctx", {}).get("expected", ""))
        return Issue(path, one_of(got, choices))
    msg = err["msg"][0].lower() + err["msg"][1:]
    if msg.startswith("value error, "):
        msg = msg[len("value error, ") :]
    return Issue(path, f"{msg}, got {got!r}")


# --- checks that need more than types -------------------------------------------------------
def _semantic_issues(spec: SweepSpec) -> list[Issue]:
    issues: list[Issue] = []
    dims, space_issues = sp.parse_space(spec.space)
    issues += space_issues
    issues += envs.check(spec.env, "env")
    if spec.algo not in algos.names():
        issues.append(Issue("algo", one_of(spec.algo, algos.names())))
        return issues
    try:
        allowed = algos.constructor_params(spec.algo)
        policies = algos.policy_names(spec.algo)
    except ImportError as exc:
        pkg = algos.info(spec.algo).package
        return issues + [Issue("algo", f"'{spec.algo}' needs the package {pkg}, which failed to import ({exc})")]
    if policies and spec.policy not in policies:
        issues.append(Issue("policy", f"{one_of(spec.policy, policies)} (the policies of {spec.algo})"))
    fixed = sp.flatten(spec.hyperparams) if spec.hyperparams else {}
    for where, keys in (("hyperparams", fixed), ("space", dims)):
        for key in keys:
            if where == "space" and key.startswith(ENV_PREFIX) and len(key) > len(ENV_PREFIX):
                continue  # env constructor kwargs may be swept too (curriculum phase, reward shaping...)
            if where == "space" and key == PRESET:
                issues += _preset_issues(spec.algo, dims[key], dims, allowed)
                continue
            if knobs.is_knob(key):
                values = [fixed[key]] if where == "hyperparams" else knobs.candidates(dims[key])
                issues += knobs.check(spec.algo, where, key, values)
            else:
                issues += _check_hyperparam(spec.algo, where, key, allowed)
    if not issues:
        issues += knobs.combination_issues(spec.algo, spec.policy, spec.env.model_dump(), fixed, dims)
    issues += _value_issues(fixed, dims)
    for key in sorted(set(fixed) & set(dims)):
        issues.append(Issue(f"space.{key}", "also set in 'hyperparams'; set a hyperparameter in one place"))
    issues += _sampler_issues(spec, dims)
    issues += [
        Issue(path, message)
        for path, message in pruners.problems(
            spec.pruner.kind, spec.pruner.options, spec.total_timesteps, spec.objective.eval_every
        )
    ]
    issues += _stability_issues(spec)
    issues += _backend_issues(spec.backend)
    if spec.objective.directions is not None:
        if spec.pruner.kind != "none":
            issues.append(Issue("pruner", "Optuna prunes single-objective studies only; drop objective.directions"))
        if spec.sampler.kind == "cmaes":
            issues.append(Issue("sampler.kind", "cmaes optimises one objective; use tpe, nsgaii, random, gp or qmc"))
    if spec.warm_start is not None and spec.sampler.kind == "grid":
        issues.append(Issue("warm_start", "the grid sampler runs its own points; use tpe, random, cmaes, gp, ..."))
    if spec.warm_start is not None and spec.warm_start.from_ == spec.name:
        issues.append(Issue("warm_start.from", "a sweep cannot warm-start from itself (it resumes on its own)"))
    return issues


def ray_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None and importlib.util.find_spec("ray.tune") is not None


def _backend_issues(backend: BackendSpec) -> list[Issue]:
    """Settings that only the Ray backend can honour, asked of the local one; and Ray itself,
    an optional extra, asked for where it is not installed."""
    if backend.kind == "ray":
        set_here = [
            key
            for key, given in (
                ("gpus", backend.gpus is not None),
                ("jobs_per_gpu", backend.jobs_per_gpu != 1),
                ("mps", backend.mps != "auto"),
            )
            if given
        ]
        if set_here:
            ray_shares = "applies to kind 'local' only; Ray shares GPUs by resources_per_trial.gpu"
            return [Issue(f"backend.{set_here[0]}", ray_shares)]
        if not ray_installed():
            return [
                Issue(
                    "backend.kind",
                    "'ray' needs Ray, which is not installed: pip install 'rlsweep[ray]' (or use kind 'local')",
                )
            ]
        return []
    issues = []
    if backend.gpus is not None and len(set(backend.gpus)) != len(backend.gpus):
        issues.append(Issue("backend.gpus", f"each GPU once, got {backend.gpus}; use jobs_per_gpu to share one"))
    if backend.gpus == []:
        issues.append(Issue("backend.gpus", "an empty list; name at least one GPU id, or drop the key"))
    if backend.gpus is None and backend.jobs_per_gpu != 1:
        issues.append(Issue("backend.jobs_per_gpu", "applies with backend.gpus (the GPUs to share); set both"))
    if backend.gpus is None and backend.mps == "on":
        issues.append(Issue("backend.mps", "'on' applies with backend.gpus (the GPUs its workers share); set both"))
    if backend.gpus and backend.device == "cpu":
        issues.append(Issue("backend.device", "'cpu' with backend.gpus: the GPUs would sit idle; use auto or cuda"))
    if backend.address is not None:
        issues.append(Issue("backend.address", "applies to kind 'ray' only; set 'kind: ray' or drop it"))
    if backend.resources_per_trial.gpu > 0:
        issues.append(
            Issue(
                "backend.resources_per_trial.gpu",
                "GPU shares are scheduled by the ray backend; set 'kind: ray' (local workers use 'device' instead)",
            )
        )
    return issues


# A space key whose choices are whole sets of hyperparameters (replaying known configs, e.g. the
# trials of another tool's study, or published tuned settings); each set is applied over 'hyperparams'.
PRESET = "preset"


def _preset_issues(algo: str, dist: sp.Dist, dims: dict[str, sp.Dist], allowed: tuple[str, ...]) -> list[Issue]:
    if dist.kind != "choice" or not all(isinstance(v, dict) and v for v in dist.values):
        return [
            Issue(
                f"space.{PRESET}",
                "expected {type: choice, values: [...]} whose values are non-empty mappings of hyperparameters",
            )
        ]
    issues: list[Issue] = []
    for i, preset in enumerate(dist.values):
        where = f"space.{PRESET}.values.{i}"
        for key, value in sp.flatten(preset).items():
            if key in dims:
                issues.append(Issue(f"{where}.{key}", f"also swept as space.{key}; set it in one place"))
            elif knobs.is_knob(key):
                issues += knobs.check(algo, where, key, [value])
            else:
                issues += _check_hyperparam(algo, where, key, allowed)
    return issues


def _stability_issues(spec: SweepSpec) -> list[Issue]:
    issues = []
    for i, name in enumerate(spec.stability.stop_on):
        if name not in DEFAULTS:
            issues.append(Issue(f"stability.stop_on.{i}", one_of(name, list(DEFAULTS))))
    if spec.stability.thresholds is not None:
        try:
            Thresholds.load(spec.stability.thresholds)
        except ThresholdError as exc:
            issues.append(Issue("stability.thresholds", str(exc).replace("\n", ";")))
    return issues


def _check_hyperparam(algo: str, where: str, key: str, allowed: tuple[str, ...]) -> list[Issue]:
    top = key.split(".")[0]
    if top in MANAGED:
        extra = f"; to sweep env arguments use '{where}.{ENV_PREFIX}NAME'" if top == "env" else ""
        return [Issue(f"{where}.{top}", f"not a hyperparameter rlsweep lets you set: {MANAGED[top]}{extra}")]
    if top not in allowed:
        return [
            Issue(
                f"{where}.{top}",
                f"{algo} has no hyperparameter '{top}'{did_you_mean(top, allowed)} (allowed: {', '.join(allowed)})",
            )
        ]
    return []


def _value_issues(fixed: dict[str, Any], dims: dict[str, sp.Dist]) -> list[Issue]:
    """Values that must be names from a fixed list (activation functions, optimizer classes, ...)."""
    issues = []
    for name in CLASS_KWARGS:
        key = f"policy_kwargs.{name}"
        candidates = [("hyperparams", fixed[key])] if key in fixed else []
        if key in dims:
            d = dims[key]
            candidates += [("space", v) for v in (d.values if d.kind == "choice" else (d.value,))]
        for where, value in candidates:
            if name == "activation_fn" and value not in ACTIVATIONS:
                issues.append(Issue(f"{where}.{key}", one_of(value, ACTIVATIONS)))
            elif name != "activation_fn" and (problem := class_name_problem(name, value)):
                issues.append(Issue(f"{where}.{key}", problem))
    for key in SCHEDULED:
        values = [("hyperparams", fixed[key])] if key in fixed else []
        if key in dims and dims[key].kind == "choice":
            values += [("space", v) for v in dims[key].values]
        for where, value in values:
            if isinstance(value, str) and schedules.parse(value) is None:
                issues.append(
                    Issue(f"{where}.{key}", f"expected a number or 'lin_X' (linear from X to 0), got {value!r}")
                )
    return issues


def _sampler_issues(spec: SweepSpec, dims: dict[str, sp.Dist]) -> list[Issue]:
    kind, options = spec.sampler.kind, spec.sampler.options
    if not options:  # Optuna's own checks need it imported: only for options (validate stays light)
        return _grid_issues(spec, dims) if kind == "grid" else []
    allowed = samplers.allowed(kind)
    unknown = [k for k in options if k not in allowed]
    if unknown:
        return [
            Issue(
                f"sampler.{k}",
                f"not an option of the {kind} sampler{did_you_mean(k, allowed)} (allowed: seed, {', '.join(allowed)})",
            )
            for k in unknown
        ]
    issues = _grid_issues(spec, dims) if kind == "grid" else []
    if not issues:
        try:
            samplers.build(kind, dims, spec.sampler.seed, spec.sampler.n_startup_trials, options)
        except (TypeError, ValueError) as exc:  # Optuna's own check of a value
            issues.append(Issue("sampler", f"the {kind} sampler refused {options}: {exc}"))
    return issues


def _grid_issues(spec: SweepSpec, dims: dict[str, sp.Dist]) -> list[Issue]:
    issues = []
    for name, d in dims.items():
        if d.kind in ("uniform", "loguniform") or (d.kind == "int" and d.log):
            issues.append(
                Issue(
                    f"space.{name}",
                    f"the grid sampler needs 'choice' or linear 'int' values, "
                    f"not '{d.kind}'{' (log)' if d.log else ''}",
                )
            )
    if issues:
        return issues
    size = sp.grid_size(dims)
    if spec.trials is not None and spec.trials > size:
        issues.append(Issue("trials", f"the grid has {size} points, so at most {size} trials, got {spec.trials}"))
    return issues
