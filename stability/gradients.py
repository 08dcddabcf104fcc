"""Pre-clip gradient norms, which stable-baselines3 computes and throws away.

``GradNormMonitor(policy)`` records, for each optimizer step, the gradient norm *before*
clipping, split by role from SB3's parameter names:

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
    if name.startswith("log_std"):
        return "log_std"
    if name.startswith(_ACTOR):
        return "actor"
    if name.startswith(_CRITIC):
        return "critic"
    return "shared"


class GradNormMonitor:
    """Records the pre-clip gradient norm of every optimizer step, split by role.

    SB3 clips with ``th.nn.utils.clip_grad_norm_`` and throws the norm away. While installed,
    the monitor stands in for that function: it takes the per-parameter norms in one fused call,
    keeps them, and clips with them. An optimizer step with no clipping before it (off-policy algorithms, TRPO's
    critic, ``max_grad_norm: off`` still clips with inf) reads the unclipped gradients at the
    step itself. No per-parameter hooks: the cost stays a fraction of a percent of training.
    """

    def __init__(
        self,
        policy: th.nn.Module,
        optimizers: list[th.optim.Optimizer] | None = None,
        max_grad_norm: float | None = None,
    ) -> None:
        self.max_grad_norm = max_grad_norm
        self._role = {id(p): ROLES.index(role_of(name)) for name, p in policy.named_parameters()}
        # per parameter list (built once): each parameter's role index, and the roles the list touches
        self._index: dict[tuple[int, ...], tuple[th.Tensor, list[int]]] = {}
        self._pending: tuple[tuple[int, ...], th.Tensor] | None = None
        # one entry per optimizer step: the parameter list's key and its per-parameter norms. The
        # split by role is summed at pop(), for all the steps at once: A2C steps every few env
        # steps, and per-step bookkeeping is what its training time would notice.
        self.steps: list[tuple[tuple[int, ...], th.Tensor]] = []
        if optimizers is None:  # on-policy SB3: one optimizer; off-policy: the actor's and the critic's
            single = getattr(policy, "optimizer", None)
            optimizers = [single] if single is not None else [getattr(policy, m).optimizer for m in ("actor", "critic")]
        self._handles = [o.register_step_pre_hook(self._close) for o in optimizers]
        self._original = th.nn.utils.clip_grad_norm_
        th.nn.utils.clip_grad_norm_ = self._clip

    def _clip(
        self,
        parameters: Any,
        max_norm: float,
        norm_type: float = 2.0,
        error_if_nonfinite: bool = False,
        foreach: bool | None = None,
    ) -> th.Tensor:
        """``clip_grad_norm_`` that keeps the norms it computes (same arithmetic as torch's for the
        L2 norm SB3 uses: one norm pass instead of two, so recording costs next to nothing)."""
        params = [parameters] if isinstance(parameters, th.Tensor) else list(parameters)
        present = [p for p in params if p.grad is not None]
        if not present:
            return self._original(params, max_norm, norm_type, error_if_nonfinite, foreach)
        self._pending = self._norms(present)
        if norm_type != 2.0 or error_if_nonfinite:
            return self._original(params, max_norm, norm_type, error_if_nonfinite, foreach)
        total = th.linalg.vector_norm(self._pending[1])
        th._foreach_mul_([p.grad for p in present if p.grad is not None], th.clamp(max_norm / (total + 1e-6), max=1.0))
        return total

    @staticmethod
    def _norms(present: list[th.Tensor]) -> tuple[tuple[int, ...], th.Tensor]:
        """The parameter list's key and the L2 norm of each parameter's gradient (one fused call)."""
        norms = th.stack(th._foreach_norm([p.grad.detach() for p in present if p.grad is not None]))
        return tuple(id(p) for p in present), norms

    def _close(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        pending, self._pending = self._pending, None
        if pending is None:  # nothing clipped before this step: its gradients are the raw ones
            present = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
            if not present:
                return
            pending = self._norms(present)
        self.steps.append(pending)

    def _by_role(self) -> list[dict[str, float]]:
        """Each step's gradient norm per role it touched, and in all (``total``)."""
        # the steps grouped by parameter list: each group's split by role is one index_add
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, (key, _) in enumerate(self.steps):
            groups.setdefault(key, []).append(i)
        rows: list[dict[str, float]] = [{} for _ in self.steps]
        for key, at in groups.items():
            if key not in self._index:
                roles = [self._role.get(i, ROLES.index("shared")) for i in key]
                self._index[key] = (th.tensor(roles, device=self.steps[at[0]][1].device), sorted(set(roles)))
            index, here = self._index[key]
            stacked = th.stack([self.steps[i][1] for i in at]).double()
            squared = th.zeros(len(at), len(ROLES), dtype=stacked.dtype, device=stacked.device)
            per_role = squared.index_add_(1, index, stacked * stacked).tolist()
            for i, values in zip(at, per_role, strict=True):
                row = {ROLES[r]: math.sqrt(values[r]) for r in here}
                row["total"] = math.sqrt(sum(values[r] for r in here))
                rows[i] = row
        return rows

    def pop(self) -> dict[str, float]:
        """Summary of the steps since the last call, as ``train/*`` metric names; {} if none."""
        if not self.steps:
            return {}
        steps = self._by_role()
        self.steps = []
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
        if th.nn.utils.clip_grad_norm_ is self._clip:
            th.nn.utils.clip_grad_norm_ = self._original


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
