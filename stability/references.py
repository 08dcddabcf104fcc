"""A run's reference return: what its env counts as learnt, for the detectors that must tell a
policy that learns from one that does not (``stuck_value_loss``: a critic that lags a policy which
learns is a warning, not a failure).

Given by the user (the sweep's ``stability.reference_return``, ``rlsweep diagnose
--reference-return``), or read from Gymnasium's registry: the ``reward_threshold`` an env id is
registered with (CartPole-v1 475, Acrobot-v1 -100, MountainCarContinuous-v0 90; Pendulum-v1 has
none). A registered threshold holds for the returns of the env as registered: an env made with
other keyword arguments or another time limit (``max_episode_steps``, CartPole's
``sutton_barto_reward``) has none, and so has one with a wrapper between the env and the outermost
recorder of its episode returns (SB3's Monitor, Gymnasium's RecordEpisodeStatistics) that may
change the reward: anything but an observation or action wrapper.

Where no reference is known, an env whose reward is paid per step survived (CartPole's 1 a step)
still bounds what a return can reach: its time limit times that rate. The detectors read the limit
(``time_limit``, :func:`time_limit`) and find the rate in the run's own episodes.
"""

from __future__ import annotations

import importlib
import math
from typing import Any

from stability._numbers import is_real

GIVEN = "given"

# The wrappers that record the episode returns the detectors read (SB3's and CleanRL's)...
_RECORDERS = frozenset(
    {"stable_baselines3.common.monitor:Monitor", "gymnasium.wrappers.common:RecordEpisodeStatistics"}
)
# ... and others that pass the reward and the episode's end on as the env gave them (the checks
# gym.make adds). A TimeLimit is not among them: another limit changes what a return can reach.
_REWARD_KEPT = _RECORDERS | frozenset(
    {"gymnasium.wrappers.common:OrderEnforcing", "gymnasium.wrappers.common:PassiveEnvChecker"}
)


def registered(spec: Any) -> tuple[float, str] | None:
    """``(reward_threshold, source)`` of a Gymnasium ``EnvSpec`` (an env's ``spec``), or None when it
    has none, when the env was made otherwise than registered, or when a wrapper under the outermost
    recorder of its returns may change the reward."""
    threshold = getattr(spec, "reward_threshold", None)
    if not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        return None
    if not _as_registered(spec):
        return None
    # innermost first
    wrappers = [getattr(w, "entry_point", "") for w in getattr(spec, "additional_wrappers", ()) or ()]
    recorded = [i for i, entry_point in enumerate(wrappers) if entry_point in _RECORDERS]
    below = wrappers[: recorded[-1]] if recorded else wrappers  # what reaches the returns it records
    if not all(_leaves_reward(entry_point) for entry_point in below):
        return None
    return float(threshold), f"{spec.id}'s registered reward_threshold"


def by_id(env_id: str, import_module: bool = False) -> tuple[float, str] | None:
    """The registered reward_threshold of a Gymnasium env id; None when it is registered without
    one. A ``package.module:Env-v0`` id imports its module first (registering the env) only with
    ``import_module``: an id read from a log file imports nothing. Raises ``KeyError`` for an id
    that is not registered."""
    return registered(spec_by_id(env_id, import_module))


def spec_by_id(env_id: str, import_module: bool = False) -> Any:
    """The Gymnasium ``EnvSpec`` an env id is registered with; imports and raises as :func:`by_id`."""
    import gymnasium as gym

    name = env_id
    if ":" in env_id:
        module, name = env_id.split(":", 1)
        if not import_module:
            raise KeyError(f"{env_id}: its module is not imported here")
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise KeyError(f"{env_id}: cannot import {module} ({exc})") from None
    try:
        return gym.spec(name)
    except gym.error.Error as exc:
        raise KeyError(f"{env_id}: {exc}") from None


def context(found: tuple[float, str] | None) -> dict[str, Any]:
    """A reference as the run-context keys the detectors read (``reference_return``,
    ``reference_source``); empty for None."""
    return {} if found is None else {"reference_return": found[0], "reference_source": found[1]}


TIME_LIMIT = "time_limit"  # the run-context key: the most steps an episode can last


def named(env_id: Any) -> dict[str, Any]:
    """The context of the env id a file or log names: its registered threshold and time limit, else
    empty (an id that is not registered, or names a module, which is never imported for it)."""
    if not isinstance(env_id, str):
        return {}
    try:
        spec = spec_by_id(env_id)
    except KeyError:
        return {}
    return context(registered(spec)) | limit_of(spec)


def time_limit(env: Any) -> dict[str, Any]:
    """The context of a Gymnasium env's time limit: the outermost ``TimeLimit`` wrapper's, else its
    spec's ``max_episode_steps``; empty when it has neither (``None`` too)."""
    inner, seen = env, set()
    while inner is not None and id(inner) not in seen:  # an env that names itself as its .env ends the walk
        seen.add(id(inner))
        found = limit_context(getattr(inner, LIMIT_ATTR, None))
        if found:
            return found
        inner = getattr(inner, "env", None)
    return limit_of(getattr(env, "spec", None))


def limit_of(spec: Any) -> dict[str, Any]:
    """The context of the time limit an ``EnvSpec`` gives (``max_episode_steps``); empty without one."""
    return limit_context(getattr(spec, "max_episode_steps", None))


def whole_steps(value: Any) -> int | None:
    """``value`` as a positive whole number of steps (an int, or a whole float: a context read back
    from JSON), else None."""
    if not is_real(value) or not 0 < value < math.inf or value % 1:
        return None
    return int(value)


LIMIT_ATTR = "_max_episode_steps"  # where Gymnasium's TimeLimit keeps its limit


def limit_context(steps: Any) -> dict[str, Any]:
    """The context of a time limit of ``steps`` (empty where it is no whole number of steps)."""
    found = whole_steps(steps)
    return {} if found is None else {TIME_LIMIT: found}


_DISPLAY_ONLY = frozenset({"render_mode"})  # keyword arguments that change nothing of the returns (SB3 sets it)


def _as_registered(spec: Any) -> bool:
    """The env was made with the keyword arguments and time limit it is registered with."""
    import gymnasium as gym

    try:
        base = gym.spec(spec.id)
    except (gym.error.Error, AttributeError, TypeError):
        return False

    def kwargs(of: Any) -> dict[str, Any]:
        return {k: v for k, v in (of.kwargs or {}).items() if k not in _DISPLAY_ONLY}

    return bool(kwargs(spec) == kwargs(base) and spec.max_episode_steps == base.max_episode_steps)


def _leaves_reward(entry_point: Any) -> bool:
    """A wrapper that only sees observations or actions (Gymnasium's ObservationWrapper and
    ActionWrapper), or one of ``_REWARD_KEPT``, cannot change the reward; any other might."""
    import gymnasium as gym

    if entry_point in _REWARD_KEPT:
        return True
    if not isinstance(entry_point, str) or ":" not in entry_point:
        return False
    try:
        from gymnasium.envs.registration import load_env_creator

        cls = load_env_creator(entry_point)
    except (ImportError, AttributeError, ValueError):
        return False
    return isinstance(cls, type) and issubclass(cls, (gym.ObservationWrapper, gym.ActionWrapper))
