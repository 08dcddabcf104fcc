"""A run's reference return: what its env counts as learnt, for the detectors that must tell a
policy that learns from one that does not (``stuck_value_loss``: a critic that lags a policy which
learns is a warning, not a failure).

Given by the user (the sweep's ``stability.reference_return``, ``rlsweep diagnose
--reference-return``), or read from Gymnasium's registry: the ``reward_threshold`` an env id is
registered with (CartPole-v1 475, Acrobot-v1 -100, MountainCarContinuous-v0 90; Pendulum-v1 has
none). A registered threshold holds for the env as registered: a wrapper over it that may change
the reward (anything but an observation or action wrapper) leaves the run without one.
"""

from __future__ import annotations

import math
from typing import Any

GIVEN = "given"


def registered(spec: Any) -> tuple[float, str] | None:
    """``(reward_threshold, source)`` of a Gymnasium ``EnvSpec`` (an env's ``spec``), or None when it
    has none, or when a wrapper recorded over it may change the reward."""
    threshold = getattr(spec, "reward_threshold", None)
    if not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        return None
    for wrapper in getattr(spec, "additional_wrappers", ()) or ():  # innermost first
        entry_point = getattr(wrapper, "entry_point", "")
        if entry_point in _RECORDERS:
            break  # the episode returns are recorded here: what wraps over it does not reach them
        if not _leaves_reward(entry_point):
            return None
    return float(threshold), f"{spec.id}'s registered reward_threshold"


def by_id(env_id: str) -> tuple[float, str] | None:
    """The registered reward_threshold of a Gymnasium env id; None when it is registered without
    one. Raises ``KeyError`` for an id that is not registered (after importing its module, for
    ``module:Env-v0`` ids)."""
    import gymnasium as gym

    try:
        spec = gym.spec(env_id)
    except gym.error.Error as exc:
        raise KeyError(f"{env_id}: {exc}") from None
    return registered(spec)


# The wrappers that record the episode returns the detectors read (SB3's and CleanRL's)...
_RECORDERS = frozenset(
    {"stable_baselines3.common.monitor:Monitor", "gymnasium.wrappers.common:RecordEpisodeStatistics"}
)
# ... and others that pass the reward on as the env paid it (the checks gym.make adds).
_REWARD_KEPT = _RECORDERS | frozenset(
    {
        "gymnasium.wrappers.common:TimeLimit",
        "gymnasium.wrappers.common:OrderEnforcing",
        "gymnasium.wrappers.common:PassiveEnvChecker",
    }
)


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
