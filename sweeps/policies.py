"""Actor-critic policies with the knobs stable-baselines3 lacks: log_std bounds and init gains.

``log_std_bounds=(low, high)`` keeps the Gaussian log standard deviation inside [low, high]:

* every read of ``policy.log_std`` returns the parameter clamped to the bounds, so every
  distribution built from it (and SB3's ``train/std``) uses the bounded value;
* after every optimizer step the raw parameter is projected back into the bounds.

The projection is what keeps learning possible at the bounds: a clamp alone zeroes the
gradient once the parameter has drifted outside, and it then stays there for good. With the
projection the parameter never leaves [low, high], where the clamp's gradient is the identity
(torch's clamp passes gradients at the bounds themselves), so an update that points back
inside is always followed. The state dict keeps SB3's key ``log_std``; models save and load
with the plain ``PPO.load`` / ``A2C.load`` / ``RecurrentPPO.load`` (rlsweep must be importable).

``init_gains={"hidden": g, "policy": g, "value": g, "lstm": g}`` re-initialises, orthogonally,
the hidden layers (and feature extractors), the action head, the value head, and the LSTM
weights of recurrent policies with those gains; a gain left out keeps SB3's default
(sqrt(2), 0.01, 1; PyTorch's own init for LSTMs).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch as th
from sb3_contrib.common.recurrent.policies import (
    RecurrentActorCriticCnnPolicy,
    RecurrentActorCriticPolicy,
    RecurrentMultiInputActorCriticPolicy,
)
from stable_baselines3.common.policies import ActorCriticCnnPolicy, ActorCriticPolicy, MultiInputActorCriticPolicy
from torch import nn


class _KnobsMixin:
    """Adds ``log_std_bounds`` and ``init_gains`` to an SB3 actor-critic policy class."""

    def __init__(
        self,
        *args: Any,
        log_std_bounds: tuple[float, float] | list[float] | None = None,
        init_gains: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        self.log_std_bounds = tuple(float(b) for b in log_std_bounds) if log_std_bounds is not None else None
        self.init_gains = dict(init_gains or {})
        super().__init__(*args, **kwargs)
        # The optimizer exists now (recurrent policies rebuild it at the end of their __init__).
        self._apply_init_gains()
        if self.log_std_bounds is not None and "log_std" in self._parameters:
            with th.no_grad():
                self._parameters["log_std"].clamp_(*self.log_std_bounds)
            self.optimizer.register_step_post_hook(_projector(self))

    @property
    def log_std(self) -> th.Tensor:
        raw = self._parameters.get("log_std")
        if raw is None:
            raise AttributeError("log_std")
        if self.log_std_bounds is None:
            return raw
        return raw.clamp(*self.log_std_bounds)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(log_std_bounds=self.log_std_bounds, init_gains=self.init_gains)
        return data

    def _apply_init_gains(self) -> None:
        gains = self.init_gains
        if not gains:
            return
        if "hidden" in gains:
            extractors = [self.mlp_extractor, self.features_extractor]
            if not self.share_features_extractor:
                extractors += [self.pi_features_extractor, self.vf_features_extractor]
            for module in extractors:
                module.apply(lambda m: self.init_weights(m, gain=gains["hidden"]))
            if getattr(self, "critic", None) is not None:  # recurrent policy's critic projection
                self.critic.apply(lambda m: self.init_weights(m, gain=gains["hidden"]))
        if "policy" in gains:
            self.action_net.apply(lambda m: self.init_weights(m, gain=gains["policy"]))
        if "value" in gains:
            self.value_net.apply(lambda m: self.init_weights(m, gain=gains["value"]))
        if "lstm" in gains:
            for lstm in (getattr(self, "lstm_actor", None), getattr(self, "lstm_critic", None)):
                if lstm is not None:
                    _init_lstm(lstm, gains["lstm"])


def _init_lstm(lstm: nn.LSTM, gain: float) -> None:
    """Orthogonal init of each gate's block of the LSTM weight matrices; biases zero."""
    for name, param in lstm.named_parameters():
        if name.startswith("weight"):
            for block in param.data.chunk(4, dim=0):
                nn.init.orthogonal_(block, gain=gain)
        else:
            nn.init.zeros_(param.data)


def _projector(policy: nn.Module):
    ref = weakref.ref(policy)

    def project(optimizer: th.optim.Optimizer, args: Any, kwargs: Any) -> None:
        owner = ref()
        if owner is not None:
            with th.no_grad():
                owner._parameters["log_std"].clamp_(*owner.log_std_bounds)

    return project


class BoundedActorCriticPolicy(_KnobsMixin, ActorCriticPolicy):
    pass


class BoundedActorCriticCnnPolicy(_KnobsMixin, ActorCriticCnnPolicy):
    pass


class BoundedMultiInputActorCriticPolicy(_KnobsMixin, MultiInputActorCriticPolicy):
    pass


