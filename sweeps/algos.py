"""The algorithm registry: a name in a spec -> an SB3 / sb3-contrib class, imported lazily.

Later capabilities add entries with :func:`register`; nothing else in rlsweep names an
algorithm class directly.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, cast

from sweeps import schedules

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

ACTIVATIONS = {"tanh": "Tanh", "relu": "ReLU", "elu": "ELU", "leaky_relu": "LeakyReLU", "gelu": "GELU", "silu": "SiLU"}
# torch.optim classes a spec may name in policy_kwargs.optimizer_class (either spelling)
OPTIMIZER_CLASSES = {
    "adam": "Adam",
    "adamw": "AdamW",
    "rmsprop": "RMSprop",
    "sgd": "SGD",
    "adagrad": "Adagrad",
    "adamax": "Adamax",
    "nadam": "NAdam",
    "radam": "RAdam",
}
# policy_kwargs whose value SB3 needs as a class: the names a spec may write for each ("module:Class" for
# classes of the user's own code)
CLASS_KWARGS = {
    "activation_fn": ACTIVATIONS,
    "optimizer_class": OPTIMIZER_CLASSES,
    "features_extractor_class": {},
    "lstm_class": {},
}


def class_name_problem(key: str, value: object) -> str | None:
    """Why ``policy_kwargs.KEY: value`` cannot be turned into the class SB3 needs, or None."""
    names = CLASS_KWARGS[key]
    if not isinstance(value, str):
        return f"expected a name, got {value!r}"
    if value.lower() in names or value in names.values() or ":" in value:
        return None
    allowed = ", ".join(names) if names else "none built in"
    return f"{value!r} is not a class rlsweep can build; allowed: {allowed}, or 'package.module:Class'"


def resolve_class(key: str, value: str) -> type:
    names = CLASS_KWARGS[key]
    if ":" in value:
        from sweeps.envs import import_entry_point

        return cast(type, import_entry_point(value))
    module = __import__("torch.nn" if key == "activation_fn" else "torch.optim", fromlist=["_"])
    return getattr(module, names.get(value.lower(), value))


@dataclass(frozen=True)
class AlgoInfo:
    name: str
    module: str
    class_name: str
    package: str  # the pip distribution that provides it, for error messages
    source: str = ""  # file defining the class, relative to the top-level package (read, not imported)
    on_policy: bool = True


_REGISTRY: dict[str, AlgoInfo] = {}


def register(info: AlgoInfo) -> None:
    _REGISTRY[info.name] = info


register(AlgoInfo("PPO", "stable_baselines3", "PPO", "stable-baselines3", "ppo/ppo.py"))
register(AlgoInfo("A2C", "stable_baselines3", "A2C", "stable-baselines3", "a2c/a2c.py"))
register(AlgoInfo("RecurrentPPO", "sb3_contrib", "RecurrentPPO", "sb3-contrib", "ppo_recurrent/ppo_recurrent.py"))
register(AlgoInfo("TRPO", "sb3_contrib", "TRPO", "sb3-contrib", "trpo/trpo.py"))
register(AlgoInfo("SAC", "stable_baselines3", "SAC", "stable-baselines3", "sac/sac.py", on_policy=False))
register(AlgoInfo("TD3", "stable_baselines3", "TD3", "stable-baselines3", "td3/td3.py", on_policy=False))
register(AlgoInfo("TQC", "sb3_contrib", "TQC", "sb3-contrib", "tqc/tqc.py", on_policy=False))


def names() -> list[str]:
    return list(_REGISTRY)


def info(name: str) -> AlgoInfo:
    return _REGISTRY[name]


@cache
def load_class(name: str) -> type:
    entry = _REGISTRY[name]
    return getattr(importlib.import_module(entry.module), entry.class_name)


@cache
def constructor_params(name: str) -> tuple[str, ...]:
    """The keyword arguments of the algorithm's constructor that a spec may set."""
    found = _read_class(name)
    if found is not None:
        params = found[0]
    else:
        sig = inspect.signature(load_class(name))
        params = tuple(p for p in sig.parameters if sig.parameters[p].kind is not inspect.Parameter.VAR_KEYWORD)
    return tuple(p for p in params if p not in ("self", *MANAGED))


@cache
def policy_names(name: str) -> tuple[str, ...]:
    found = _read_class(name)
    return found[1] if found is not None else tuple(getattr(load_class(name), "policy_aliases", {}))


def _read_class(name: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """Constructor arguments and policy names read from the class's source, without importing it.

    Importing an algorithm pulls in torch (about 2 s); validating a spec needs only names. Returns
    None when the source is not where the registry says (then the caller imports the class).
    """
    entry = _REGISTRY[name]
    spec = importlib.util.find_spec(entry.module)  # a top-level package: found, not imported
    if not entry.source or spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / entry.source
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == entry.class_name:
            init = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
            if init is None:
                return None
            args = tuple(a.arg for a in [*init.args.args, *init.args.kwonlyargs])
            aliases: tuple[str, ...] = ()
            for stmt in node.body:
                target = getattr(stmt, "target", None) or (getattr(stmt, "targets", [None]) or [None])[0]
                value = getattr(stmt, "value", None)
                if getattr(target, "id", None) == "policy_aliases" and isinstance(value, ast.Dict):
                    aliases = tuple(str(k.value) for k in value.keys if isinstance(k, ast.Constant))
            return args, aliases
    return None


SCHEDULED = ("clip_range", "clip_range_vf")


def resolve_kwargs(hyperparams: dict[str, Any]) -> dict[str, Any]:
    """Turn YAML-friendly values into what SB3 expects (``activation_fn: tanh`` -> ``nn.Tanh``)."""
    kwargs = dict(hyperparams)
    for key in SCHEDULED:  # rl-zoo3's "lin_0.2": linear from 0.2 to 0 over training
        rate = schedules.parse(kwargs.get(key))
        if rate is not None:
            kwargs[key] = schedules.LinearSchedule(rate)
    policy_kwargs = dict(kwargs.get("policy_kwargs") or {})
    for key in CLASS_KWARGS:
        if isinstance(policy_kwargs.get(key), str):
            policy_kwargs[key] = resolve_class(key, policy_kwargs[key])
    if policy_kwargs:
        kwargs["policy_kwargs"] = policy_kwargs
    return kwargs
