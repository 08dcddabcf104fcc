"""Optuna's pruners by name, fed by periodic evaluations (``objective.eval_every``): which keyword
arguments a spec may give each, the warm-up rlsweep sets when the spec does not, and building one.
Optuna is imported only when a pruner is built or its signature read."""

from __future__ import annotations

import inspect
from typing import Any

CLASSES = {
    "none": "NopPruner",
    "median": "MedianPruner",
    "percentile": "PercentilePruner",
    "successive_halving": "SuccessiveHalvingPruner",
    "hyperband": "HyperbandPruner",
}
KINDS = tuple(CLASSES)
# Pruners that compare a trial with the finished ones at the same step, and so have a warm-up.
_WARM_UP = ("median", "percentile")


def _class(kind: str) -> Any:
    import optuna

    return getattr(optuna.pruners, CLASSES[kind])


def allowed(kind: str) -> list[str]:
    """The keyword arguments a spec may give ``kind``."""
    if kind == "none":
        return []
    params = inspect.signature(_class(kind).__init__).parameters
    return sorted(p for p in params if p != "self")


def settings(kind: str, options: dict[str, Any], total_timesteps: int) -> dict[str, Any]:
    """The keyword arguments the pruner is built with: the spec's, and rlsweep's warm-up where the
    spec sets none (as rl-zoo3 does: no pruning in the first third of training, and 5 trials
    finished before any is compared with them)."""
    kwargs = dict(options)
    if kind in _WARM_UP:
        kwargs.setdefault("n_startup_trials", 5)
        kwargs.setdefault("n_warmup_steps", total_timesteps // 3)
    return kwargs


def build(kind: str, options: dict[str, Any], total_timesteps: int) -> Any:
    """The pruner; raises TypeError/ValueError as Optuna does for a bad value."""
    return _class(kind)(**settings(kind, options, total_timesteps))


def problems(kind: str, options: dict[str, Any], total_timesteps: int, eval_every: int) -> list[tuple[str, str]]:
    """(key path, message) for each setting that cannot work: unknown options, bad values, and a
    warm-up that would let pruning end every trial, or none."""
    if kind == "none":
        return [(f"pruner.{k}", "the 'none' pruner takes no options") for k in options]
    from sweeps.errors import did_you_mean

    names = allowed(kind)
    unknown = [
        (f"pruner.{k}", f"not an option of the {kind} pruner{did_you_mean(k, names)} (allowed: {', '.join(names)})")
        for k in options
        if k not in names
    ]
    if unknown:
        return unknown
    out = []
    if eval_every <= 0:
        out.append(("objective.eval_every", f"the {kind} pruner needs periodic evaluations: set eval_every > 0"))
    elif eval_every >= total_timesteps:
        out.append(
            (
                "objective.eval_every",
                f"{eval_every} leaves no evaluation before the end of training ({total_timesteps} steps)",
            )
        )
    kwargs = settings(kind, options, total_timesteps)
    if kind in _WARM_UP:
        if kwargs["n_startup_trials"] < 1:
            out.append(("pruner.n_startup_trials", "at least 1: a trial must finish unpruned to compare others with"))
        if kwargs["n_warmup_steps"] >= total_timesteps:
            out.append(
                (
                    "pruner.n_warmup_steps",
                    f"{kwargs['n_warmup_steps']} is not below total_timesteps ({total_timesteps}): nothing would "
                    "ever be pruned",
                )
            )
    min_resource = kwargs.get("min_resource", "auto")
    if (
        kind in ("successive_halving", "hyperband")
        and isinstance(min_resource, int)
        and min_resource >= total_timesteps
    ):
        out.append(("pruner.min_resource", f"{min_resource} is not below total_timesteps ({total_timesteps})"))
    if not out:
        try:
            build(kind, options, total_timesteps)
        except (TypeError, ValueError) as exc:  # Optuna's own check of a value
            out.append(("pruner", f"the {kind} pruner refused {options}: {exc}"))
    return out
