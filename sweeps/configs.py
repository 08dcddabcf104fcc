"""What a trial's jobs are made of: one :class:`~sweeps.trial.TrialConfig` per seed, built from
the spec, the sampled values and a repair's patch, and the stability settings a worker needs.
The driver, ``export --confirm-seeds`` and the benchmarks build jobs here."""

from __future__ import annotations

import copy
from typing import Any

from sweeps import repair as rp
from sweeps import space as sp
from sweeps.spec import ENV_PREFIX, PRESET, SweepSpec
from sweeps.trial import TrialConfig


def stability_settings(spec: SweepSpec) -> dict[str, Any]:
    """What a worker's StabilityCallback needs: plain data, thresholds resolved."""
    return {
        "enabled": spec.stability.enabled,
        "stop_on": list(spec.stability.stop_on),
        "thresholds": spec.stability_thresholds(),
        "override_keys": spec.stability.override_keys,
        "reference_return": spec.stability.reference_return,
    }


def trial_configs(
    spec: SweepSpec,
    number: int,
    params: dict[str, Any],
    seeds: list[int],
    stability: dict[str, Any],
    patch: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], list[TrialConfig]]:
    """One job per seed for a configuration: the spec's hyperparameters and env with ``params``
    (sampled values, by dotted name) set, then a repair's knob ``patch`` applied. Also returns
    every hyperparameter, flattened, for logging."""
    hyperparams = copy.deepcopy(spec.hyperparams)
    env = spec.env.model_dump()
    for name, value in params.items():
        if name.startswith(ENV_PREFIX):
            sp.set_nested(env, name[len("env.") :], value)
        elif name == PRESET:  # a whole set of hyperparameters, applied over the fixed ones
            for key, item in sp.flatten(value).items():
                sp.set_nested(hyperparams, key, item)
        else:
            sp.set_nested(hyperparams, name, value)
    if patch:
        hyperparams = rp.apply_patch(hyperparams, patch)
    logged = sp.flatten(hyperparams) | {k: v for k, v in params.items() if k.startswith(ENV_PREFIX)}
    configs = [
        TrialConfig(
            sweep=spec.name,
            trial=number,
            seed=seed,
            algo=spec.algo,
            policy=spec.policy,
            env=env,
            hyperparams=hyperparams,
            total_timesteps=spec.total_timesteps,
            eval_episodes=spec.objective.eval_episodes,
            eval_every=spec.objective.eval_every,
            eval_seed=spec.objective.eval_seed_offset + seed,
            deterministic=spec.objective.deterministic,
            stability=stability,
            device=spec.backend.device,
        )
        for seed in seeds
    ]
    return logged, configs
