"""The stability knobs: the one place that turns a knob into an SB3 argument, a policy class or a wrapper.

Knobs are hyperparameter names a spec may set under ``hyperparams`` or sweep under ``space``
(nested keys as ``init_gains.policy``), alongside the algorithm's own constructor arguments:

==================  ==========================================================================
learning_rate       a rate, ``"lin_3e-4"``, or ``{schedule: linear|constant, initial, final, critic}``
                    (``critic``: the critic's own initial rate, for SAC/TD3/TQC)
log_std_bounds      ``[low, high]``: the Gaussian log std stays inside (see sweeps.policies)
max_grad_norm       a positive norm, or ``off`` / ``null`` for no clipping
optimizer           ``adam`` | ``adamw`` | ``rmsprop`` | ``sgd`` (with SB3's eps=1e-5 kept)
weight_decay        >= 0, reaching the optimizer for every algorithm (A2C included)
ortho_init          orthogonal init on/off
init_gains          ``{hidden, policy, value}`` orthogonal gains (+ ``lstm`` for RecurrentPPO)
log_std_init        initial log std of Gaussian policies
normalize           ``{reward, obs, clip_reward, clip_obs, gamma}`` for VecNormalize (or true/false)
reward_scale        rewards are multiplied by this before normalisation
==================  ==========================================================================
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sweeps import envs, schedules
from sweeps import space as sp
from sweeps.errors import Issue, did_you_mean, one_of

KNOBS = (
    "learning_rate",
    "log_std_bounds",
    "max_grad_norm",
    "optimizer",
    "weight_decay",
    "ortho_init",
    "init_gains",
    "log_std_init",
    "normalize",
    "reward_scale",
)
OPTIMIZERS = {"adam": "Adam", "adamw": "AdamW", "rmsprop": "RMSprop", "sgd": "SGD"}
SCHEDULES = ("constant", "linear")
GAINS = ("hidden", "policy", "value", "lstm")
NORMALIZE_KEYS = ("reward", "obs", "clip_reward", "clip_obs", "gamma")
LOG_STD_LIMITS = (-103.0, 88.0)  # float32 exp() underflows to 0 / overflows to inf beyond these

# Which knobs each algorithm supports; a knob outside its algorithm's set is a validation error.
# TRPO steps its policy by a natural-gradient line search (no clipping; its optimizer fits the
# critic only). SAC/TQC bound their state-dependent log std with their own clamp, which
# log_std_bounds sets; TD3's policy is deterministic. Off-policy policies have no orthogonal init.
_ON_POLICY = frozenset(KNOBS)
_OFF_POLICY = frozenset({"learning_rate", "optimizer", "weight_decay", "normalize", "reward_scale"})
APPLIES: dict[str, frozenset[str]] = {
    "PPO": _ON_POLICY,
    "A2C": _ON_POLICY,
    "RecurrentPPO": _ON_POLICY,
    "TRPO": _ON_POLICY - {"max_grad_norm"},
    "SAC": _OFF_POLICY | {"log_std_bounds"},
    "TQC": _OFF_POLICY | {"log_std_bounds"},
    "TD3": _OFF_POLICY,
}
_GAINS_FOR = {"RecurrentPPO": GAINS}  # others: hidden, policy, value
_OFF_POLICY_ALGOS = ("SAC", "TD3", "TQC")


# LinearSchedule lives in sweeps.schedules; named here too so models saved with this path unpickle.
LinearSchedule = schedules.LinearSchedule


def learning_rate(value: Any, critic: bool = False) -> float | Callable[[float], float]:
    """The rate or schedule SB3 takes; with ``critic=True``, the critic's (same shape, scaled)."""
    if isinstance(value, str):
        rate = schedules.parse(value)
        if rate is None:
            raise ValueError(f"not a 'lin_RATE' learning rate: {value!r}")
        return LinearSchedule(rate)
    if isinstance(value, Mapping):
        initial = float(value["initial"])
        scale = float(value["critic"]) / initial if critic else 1.0
        if value.get("schedule", "constant") == "linear":
            return LinearSchedule(initial * scale, float(value.get("final", 0.0)) * scale)
        return initial * scale
    return float(value)


# --- validation ---------------------------------------------------------------------------------
def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: Any) -> str | None:
    return None if _number(value) and value > 0 else f"expected a number > 0, got {value!r}"


def _non_negative(value: Any) -> str | None:
    return None if _number(value) and value >= 0 else f"expected a number >= 0, got {value!r}"


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"expected true or false, got {value!r}"


