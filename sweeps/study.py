"""The Optuna side of a sweep: the on-disk study, its sampler, and resuming after a crash.

Trial user attributes written here (read by ``status`` and later by export/report):
``rlsweep.outcome`` (complete | unstable | crashed | interrupted), ``rlsweep.params`` (decoded
values as JSON), ``rlsweep.returns`` ({seed: mean return}), ``rlsweep.error`` (type: message), and
for repairs (:mod:`sweeps.repair`) those of :mod:`stability.keys`. A repair attempt is a trial of its own, added
finished with its real params; it never counts towards ``trials``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from stability import keys
from sweeps import pruners, results, samplers
from sweeps import space as sp
from sweeps.errors import UsageError
from sweeps.results import record
from sweeps.spec import SweepSpec
from sweeps.study_storage import sole_writer_storage

# Keys that may change between runs of the same sweep without making it a different sweep.
_MUTABLE = ("trials", "workers", "tracking")


# Spec keys added after sweeps had been run, with their defaults.
_ADDED_LATER: tuple[tuple[tuple[str, ...], Any], ...] = (
    (("pruner",), {"kind": "none"}),
    (("objective", "eval_every"), 0),
    (("objective", "directions"), None),
    (("warm_start",), None),
    (("backend", "gpus"), None),
    (("backend", "jobs_per_gpu"), 1),
    (("backend", "mps"), "auto"),
)


def fingerprint(spec: SweepSpec) -> str:
    data = {k: v for k, v in spec.resolved().items() if k not in _MUTABLE}
    data["stability"].pop("repair", None)  # how failures are repaired does not change what was sampled
    for path, default in _ADDED_LATER:  # at their defaults, they leave earlier sweeps' fingerprints as they were
        *parents, key = path
        section = data
        for name in parents:
            section = section[name]
        if section.get(key, default) == default:
            section.pop(key, None)
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def make_sampler(spec: SweepSpec) -> Any:
    return samplers.build(
        spec.sampler.kind, spec.dims, spec.sampler.seed, spec.sampler.n_startup_trials, spec.sampler.options
    )


def open_study(spec: SweepSpec) -> Any:
    """Create or load the study; refuse one made from a different spec under the same name. Only
    for the sweep's one driver: see :func:`sole_writer_storage`."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = sole_writer_storage(spec.optuna_url)
    study = optuna.create_study(
        study_name=spec.name,
        storage=storage,
        sampler=make_sampler(spec),
        pruner=pruners.build(spec.pruner.kind, spec.pruner.options, spec.total_timesteps),
        directions=["maximize" if up else "minimize" for up in spec.objective.maximize],
        load_if_exists=True,
    )
    mark = fingerprint(spec)
    stored = study.user_attrs.get(keys.FINGERPRINT)
    if stored is None:
        study.set_user_attr(keys.FINGERPRINT, mark)
    elif stored != mark:
        raise UsageError(
            f"{spec.storage_dir} holds the sweep '{spec.name}' run from a different spec (only trials, "
            f"workers and tracking may change between runs). Give the sweep a new name, or delete "
            f"{spec.storage_dir} to start over."
        )
    return study


def requeue_interrupted(study: Any) -> list[int]:
    """Trials left RUNNING by a driver that died: mark them failed/interrupted, queue their params again."""
    from optuna.trial import TrialState

    numbers = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study._storage.set_trial_user_attr(t._trial_id, keys.OUTCOME, "interrupted")
        study.tell(t.number, state=TrialState.FAIL)
        if t.params:
            study.enqueue_trial(t.params, skip_if_exists=False)
        numbers.append(t.number)
    return numbers


def counted(study: Any) -> list[Any]:
    """Finished trials that count towards ``trials`` (interrupted ones are rerun, so they don't)."""
    from optuna.trial import TrialState

    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return [
        t
        for t in study.get_trials(deepcopy=False, states=done)
        if (r := record(t)).outcome in keys.OUTCOMES and r.repair_of is None
    ]


def outcomes(study: Any) -> dict[int, dict[str, Any]]:
    """Per finished trial what MLflow must agree with: outcome, objective, per-seed returns, error."""
    out = {}
    for t in study.get_trials(deepcopy=False):
        if t.state.is_finished() and (r := record(t)).repair_of is None:  # repairs have runs of their own
            out[r.number] = {"outcome": r.outcome, "value": r.value, "returns": r.returns, "error": r.error}
    return out


@dataclass
class WarmStart:
    """What ``warm_start`` gave a new sweep."""

    source: str
    enqueued: int  # the source's best safe configs, run first
    seen: int  # the source's finished trials added for the sampler to learn from
    dropped: list[str]  # the source's params this space has not (or not with that value)


def warm_start(study: Any, spec: SweepSpec) -> WarmStart | None:
    """Seed a new sweep's study from ``spec.warm_start.from``: its finished trials as finished
    trials of this study (outcome ``warm_start``: never counted, exported or tracked; the sampler
    learns from them), and its ``top`` best safe configs queued to run first. A study that already
    has trials was warm-started when it began, or is resuming: it is left as it is."""
    import optuna

    settings = spec.warm_start
    if settings is None or study.get_trials(deepcopy=False):
        return None
    source = results.load(settings.from_)
    dists = sp.to_optuna(spec.dims)
    dropped: set[str] = set()

    source_dims = source.spec.dims

    def fit(decoded: dict[str, Any]) -> dict[str, Any]:
        """A source trial's sampled hyperparameters, as this space's Optuna values where it holds them."""
        sampled = {k: v for k, v in decoded.items() if k in source_dims and not source_dims[k].is_fixed}
        kept = {k: v for k, v in sp.encode(spec.dims, sampled).items() if sp.holds(dists[k], v)}
        dropped.update(set(sampled) - set(kept))
        return kept

    by_number = {t.number: t for t in source.study.get_trials(deepcopy=False)}
    seen = 0
    same = source.spec.objective.names == spec.objective.names  # else its values mean other things
    for r in source.finished if same else []:
        trial = by_number[r.number]
        params = fit(r.params)
        if r.outcome != "complete" or not trial.values or not params:
            continue
        attrs = {keys.OUTCOME: "warm_start", keys.WARM_START: settings.from_, keys.PARAMS: r.params}
        study.add_trial(
            optuna.trial.create_trial(
                params=params, distributions={k: dists[k] for k in params}, values=trial.values, user_attrs=attrs
            )
        )
        seen += 1
    enqueued = 0
    for r in source.safe()[: settings.top]:
        params = fit(r.params)
        if params:
            study.enqueue_trial(params, user_attrs={keys.WARM_START: f"{settings.from_} trial {r.number}"})
            enqueued += 1
    return WarmStart(settings.from_, enqueued, seen, sorted(dropped))
