"""Advice as data: knob patches computed from the run's own config, with readable text beside them.

A patch is ``{"patch": {knob: value}, "why": text}``; knob names are rlsweep's (``learning_rate``,
``max_grad_norm``, ``normalize``, ``weight_decay``, ``vf_coef``, ``ent_coef``, ``init_gains``,
``log_std_bounds``, ``normalize_advantage``, ...). A patch that would set a value the run already
has is never made; where the run's config is unknown (a plain TensorBoard log) the patch is made
and its ``why`` says the current value was not seen. ``rlsweep repair`` applies them in order.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import Any

from stability._numbers import is_real

# knobs the callback records in the run's context under their own name
_RECORDED = frozenset({"max_grad_norm", "weight_decay", "vf_coef", "ent_coef", "normalize_advantage", "learning_rate"})


def make(ctx: dict[str, Any], knob: str, value: Any, why: str) -> dict[str, Any] | None:
    """One patch, or None when the run already has ``value``."""
    if knob == "normalize":
        if value.get("reward") and ctx.get("norm_reward"):
            return None
        if "norm_reward" not in ctx:
            why += " (whether the run normalised rewards was not recorded)"
        return {"patch": {knob: value}, "why": why}
    current = ctx.get(knob)
    if current is not None and _same(current, value):
        return None
    if current is None and knob in _RECORDED:
        why += f" (the run's {knob} was not recorded)"
    return {"patch": {knob: value}, "why": why}


# A learning rate this many times the algorithm's own default is far outside what it was tuned for.
FAR_ABOVE_DEFAULT = 10.0


def far_above_default(ctx: dict[str, Any], lr: float | None) -> str | None:
    """Where ``lr`` is ``FAR_ABOVE_DEFAULT`` times the algorithm's default or more (and the optimizer
    is not SGD, whose scale is its own), the cause as text; else None. Such a rate is the likelier
    cause of a collapse than anything else its finding names: each step saturates the logits, and a
    third of it still does (Adam at 0.2 / 3 collapses a CartPole policy in one update), so that
    finding advises the default itself, first. Exploding updates keep their tenfold cut (back to the
    default, the A2C report's critic could not follow its returns of scale 500), and a Gaussian's
    overflow its bounds first (they end the overflow whatever the rate)."""
    default = ctx.get("default_learning_rate")
    if lr is None or not math.isfinite(lr) or not isinstance(default, float) or default <= 0:
        return None
    if lr < FAR_ABOVE_DEFAULT * default or str(ctx.get("optimizer", "")).lower() == "sgd":
        return None
    return f"learning rate {lr:.3g} is {lr / default:.0f}x {ctx.get('algo') or 'the algorithm'}'s default ({default:g})"


def back_to_default_lr(ctx: dict[str, Any], lr: float | None, why: str) -> dict[str, Any] | None:
    """The algorithm's default learning rate (``default_learning_rate`` in the context, read from
    its constructor) where ``lr`` is far above it (:func:`far_above_default`), else None."""
    far = far_above_default(ctx, lr)
    if far is None:
        return None
    return {"patch": {"learning_rate": ctx["default_learning_rate"]}, "why": f"{why} ({far}: back to it)"}


def lower_lr(ctx: dict[str, Any], lr: float | None, factor: float, why: str) -> dict[str, Any] | None:
    if lr is None or not math.isfinite(lr) or lr <= 0:
        return None
    return {"patch": {"learning_rate": float(f"{lr / factor:.3g}")}, "why": why + f" (from {lr:.3g})"}


# Plain SGD moves each weight by learning_rate x its gradient: from a rate of 1 up, every step is
# larger than the gradient itself, a rate no tuning of the algorithm's own optimizer starts from.
SGD_STEP_MAX = 1.0


def own_optimizer(defaults: Mapping[str, Any]) -> str:
    """The knob value of the optimizer an algorithm builds when the config names none, from its
    constructor's defaults: SB3's A2C uses RMSprop (``use_rms_prop``), every other algorithm Adam."""
    return "rmsprop" if defaults.get("use_rms_prop") is True else "adam"


def default_optimizer(algo_class: type) -> str:
    """:func:`own_optimizer` of an algorithm class (what the callback records)."""
    params = inspect.signature(algo_class).parameters
    return own_optimizer({name: p.default for name, p in params.items()})


def back_to_own_optimizer(ctx: dict[str, Any], lr: float | None, why: str) -> dict[str, Any] | None:
    """Where the run stepped plain SGD at ``SGD_STEP_MAX`` or more: the algorithm's own optimizer
    (``default_optimizer`` in the context) at its default rate, the setting it was tuned at. A cut
    of a third or a tenth leaves such a rate diverging (SGD at 55 / 3 still blew a PPO's weights
    up); else None. With momentum m (the context's ``momentum``), a gradient that keeps its sign
    moves its weight by lr / (1 - m) times itself per step once the momentum has built up, so that
    is the step compared (SGD at 0.32 with momentum 0.9 steps by 3.2 gradients)."""
    own, default = ctx.get("default_optimizer"), ctx.get("default_learning_rate")
    if str(ctx.get("optimizer", "")).lower() != "sgd" or lr is None or not math.isfinite(lr):
        return None
    momentum = ctx.get("momentum")
    if not is_real(momentum) or not 0 <= momentum < 1:
        momentum = 0.0
    step = lr / (1 - momentum)
    if step < SGD_STEP_MAX or not isinstance(own, str) or not isinstance(default, float) or default <= 0:
        return None
    rate = f"a learning rate of {lr:.3g}" + (f" with momentum {momentum:g}" if momentum else "")
    return {
        "patch": {"optimizer": own, "learning_rate": default},
        "why": f"{why} (plain SGD at {rate} steps each weight by up to {step:.3g} times its gradient: "
        f"back to the algorithm's own optimizer, {own}, at its default rate)",
    }


def default_learning_rate(algo_class: type) -> float | None:
    """The learning rate an algorithm's constructor defaults to (SB3: PPO 3e-4, A2C 7e-4), if a number."""
    param = inspect.signature(algo_class).parameters.get("learning_rate")
    default = param.default if param is not None else None
    return float(default) if is_real(default) else None


def weight_decay(ctx: dict[str, Any], minimum: float, whose: str) -> tuple[str, dict[str, Any] | None] | None:
    """The run's weight decay as a cause, with the patch that turns it off, where it is at least
    ``minimum``; ``whose`` names the weights it pulls (the policy's, the critic's)."""
    decay = ctx.get("weight_decay")
    if not isinstance(decay, (int, float)) or decay < minimum:
        return None
    return (
        f"weight decay {decay:g} pulls the {whose}'s weights towards 0 every step",
        make(ctx, "weight_decay", 0.0, f"stop pulling the {whose}'s weights to 0"),
    )


def value_clip(ctx: dict[str, Any], maximum: float) -> tuple[str, dict[str, Any] | None] | None:
    """The run's value clip (PPO's ``clip_range_vf``) as a cause, with the patch that removes it,
    where it is under ``maximum``: each update may then move the critic's values by at most that
    much from the last rollout's, in the returns' own units, so the critic stays where it started
    and its loss, and that loss's gradient, stay at the returns' scale."""
    clip = ctx.get("clip_range_vf")
    if not is_real(clip) or not clip < maximum:
        return None
    return (
        f"clip_range_vf {clip:.2g}: each update may move the critic's values by at most that much "
        "from the last rollout's",
        make(ctx, "clip_range_vf", None, "no clip on the critic's values (SB3's default)"),
    )


def tiny_reward_scale(ctx: dict[str, Any], maximum: float) -> tuple[str, dict[str, Any] | None] | None:
    """The run's ``reward_scale`` (rlsweep's knob) as a cause, with the patch that sets it back to
    1, where it is under ``maximum``: every reward, and so every advantage and value target, is
    that much smaller than the env pays, down where the optimizer's eps swallows the gradients."""
    scale = ctx.get("reward_scale")
    if not is_real(scale) or not 0 < scale < maximum:
        return None
    return (
        f"reward_scale {scale:g} multiplies every reward towards 0 before the algorithm: the advantages "
        "and the critic's targets, and their gradients, shrink by as much",
        make(ctx, "reward_scale", 1.0, "the rewards the env pays"),
    )


def name(
    found: tuple[str, dict[str, Any] | None] | None, causes: list[str], patches: list[dict[str, Any] | None]
) -> None:
    """Add a config cause and its patch (as :func:`weight_decay`, :func:`value_clip` and
    :func:`tiny_reward_scale` give them) to a finding's lists; nothing where none was found."""
    if found is not None:
        causes.append(found[0])
        patches.append(found[1])


def clip_grads(ctx: dict[str, Any], why: str) -> dict[str, Any] | None:
    current = ctx.get("max_grad_norm")
    if current is not None and math.isfinite(float(current)) and float(current) <= 0.5:
        return None
    return make(ctx, "max_grad_norm", 0.5, why)


def collect(*patches: dict[str, Any] | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in patches:
        if p is not None and p not in out:
            out.append(p)
    return out


def texts(patches: list[dict[str, Any]]) -> list[str]:
    """The readable form: ``knob: value — why``."""
    return [", ".join(f"{k}: {_show(v)}" for k, v in p["patch"].items()) + f" — {p['why']}" for p in patches]


def _same(current: Any, value: Any) -> bool:
    try:
        return math.isclose(float(current), float(value), rel_tol=1e-9, abs_tol=1e-12)
    except (TypeError, ValueError):
        return current == value


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