def _lr(value: Any) -> str | None:
    if isinstance(value, Mapping):
        return None  # checked leaf by leaf
    if isinstance(value, str):
        return (
            None
            if schedules.parse(value) is not None
            else f"expected a rate > 0, 'lin_RATE' or {{schedule, initial, final}}, got {value!r}"
        )
    return _positive(value)


def _bounds(value: Any) -> str | None:
    low_limit, high_limit = LOG_STD_LIMITS
    if not (isinstance(value, (list, tuple)) and len(value) == 2 and all(_number(v) for v in value)):
        return f"expected [low, high], two numbers, got {value!r}"
    low, high = value
    if not low < high:
        return f"`low < high` must hold, but got (low={low}, high={high})"
    if low < low_limit or high > high_limit:
        return f"bounds must lie in [{low_limit}, {high_limit}] where float32 exp() is finite and > 0, got {value!r}"
    return None


def _grad_norm(value: Any) -> str | None:
    return (
        None
        if value is None or value == "off" or (_number(value) and value > 0)
        else f"expected a norm > 0, or off, got {value!r}"
    )


def _log_std_init(value: Any) -> str | None:
    low, high = LOG_STD_LIMITS
    return None if _number(value) and low <= value <= high else f"expected a number in [{low}, {high}], got {value!r}"


def _gamma(value: Any) -> str | None:
    return (
        None
        if value is None or (_number(value) and 0 < value <= 1)
        else f"expected a discount in (0, 1] (or null: the algorithm's gamma), got {value!r}"
    )


def _choice(allowed: tuple[str, ...]) -> Callable[[Any], str | None]:
    return lambda value: None if value in allowed else one_of(value, allowed)


_LEAVES: dict[str, Callable[[Any], str | None]] = {
    "learning_rate": _lr,
    "learning_rate.schedule": _choice(SCHEDULES),
    "learning_rate.initial": _positive,
    "learning_rate.final": _non_negative,
    "learning_rate.critic": _positive,
    "log_std_bounds": _bounds,
    "max_grad_norm": _grad_norm,
    "optimizer": _choice(tuple(OPTIMIZERS)),
    "weight_decay": _non_negative,
    "ortho_init": _boolean,
    "log_std_init": _log_std_init,
    "normalize": lambda v: None if isinstance(v, (bool, Mapping)) else f"expected true/false or a mapping, got {v!r}",
    "normalize.reward": _boolean,
    "normalize.obs": _boolean,
    "normalize.clip_reward": _positive,
    "normalize.clip_obs": _positive,
    "normalize.gamma": _gamma,
    "reward_scale": _positive,
    **{f"init_gains.{g}": _positive for g in GAINS},
}


def is_knob(name: str) -> bool:
    return name.split(".")[0] in KNOBS


def check(algo: str, where: str, name: str, candidates: list[Any]) -> list[Issue]:
    """Issues with the knob ``name`` (a flattened key) for ``algo``, given the values it may take."""
    top = name.split(".")[0]
    if top not in APPLIES.get(algo, frozenset()):
        usable = sorted(a for a, knobs in APPLIES.items() if top in knobs)
        return [
            Issue(
                f"{where}.{top}",
                f"the knob '{top}' does not apply to {algo} (it applies to "
                f"{', '.join(usable) or 'no registered algorithm'})",
            )
        ]
    if name == "learning_rate.critic" and algo not in _OFF_POLICY_ALGOS:
        return [
            Issue(
                f"{where}.{name}",
                f"a separate critic rate needs a separate critic optimizer, which "
                f"{algo} does not have (SAC, TD3 and TQC do)",
            )
        ]
    if top == "init_gains" and name != top:
        allowed = _GAINS_FOR.get(algo, GAINS[:3])
        leaf = name.split(".", 1)[1]
        if leaf not in allowed:
            return [
                Issue(
                    f"{where}.{name}",
                    f"{algo} has no init gain '{leaf}'; allowed: {', '.join(allowed)}{did_you_mean(leaf, allowed)}",
                )
            ]
    rule = _LEAVES.get(name)
    if rule is None:
        siblings = sorted(k.split(".", 1)[1] for k in _LEAVES if k.startswith(top + ".") and "." in k)
        detail = f"; allowed under '{top}': {', '.join(siblings)}" if siblings else ""
        return [Issue(f"{where}.{name}", f"unknown knob setting{detail}")]
    issues = []
    for value in candidates:
        problem = rule(value)
        if problem:
            issues.append(Issue(f"{where}.{name}", problem))
            break
    return issues


