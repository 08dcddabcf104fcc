"""``nan_scale``: the action distribution's scale or loc becomes inf, 0 or NaN.

Certain on torch's distribution-argument error (``Expected parameter scale|loc|logits|probs``),
on non-finite parameters or losses, and when log_std (or a plain log's mean std, 0 or inf
included) leaves [-46, 23] (a std outside about [1e-20, 1e10]: every action clipped, or
every ratio overflowing; exp() itself overflows above ~88.7 and reaches 0 below ~-103).
A warning before that, when log_std leaves the range any sensible policy uses.

Where the callback saw the env hand back a non-finite observation or reward after finite actions
of ordinary size (at most ``env_action_abs_max``), with the Gaussian's log std never outside the
warning range before it, the env broke on its own (a sensor that reads NaN): the finding says so
and carries no knob patch, since none repairs it.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from stability import advice
from stability.detectors._base import Detector, clipping_off, first_index
from stability.findings import Finding
from stability.signals import History

_TORCH_ARGUMENT = re.compile(r"Expected parameter (scale|loc|logits|probs|concentration\w*)[^\n]*")
_LOSSES = ("pg_loss", "value_loss", "loss", "entropy", "approx_kl", "std")
BOUNDS = (-5, 2)  # the log std bounds the advice proposes: a std between 0.007 and 7.4


class NanScale(Detector):
    name = "nan_scale"

    def detect(self, history: History, t: dict[str, Any], final: bool) -> Finding | None:
        def finding(onset: int, summary: str, evidence: dict[str, Any], certain: bool = True) -> Finding:
            # causes and patches read whole series: worked out only for a run with a finding, not at
            # every live check of a healthy one
            env = _env_broke(history, t)
            if env is not None:  # the env's output broke first: no knob repairs it
                what, step = env["what"], env["step"]
                return Finding(
                    self.name,
                    min(onset, step),
                    f"the env returned a non-finite {what} at step {step}, after ordinary finite actions",
                    evidence | {f"env_nonfinite_{what}_step": step, "action_abs_max": env["action_abs_max"]},
                    [
                        f"fix the env's {what}s (or the wrapper that computes them): no training knob repairs "
                        "a non-finite value the env hands back"
                    ],
                    [
                        f"the env returned a non-finite {what} at step {step} after actions of at most "
                        f"{env['action_abs_max']:.3g}: it broke on its own, and the training consumed it"
                    ],
                    certain=certain,
                )
            patches = _patches(history)
            return Finding(
                self.name,
                onset,
                summary,
                evidence,
                advice.texts(patches),
                _causes(history, t),
                certain=certain,
                patches=patches,
            )

        if history.error:
            match = _TORCH_ARGUMENT.search(history.error)
            if match:  # onset: where log_std first left the sane range, else the crash itself
                onset = _warning_onset(history, t, None)
                return finding(
                    history.step_of(onset) if onset is not None else history.last_step,
                    f"torch refused the action distribution's {match.group(1)}: it held inf/0/NaN",
                    {"error": match.group(0)[:400]} | _log_std_evidence(history),
                )
        rules = [
            ("params_finite", lambda v: v < 1.0, "non-finite parameter after the update"),
            *[(name, lambda v: ~np.isfinite(v), f"{name} is not finite") for name in _LOSSES],
            (  # a plain log's mean std (SB3's train/std), 0 included: past the same bars as log_std
                "std",
                lambda v: (v > math.exp(t["log_std_high"])) | (v < math.exp(t["log_std_low"])),
                f"std outside [{math.exp(t['log_std_low']):.2g}, {math.exp(t['log_std_high']):.2g}]",
            ),
            (
                "log_std_max",
                lambda v: v > t["log_std_high"],
                f"log_std above {t['log_std_high']:g} (std ~ {math.exp(t['log_std_high']):.2g})",
            ),
            (
                "log_std_min",
                lambda v: v < t["log_std_low"],
                f"log_std below {t['log_std_low']:g} (std ~ {math.exp(t['log_std_low']):.2g})",
            ),
            ("loc_abs_max", lambda v: ~np.isfinite(v) | (v > t["loc_high"]), f"|mean action| above {t['loc_high']:g}"),
        ]
        hits: list[tuple[int, str, float]] = []
        for name, test, what in rules:
            found = first_index(history, name, test)
            if found is not None:
                hits.append((found[0], what, found[1]))
        if hits:
            index, what, value = min(hits, key=lambda h: h[0])
            warned = _warning_onset(history, t, index)
            onset = history.step_of(index if warned is None else warned)
            return finding(
                onset, what, {"first_value": value, "at_step": history.step_of(index)} | _log_std_evidence(history)
            )
        warned = _warning_onset(history, t, None)
        if warned is not None:
            return finding(
                history.step_of(warned),
                "log_std has left the range a usable policy keeps (towards a std past 1e10 or under 1e-20)",
                _log_std_evidence(history),
                certain=False,
            )
        return None


def _env_broke(history: History, t: dict[str, Any]) -> dict[str, Any] | None:
    """The callback's record of the env's first non-finite output, when the env broke on its own:
    the actions it had just been given were finite and of ordinary size, and the Gaussian's log
    std (where it started, and every record before that step) stayed inside the warning range. A
    policy already blowing up sends actions that can break any env (a reward that overflows
    float32 from a huge action), and that is the policy's failure. None otherwise."""
    env = history.context.get("env_nonfinite")
    if not isinstance(env, dict):
        return None
    sent = env.get("action_abs_max")
    if not isinstance(sent, (int, float)) or not sent <= t["env_action_abs_max"]:
        return None
    start = history.context.get("log_std_init")
    low, high = t["log_std_warn_low"], t["log_std_warn_high"]
    if isinstance(start, (int, float)) and not low <= start <= high:
        return None
    steps = np.asarray(history.steps, dtype=np.int64)
    for name in ("log_std_max", "log_std_min"):
        indices, values = history.arrays(name)
        before = values[steps[indices] <= env["step"]]
        if len(before) and not np.all((before >= low) & (before <= high)):
            return None
    return env


