"""Pre-clip gradient norms, which stable-baselines3 computes and throws away.

``GradNormMonitor(policy)`` hooks every parameter: after each backward pass it keeps the
squared norm of each parameter's gradient, and when the optimizer steps (after SB3 has
clipped) it closes one record from the values seen *before* clipping. Norms are split by
role, from SB3's parameter names:

* ``actor``: action head, policy MLP, actor LSTM, actor feature extractor
* ``critic``: value head, value MLP, critic LSTM / projection, critic feature extractor
* ``log_std``: the state-independent log standard deviation (and gSDE's)
* ``shared``: a feature extractor both use

A huge value loss can dominate a shared clipped norm and starve the actor: the split shows it.
"""
from __future__ import annotations

import math
from typing import Any

import torch as th

_ACTOR = ("action_net", "mlp_extractor.policy_net", "lstm_actor", "pi_features_extractor", "actor.")
_CRITIC = ("value_net", "mlp_extractor.value_net", "lstm_critic", "critic.", "vf_features_extractor")
ROLES = ("actor", "critic", "log_std", "shared")


def role_of(name: str) -> str:
    if name == "log_std" or name.startswith("log_std"):
        return "log_std"
    if name.startswith(_ACTOR):
        return "actor"
    if name.startswith(_CRITIC):
        return "critic"
    return "shared"


class GradNormMonitor:
    """Records the pre-clip gradient norm of every optimizer step of ``policy.optimizer``."""

    def __init__(self, policy: th.nn.Module, optimizers: list[th.optim.Optimizer] | None = None,
                 max_grad_norm: float | None = None) -> None:
        self.max_grad_norm = max_grad_norm
        self._squares: dict[int, th.Tensor] = {}
        self._role: dict[int, str] = {}
        self._handles: list[Any] = []
        self.steps: list[dict[str, float]] = []
        for name, param in policy.named_parameters():
            if param.requires_grad:
                self._role[id(param)] = role_of(name)
                self._handles.append(param.register_post_accumulate_grad_hook(self._seen))
        if optimizers is None:  # on-policy SB3: one optimizer; off-policy: the actor's and the critic's
            single = getattr(policy, "optimizer", None)
            optimizers = [single] if single is not None else [m.optimizer for m in (policy.actor, policy.critic)]
        for optimizer in optimizers:
            self._handles.append(optimizer.register_step_pre_hook(self._close))

    def _seen(self, param: th.Tensor) -> None:
        if param.grad is not None:
            self._squares[id(param)] = param.grad.detach().pow(2).sum()

    def _close(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self._squares:
            return
        by_role: dict[str, float] = {}
        for key, square in self._squares.items():
            role = self._role[key]
            by_role[role] = by_role.get(role, 0.0) + float(square)
        self._squares.clear()
        record = {role: math.sqrt(value) for role, value in by_role.items()}
        record["total"] = math.sqrt(sum(by_role.values()))
        self.steps.append(record)

    def pop(self) -> dict[str, float]:
        """Summary of the steps since the last call, as ``train/*`` metric names; {} if none."""
        steps, self.steps = self.steps, []
        if not steps:
            return {}
        totals = [s["total"] for s in steps]
        out = {"train/grad_norm": sum(totals) / len(totals), "train/grad_norm_max": max(totals)}
        for role in ROLES:  # averaged over the steps that touched the role (off-policy steps touch one)
            values = [s[role] for s in steps if role in s]
            if values:
                out[f"train/grad_norm_{role}"] = sum(values) / len(values)
        if self.max_grad_norm is not None and math.isfinite(self.max_grad_norm):
            out["train/grad_clipped_fraction"] = sum(t > self.max_grad_norm for t in totals) / len(totals)
        return out

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def grad_norm_callback(monitor: GradNormMonitor) -> Any:
    """An SB3 callback writing the monitor's summary into the logger after every update.

    SB3 trains between ``on_rollout_end`` and the next ``on_rollout_start``; the values recorded
    here join that update's ``train/*`` values. The last update is recorded at training end.
    """
    from stable_baselines3.common.callbacks import BaseCallback

    class GradNormCallback(BaseCallback):
        def _record(self) -> None:
            for key, value in monitor.pop().items():
                self.logger.record(key, value)

        def _on_rollout_start(self) -> None:
            self._record()

        def _on_training_end(self) -> None:
            self._record()

        def _on_step(self) -> bool:
            return True

    return GradNormCallback()