# --- building -----------------------------------------------------------------------------------
@dataclass
class Built:
    """What the knobs turn into for one trial."""

    algo_kwargs: dict[str, Any]
    policy: Any  # an SB3 alias, or a policy class from sweeps.policies
    algo_class: type  # the algorithm, or a subclass of it from sweeps.algo_variants
    normalize: dict[str, Any] | None = None  # VecNormalize kwargs
    reward_scale: float = 1.0
    max_grad_norm: float | None = None
    knobs: dict[str, Any] = field(default_factory=dict)


def build(algo_class: type, policy: str, hyperparams: dict[str, Any]) -> Built:
    """Split ``hyperparams`` into algorithm kwargs, a policy and env wrappers, applying every knob."""
    import inspect

    import torch as th

    from sweeps.algos import resolve_kwargs

    hp = copy.deepcopy(hyperparams)
    knobs = {k: hp.pop(k) for k in KNOBS if k in hp}
    kwargs = resolve_kwargs(hp)
    pk = dict(kwargs.pop("policy_kwargs", {}) or {})
    defaults = {k: p.default for k, p in inspect.signature(algo_class).parameters.items()}

    chosen_class = algo_class
    if "learning_rate" in knobs:
        kwargs["learning_rate"] = learning_rate(knobs["learning_rate"])
        if isinstance(knobs["learning_rate"], Mapping) and "critic" in knobs["learning_rate"]:
            from sweeps.algo_variants import with_critic_rate

            chosen_class = with_critic_rate(algo_class)
            kwargs["critic_learning_rate"] = learning_rate(knobs["learning_rate"], critic=True)
    max_grad_norm = knobs.get("max_grad_norm", defaults.get("max_grad_norm"))
    if "max_grad_norm" in knobs:
        max_grad_norm = math.inf if knobs["max_grad_norm"] in (None, "off") else float(knobs["max_grad_norm"])
        kwargs["max_grad_norm"] = max_grad_norm
    for key in ("ortho_init", "log_std_init"):
        if key in knobs:
            pk[key] = knobs[key]
    _optimizer(algo_class.__name__, kwargs, pk, knobs, defaults, th)

    chosen: Any = policy
    if "log_std_bounds" in knobs or "init_gains" in knobs:
        from sweeps import policies

        squashed = algo_class.__name__ in ("SAC", "TQC")
        chosen = (
            policies.bounded_squashed_policy(algo_class.__name__, policy) if squashed else policies.BY_ALIAS[policy]
        )
        if "log_std_bounds" in knobs:
            pk["log_std_bounds"] = [float(b) for b in knobs["log_std_bounds"]]
        if "init_gains" in knobs:
            pk["init_gains"] = {k: float(v) for k, v in knobs["init_gains"].items()}
    if pk:
        kwargs["policy_kwargs"] = pk

    normalize = _normalize(knobs.get("normalize"), kwargs.get("gamma", defaults.get("gamma", 0.99)))
    return Built(kwargs, chosen, chosen_class, normalize, float(knobs.get("reward_scale", 1.0)), max_grad_norm, knobs)


def _optimizer(algo: str, kwargs: dict, pk: dict, knobs: dict, defaults: dict, th: Any) -> None:
    """Set optimizer_class/optimizer_kwargs so the choice really reaches the optimizer.

    SB3 sets Adam's eps to 1e-5 only when no optimizer_kwargs are given; A2C replaces
    optimizer_kwargs with its RMSprop settings (weight decay 0) unless optimizer_class is given.
    """
    wants = "optimizer" in knobs or "weight_decay" in knobs or "optimizer_kwargs" in pk
    if not wants:
        return
    if "optimizer" in knobs:
        name = knobs["optimizer"]
    elif "optimizer_class" in pk:
        name = pk["optimizer_class"].__name__.lower()
    elif algo == "A2C" and kwargs.get("use_rms_prop", defaults.get("use_rms_prop", True)):
        name = "rmsprop"
    else:
        name = "adam"
    if name in OPTIMIZERS and not ("optimizer_class" in pk and "optimizer" not in knobs):
        pk["optimizer_class"] = getattr(th.optim, OPTIMIZERS[name])
    options = dict(pk.get("optimizer_kwargs") or {})
    if name == "rmsprop":
        options.setdefault("alpha", 0.99)
        options.setdefault("eps", kwargs.get("rms_prop_eps", defaults.get("rms_prop_eps", 1e-5)))
    elif name in ("adam", "adamw") and algo not in _OFF_POLICY_ALGOS:  # on-policy SB3: eps=1e-5
        options.setdefault("eps", 1e-5)
    options["weight_decay"] = float(knobs.get("weight_decay", options.get("weight_decay", 0.0)) or 0.0)
    pk["optimizer_kwargs"] = options