def _warning_onset(history: History, t: dict[str, Any], fallback: int | None) -> int | None:
    high = first_index(history, "log_std_max", lambda v: v > t["log_std_warn_high"])
    low = first_index(history, "log_std_min", lambda v: v < t["log_std_warn_low"])
    found = [hit[0] for hit in (high, low) if hit is not None]
    if not found:
        return fallback
    return min(found + ([fallback] if fallback is not None else []))


def _log_std_evidence(history: History) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("log_std_min", "log_std_max", "std", "grad_norm", "reward_std"):
        values = history.values(name)
        if values:
            out[f"{name}_last"] = values[-1]
    return out


def _causes(history: History, t: dict[str, Any]) -> list[str]:
    causes = []
    ctx = history.context
    if clipping_off(history):
        causes.append("gradient clipping is off (max_grad_norm: off)")
    rewards = [abs(v) for v in history.values("reward_std") if math.isfinite(v)]
    if rewards and max(rewards) > 10 and not ctx.get("norm_reward"):
        causes.append(f"large unnormalised rewards (per-step std up to {max(rewards):.3g})")
    start = _log_std_start(history)
    if start is not None and not t["log_std_warn_low"] <= start <= t["log_std_warn_high"]:
        causes.append(f"the Gaussian starts at log_std {start:.3g} (std {math.exp(min(start, 700)):.2g})")
    grads = [v for v in history.values("grad_norm_log_std") if math.isfinite(v)]
    if grads and max(grads) > 10:
        causes.append(f"large log_std gradients (up to {max(grads):.3g} before clipping)")
    return causes


def _patches(history: History) -> list[dict[str, Any]]:
    ctx = history.context
    lr = history.values("learning_rate")
    gaussian = (
        history.has("log_std_max")
        or history.has("std")
        or ctx.get("continuous")
        or bool(history.error and re.search(r"Expected parameter (scale|loc)", history.error))
    )
    bounded = ctx.get("log_std_bounds")
    return advice.collect(
        _bounds_patch(history) if gaussian and not (bounded and bounded[1] <= 2 and bounded[0] >= -20) else None,
        advice.back_to_own_optimizer(ctx, lr[0] if lr else None, "smaller updates"),
        advice.lower_lr(ctx, lr[0] if lr else None, 3.0, "smaller updates"),
        advice.clip_grads(ctx, "clip the gradients that moved the parameters this far"),
        advice.make(ctx, "normalize", {"reward": True}, "bring large or spiky rewards near 1"),
    )


def _log_std_start(history: History) -> float | None:
    """Where the Gaussian's log std started: the run's ``log_std_init`` where the callback recorded
    it, else the first recorded log std furthest from 0 (a plain log's first ``std``, logged after
    the first update, is as close as it gets)."""
    start = history.context.get("log_std_init")
    if isinstance(start, (int, float)):
        return float(start)
    firsts = [history.values(k)[0] for k in ("log_std_max", "log_std_min") if history.values(k)]
    if not firsts and history.values("std"):
        std = history.values("std")[0]
        firsts = [math.log(std)] if std > 0 and math.isfinite(std) else []
    firsts = [v for v in firsts if math.isfinite(v)]
    return max(firsts, key=abs) if firsts else None


def _bounds_patch(history: History) -> dict[str, Any] | None:
    """Bounds on the log std; with the start brought inside them (SB3's default, 0) when the run
    started outside: a log_std_init outside its bounds does not validate, and a bound alone
    would leave the repair nothing to try."""
    patch = advice.make(history.context, "log_std_bounds", list(BOUNDS), "keep exp(log_std) a usable number")
    start = _log_std_start(history)
    if patch is None or start is None or BOUNDS[0] <= start <= BOUNDS[1]:
        return patch
    patch["patch"]["log_std_init"] = 0.0
    patch["why"] += f", from SB3's default start (this run started at log_std {start:.3g})"
    return patch
