"""Optuna's samplers by name: which keyword arguments a spec may give each, how a space that a
sampler cannot model is handled, and building one. Imports Optuna only when a sampler is built
or its signature read (a heavy optional import for ``rlsweep validate``)."""

from __future__ import annotations

import inspect
from typing import Any

from sweeps import space as sp

# name -> Optuna class
CLASSES = {
    "tpe": "TPESampler",
    "random": "RandomSampler",
    "grid": "GridSampler",
    "cmaes": "CmaEsSampler",
    "gp": "GPSampler",
    "qmc": "QMCSampler",
    "nsgaii": "NSGAIISampler",
}
KINDS = tuple(CLASSES)
# Set by rlsweep itself (seed, n_startup_trials, the grid's points), or not expressible in YAML
# (callables, sampler objects, trials).
_NOT_FROM_SPEC = {
    "seed",
    "n_startup_trials",
    "search_space",
    "constraints_func",
    "independent_sampler",
    "weights",
    "mutation",
    "crossover",
    "elite_population_selection_strategy",
    "child_generation_strategy",
    "after_trial_strategy",
    "source_trials",
}
# Samplers that model numbers only: what they do with a 'choice' dimension.
_CATEGORICAL_FALLBACK = {
    "cmaes": "CMA-ES",
    "qmc": "quasi-Monte Carlo",
}


def _class(kind: str) -> Any:
    import optuna

    return getattr(optuna.samplers, CLASSES[kind])


def allowed(kind: str) -> list[str]:
    """The keyword arguments a spec may give ``kind`` (besides ``seed`` and ``n_startup_trials``)."""
    params = inspect.signature(_class(kind).__init__).parameters
    return sorted(p for p in params if p not in _NOT_FROM_SPEC and p != "self")


def takes(kind: str, name: str) -> bool:
    return name in inspect.signature(_class(kind).__init__).parameters


def fallback(kind: str, dims: dict[str, sp.Dist]) -> str | None:
    """What ``kind`` does with the dimensions it cannot model, in words; None when it models all."""
    if kind not in _CATEGORICAL_FALLBACK:
        return None
    names = [n for n, d in dims.items() if d.kind == "choice"]
    if not names:
        return None
    return (
        f"the {_CATEGORICAL_FALLBACK[kind]} sampler cannot model 'choice' dimensions ({', '.join(names)}): "
        "Optuna samples them with its independent sampler (random sampling), and models the rest"
    )


def build(kind: str, dims: dict[str, sp.Dist], seed: int | None, n_startup_trials: int, options: dict[str, Any]) -> Any:
    """The sampler; raises TypeError/ValueError as Optuna does for a bad option value."""
    import optuna

    kwargs = dict(options)
    if takes(kind, "n_startup_trials"):
        kwargs.setdefault("n_startup_trials", n_startup_trials)
    if kind == "grid":

        class AskTellGridSampler(optuna.samplers.GridSampler):
            """Optuna's grid sampler calls ``study.stop()`` once the grid is used up, which raises
            outside ``study.optimize``; the driver counts trials itself, so that stop is dropped."""

            def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
                return None

        return AskTellGridSampler(sp.grid_of(dims), seed=seed, **kwargs)
    if kind in _CATEGORICAL_FALLBACK:
        kwargs.setdefault("warn_independent_sampling", False)  # said once, at validation (see fallback)
    return _class(kind)(seed=seed, **kwargs)