def _normalize(value: Any, algo_gamma: float) -> dict[str, Any] | None:
    if value is None or value is False:
        return None
    settings = {"reward": True, "obs": True} if value is True else dict(value)
    if not (settings.get("reward", False) or settings.get("obs", False)):
        return None
    gamma = settings.get("gamma")
    return {
        "norm_obs": bool(settings.get("obs", False)),
        "norm_reward": bool(settings.get("reward", False)),
        "clip_obs": float(settings.get("clip_obs", 10.0)),
        "clip_reward": float(settings.get("clip_reward", 10.0)),
        "gamma": float(algo_gamma if gamma is None else gamma),
    }


# --- environments -------------------------------------------------------------------------------
def wrap_train_env(venv: Any, built: Built) -> Any:
    """Reward scale, then VecNormalize (whose gamma defaults to the algorithm's)."""
    from stable_baselines3.common.vec_env import VecNormalize

    if built.reward_scale != 1.0:
        from sweeps.wrappers import ScaleReward

        venv = ScaleReward(venv, built.reward_scale)
    if built.normalize:
        venv = VecNormalize(venv, training=True, **built.normalize)
    return venv


def wrap_eval_env(venv: Any, built: Built, train_env: Any) -> Any:
    """The eval env reads the training statistics and never updates them; rewards stay raw."""
    from stable_baselines3.common.vec_env import VecNormalize

    if not built.normalize or not built.normalize.get("norm_obs", True):
        return venv  # reward-only normalisation: evaluation returns are raw anyway
    settings = dict(built.normalize, norm_reward=False)
    eval_env = VecNormalize(venv, training=False, **settings)
    eval_env.obs_rms = copy.deepcopy(train_env.obs_rms)
    return eval_env


# --- knob combinations (checked by the spec's validation) --------------------------------------
def candidates(dist: sp.Dist) -> list[Any]:
    """The values a dimension can take, as far as checks need: choices, a fixed value, range ends."""
    if dist.kind == "choice":
        return list(dist.values)
    if dist.is_fixed:
        return [dist.value]
    return dist.ends


def combination_issues(
    algo: str, policy: str, env: dict[str, Any], fixed: dict[str, Any], dims: dict[str, sp.Dist]
) -> list[Issue]:
    """Knobs that are fine alone but not together, or not with this algorithm, policy or env
    (``fixed``: the spec's hyperparameters, flattened; ``dims``: its search space)."""
    issues: list[Issue] = []

    def values(key: str) -> tuple[str, list[Any]] | None:
        if key in fixed:
            return "hyperparams", [fixed[key]]
        if key in dims:
            return "space", candidates(dims[key])
        return None

    gains = [k for k in (*fixed, *dims) if k.startswith("init_gains")]
    ortho = values("ortho_init")
    if gains and ortho and False in ortho[1]:
        issues.append(
            Issue(
                f"{ortho[0]}.ortho_init",
                "init_gains set orthogonal gains, so ortho_init must stay "
                "true (drop init_gains to use SB3's other init)",
            )
        )
    bounds, init = values("log_std_bounds"), values("log_std_init")
    if bounds and init and bounds[0] == "hyperparams" and init[0] == "hyperparams":
        low, high = bounds[1][0]
        if not low <= init[1][0] <= high:
            issues.append(
                Issue(
                    "hyperparams.log_std_init", f"log_std_init={init[1][0]} lies outside log_std_bounds [{low}, {high}]"
                )
            )
    schedule = [k for k in (*fixed, *dims) if k.startswith("learning_rate.")]
    if schedule and not values("learning_rate.initial"):
        issues.append(
            Issue(
                f"{'space' if schedule[0] in dims else 'hyperparams'}.learning_rate.initial",
                "a learning-rate schedule needs 'initial' (fixed or swept)",
            )
        )
    bounds_where = values("log_std_bounds")
    if bounds_where and algo in ("SAC", "TQC") and policy not in ("MlpPolicy", "MultiInputPolicy"):
        issues.append(
            Issue(
                f"{bounds_where[0]}.log_std_bounds",
                f"for {algo} it supports MlpPolicy and MultiInputPolicy, not {policy}",
            )
        )
    gaussian = [key for key in ("log_std_bounds", "log_std_init") if values(key)]
    if gaussian:
        problem = envs.continuous_action_problem(env)
        if problem:
            where = (values(gaussian[0]) or ("hyperparams", []))[0]
            issues.append(Issue(f"{where}.{gaussian[0]}", f"applies to Gaussian (Box action) policies; {problem}"))
    return issues