class BoundedRecurrentActorCriticPolicy(_KnobsMixin, RecurrentActorCriticPolicy):
    pass


class BoundedRecurrentActorCriticCnnPolicy(_KnobsMixin, RecurrentActorCriticCnnPolicy):
    pass


class BoundedRecurrentMultiInputActorCriticPolicy(_KnobsMixin, RecurrentMultiInputActorCriticPolicy):
    pass


def _bounded_actor(actor_base: type) -> type:
    class BoundedActor(actor_base):
        """A squashed-Gaussian actor whose log-std clamp uses ``log_std_bounds`` instead of [-20, 2]."""

        def __init__(self, *args: Any, log_std_bounds: tuple[float, float] = (-20.0, 2.0), **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.log_std_bounds = tuple(float(b) for b in log_std_bounds)

        def get_action_dist_params(self, obs: Any) -> tuple[th.Tensor, th.Tensor, dict[str, th.Tensor]]:
            latent_pi = self.latent_pi(self.extract_features(obs, self.features_extractor))
            mean_actions = self.mu(latent_pi)
            if self.use_sde:
                return mean_actions, self.log_std, dict(latent_sde=latent_pi)
            return mean_actions, self.log_std(latent_pi).clamp(*self.log_std_bounds), {}

    return BoundedActor


def _bounded_squashed(policy_base: type, actor_base: type) -> type:
    actor_class = _bounded_actor(actor_base)

    class BoundedSquashedPolicy(policy_base):
        """SAC/TQC policy passing ``log_std_bounds`` to its actor's clamp."""

        def __init__(
            self, *args: Any, log_std_bounds: tuple[float, float] | list[float] = (-20.0, 2.0), **kwargs: Any
        ) -> None:
            self.log_std_bounds = tuple(float(b) for b in log_std_bounds)
            super().__init__(*args, **kwargs)

        def make_actor(self, features_extractor: Any = None) -> Any:
            actor_kwargs = self._update_features_extractor(self.actor_kwargs, features_extractor)
            return actor_class(**actor_kwargs, log_std_bounds=self.log_std_bounds).to(self.device)

        def _get_constructor_parameters(self) -> dict[str, Any]:
            return super()._get_constructor_parameters() | {"log_std_bounds": self.log_std_bounds}

    return BoundedSquashedPolicy


from sb3_contrib.tqc import policies as _tqc  # noqa: E402
from stable_baselines3.sac import policies as _sac  # noqa: E402

BoundedSACPolicy = _bounded_squashed(_sac.SACPolicy, _sac.Actor)
BoundedSACPolicy.__name__ = BoundedSACPolicy.__qualname__ = "BoundedSACPolicy"
BoundedSACMultiInputPolicy = _bounded_squashed(_sac.MultiInputPolicy, _sac.Actor)
BoundedSACMultiInputPolicy.__name__ = BoundedSACMultiInputPolicy.__qualname__ = "BoundedSACMultiInputPolicy"
BoundedTQCPolicy = _bounded_squashed(_tqc.TQCPolicy, _tqc.Actor)
BoundedTQCPolicy.__name__ = BoundedTQCPolicy.__qualname__ = "BoundedTQCPolicy"
BoundedTQCMultiInputPolicy = _bounded_squashed(_tqc.MultiInputPolicy, _tqc.Actor)
BoundedTQCMultiInputPolicy.__name__ = BoundedTQCMultiInputPolicy.__qualname__ = "BoundedTQCMultiInputPolicy"
_SQUASHED = {
    ("SAC", "MlpPolicy"): BoundedSACPolicy,
    ("SAC", "MultiInputPolicy"): BoundedSACMultiInputPolicy,
    ("TQC", "MlpPolicy"): BoundedTQCPolicy,
    ("TQC", "MultiInputPolicy"): BoundedTQCMultiInputPolicy,
}


def bounded_squashed_policy(algo: str, alias: str) -> type:
    try:
        return _SQUASHED[(algo, alias)]
    except KeyError:
        raise ValueError(f"log_std_bounds for {algo} supports MlpPolicy and MultiInputPolicy, not {alias}") from None


# SB3 policy alias -> the class with knobs
BY_ALIAS = {
    "MlpPolicy": BoundedActorCriticPolicy,
    "CnnPolicy": BoundedActorCriticCnnPolicy,
    "MultiInputPolicy": BoundedMultiInputActorCriticPolicy,
    "MlpLstmPolicy": BoundedRecurrentActorCriticPolicy,
    "CnnLstmPolicy": BoundedRecurrentActorCriticCnnPolicy,
    "MultiInputLstmPolicy": BoundedRecurrentMultiInputActorCriticPolicy,
}

__all__ = ["BY_ALIAS", "bounded_squashed_policy"] + [c.__name__ for c in BY_ALIAS.values()]
