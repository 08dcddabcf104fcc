"""``stuck_value_loss``: the critic is not learning.

Certain when, after ``min_progress`` of the budget (or at the end of a run of unknown budget),
the value loss over the last window has not fallen below ``fall_ratio`` times its level over
the first window, explained variance stays at or below ``ev_max``, and the loss is not small
against the returns it fits (``value_loss / mean(return^2) >= relative_floor``; a converged
policy with near-constant returns has EV <= 0 and a tiny, flat loss: that is not stuck).
Explained variance is never used alone. When the episode returns are clearly rising (the critic
chases moving targets) the finding is only a warning, unless the critic's output is pinned
(|EV| < 1e-3: a constant prediction, e.g. under heavy weight decay).
"""
from __future__ import annotations

import math
from typing import Any

from stability.detectors._base import Detector, median, progress, returns_rose, window_size
from stability.signals import History
from stability.verdict import Finding


class StuckValueLoss(Detector):
    name = "stuck_value_loss"

    def detect(self, history: History, t: dict[str, Any], final: bool) -> Finding | None:
        n = len(history)
        if n < t["min_updates"] or not history.has("value_loss") or not history.has("explained_variance"):
            return None
        done = progress(history)
        if not final and (done is None or done < t["min_progress"]):
            return None
        w = window_size(history, t)
        early = median(history.before("value_loss", w))
        late = median(history.values("value_loss", last=w))
        ev = median(history.values("explained_variance", last=w))
        evidence: dict[str, Any] = {"value_loss_first_window": early, "value_loss_last_window": late,
                                    "explained_variance_median": ev, "window_updates": w}
        if not (math.isfinite(early) and math.isfinite(late) and math.isfinite(ev)):
            return None
        if late < t["fall_ratio"] * early or ev > t["ev_max"]:
            return None
        rms = history.values("return_rms", last=w)
        if rms:
            relative = late / max(median(rms) ** 2, 1e-12)
            evidence["value_loss_over_return_sq"] = relative
            if relative < t["relative_floor"]:
                return None
        causes = _causes(history, t, evidence)
        # A critic chasing returns that rise as the policy improves (small rollouts, growing
        # episodes) lags without being stuck: a warning, unless its output is pinned (EV ~ 0 exactly).
        lagging = returns_rose(history, w) and abs(ev) >= 1e-3
        if lagging:
            causes.insert(0, "the returns it fits are rising as the policy improves; the critic lags behind them")
        return Finding(self.name, history.step_of(n - w),
                       f"value loss has not fallen ({early:.3g} -> {late:.3g}) and explained variance stays {ev:.2f}",
                       evidence, _advice(causes), causes, certain=not lagging)


def _causes(history: History, t: dict[str, Any], evidence: dict[str, Any]) -> list[str]:
    ctx, causes = history.context, []
    decay = float(ctx.get("weight_decay", 0.0) or 0.0)
    if decay >= t["weight_decay"]:
        causes.append(f"weight decay {decay:g} pulls the critic's weights towards 0 every step")
    rms = history.values("return_rms")
    if rms and median(rms) > t["return_scale"] and not ctx.get("norm_reward"):
        evidence["return_rms_median"] = median(rms)
        causes.append(f"returns of scale {median(rms):.3g} reach the critic unnormalised")
    ev = evidence.get("explained_variance_median")
    if ev is not None and abs(ev) < 1e-3:
        causes.append(f"the critic predicts a near-constant (explained variance {ev:.1e}): its weights are pinned "
                      "(e.g. by weight decay) or its output is saturated")
    head = ctx.get("value_head_weight_std")
    if head is not None and head > 0.5:
        causes.append(f"the value head starts large (weight std {head:.2g})")
    return causes


def _advice(causes: list[str]) -> list[str]:
    text, advice = " ".join(causes), []
    if "weight decay" in text or "pinned" in text:
        advice.append("weight_decay: 0 (or <= 1e-4), optimizer: adam")
    if "unnormalised" in text:
        advice.append("normalize: {reward: true} or reward_scale to bring returns near 1")
    if "value head" in text:
        advice.append("init_gains: {value: 1.0}")
    advice.append("check the critic's inputs and targets; lower learning_rate if the loss oscillates")
    return advice
