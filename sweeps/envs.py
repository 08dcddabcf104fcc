"""Environments: a Gymnasium id or a ``"package.module:callable"`` entry point, plus wrappers.

Entry points are the only code a spec can name; they are imported, never evaluated.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import Any

from sweeps.errors import Issue


def import_entry_point(target: str) -> Callable:
    """``"package.module:callable"`` -> the callable. Raises ValueError with a readable reason."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError(f"expected 'package.module:callable', got '{target}'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an entry point's module may fail in any way while importing
        raise ValueError(f"cannot import module '{module_name}' ({type(exc).__name__}: {exc})") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"module '{module_name}' has no attribute '{attr}'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"'{target}' is not callable")
    return obj


def _check_gym_id(env_id: str) -> str | None:
    import gymnasium as gym

    if env_id in gym.registry:
        return None
    close = difflib.get_close_matches(env_id, list(gym.registry), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"'{env_id}' is not a registered Gymnasium id{hint} (or give an entry point 'package.module:callable')"


def check(env: Any, path: str) -> list[Issue]:
    """Every problem with an :class:`~sweeps.spec.EnvSpec`, without building the env."""
    issues: list[Issue] = []
    if env.is_entry_point:
        try:
            import_entry_point(env.id)
        except ValueError as exc:
            issues.append(Issue(f"{path}.id", str(exc)))
    else:
        problem = _check_gym_id(env.id)
        if problem:
            issues.append(Issue(f"{path}.id", problem))
    for i, wrapper in enumerate(env.wrappers):
        target = wrapper if isinstance(wrapper, str) else wrapper.entry_point
        try:
            import_entry_point(target)
        except ValueError as exc:
            where = f"{path}.wrappers.{i}" + ("" if isinstance(wrapper, str) else ".entry_point")
            issues.append(Issue(where, str(exc)))
    return issues


def continuous_action_problem(env: dict[str, Any]) -> str | None:
    """None if the env's action space is a Box; else a sentence saying what it is."""
    try:
        instance = env_factory(env)()
    except Exception as exc:  # the env's own error, reported as it is
        return f"building the env to check its action space failed ({type(exc).__name__}: {exc})"
    try:
        space = instance.action_space
    finally:
        instance.close()
    from gymnasium import spaces

    return None if isinstance(space, spaces.Box) else f"{env['id']} has the action space {space}"


def env_factory(env: dict[str, Any]) -> Callable[[], Any]:
    """A zero-argument function building one wrapped env from the plain-data env spec."""

    def make() -> Any:
        if ":" in env["id"]:
            instance = import_entry_point(env["id"])(**env.get("kwargs", {}))
        else:
            import gymnasium as gym

            instance = gym.make(env["id"], **env.get("kwargs", {}))
        for wrapper in env.get("wrappers", []):
            target, kwargs = (
                (wrapper, {}) if isinstance(wrapper, str) else (wrapper["entry_point"], wrapper.get("kwargs", {}))
            )
            instance = import_entry_point(target)(instance, **kwargs)
        return instance

    return make


def make_vec_env(env: dict[str, Any], n_envs: int, seed: int) -> Any:
    """A monitored ``DummyVecEnv`` of ``n_envs`` copies, seeded ``seed, seed+1, ...``."""
    from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env

    return sb3_make_vec_env(env_factory(env), n_envs=n_envs, seed=seed)
