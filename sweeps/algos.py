"""The algorithm registry: a name in a spec -> an SB3 / sb3-contrib class, imported lazily.

Later capabilities add entries with :func:`register`; nothing else in rlsweep names an
algorithm class directly.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

# Arguments rlsweep sets itself: a spec may not set them as hyperparameters.
MANAGED = {
    "policy": "set it with the top-level 'policy' key",
    "env": "set it with the top-level 'env' key",
    "seed": "seeds come from the top-level 'seeds' key",
    "verbose": "rlsweep shows progress itself",
    "tensorboard_log": "curves go to MLflow",
    "device": "rlsweep places trials on devices",
    "_init_setup_model": "internal to stable-baselines3",
}

ACTIVATIONS = {"tanh": "Tanh", "relu": "ReLU", "elu": "ELU", "leaky_relu": "LeakyReLU", "gelu": "GELU",
               "silu": "SiLU"}


@dataclass(frozen=True)
class AlgoInfo:
    name: str
    module: str
    class_name: str
    package: str  # the pip distribution that provides it, for error messages


_REGISTRY: dict[str, AlgoInfo] = {}


def register(info: AlgoInfo) -> None:
    _REGISTRY[info.name] = info


register(AlgoInfo("PPO", "stable_baselines3", "PPO", "stable-baselines3"))
register(AlgoInfo("A2C", "stable_baselines3", "A2C", "stable-baselines3"))
register(AlgoInfo("RecurrentPPO", "sb3_contrib", "RecurrentPPO", "sb3-contrib"))


def names() -> list[str]:
    return list(_REGISTRY)


def info(name: str) -> AlgoInfo:
    return _REGISTRY[name]


@lru_cache(maxsize=None)
def load_class(name: str) -> type:
    entry = _REGISTRY[name]
    return getattr(importlib.import_module(entry.module), entry.class_name)


@lru_cache(maxsize=None)
def constructor_params(name: str) -> tuple[str, ...]:
    """The keyword arguments of the algorithm's constructor that a spec may set."""
    sig = inspect.signature(load_class(name).__init__)
    return tuple(p for p in sig.parameters if p not in ("self", *MANAGED)
                 and sig.parameters[p].kind is not inspect.Parameter.VAR_KEYWORD)


def policy_names(name: str) -> tuple[str, ...]:
    return tuple(getattr(load_class(name), "policy_aliases", {}))


def resolve_kwargs(hyperparams: dict[str, Any]) -> dict[str, Any]:
    """Turn YAML-friendly values into what SB3 expects (``activation_fn: tanh`` -> ``nn.Tanh``)."""
    kwargs = dict(hyperparams)
    policy_kwargs = dict(kwargs.get("policy_kwargs") or {})
    act = policy_kwargs.get("activation_fn")
    if isinstance(act, str):
        import torch.nn as nn

        policy_kwargs["activation_fn"] = getattr(nn, ACTIVATIONS[act])
    if policy_kwargs:
        kwargs["policy_kwargs"] = policy_kwargs
    return kwargs
