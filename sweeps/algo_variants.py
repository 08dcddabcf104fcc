"""Algorithm subclasses for knobs that need more than constructor arguments (imports SB3: load lazily).

``with_critic_rate(SAC)``: SB3 gives the actor and the critic of SAC, TD3 and TQC separate
optimizers but one learning-rate schedule, re-applied to both at every update. The subclass
applies its own schedule to the critic's optimizer after SB3's update, and logs it as
``train/critic_learning_rate``. Saved models load with the plain ``SAC.load`` (the critic rate
then only matters if training continues).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any


@cache
def with_critic_rate(base: type) -> type:
    class CriticRate(base):
        def __init__(self, *args: Any, critic_learning_rate: float | Callable[[float], float], **kwargs: Any) -> None:
            self.critic_learning_rate = critic_learning_rate
            super().__init__(*args, **kwargs)

        def _critic_rate(self, progress_remaining: float) -> float:
            rate = self.critic_learning_rate
            return float(rate(progress_remaining) if callable(rate) else rate)

        def _setup_model(self) -> None:
            super()._setup_model()
            for group in self.critic.optimizer.param_groups:
                group["lr"] = self._critic_rate(1.0)

        def _update_learning_rate(self, optimizers: Any) -> None:
            super()._update_learning_rate(optimizers)
            rate = self._critic_rate(self._current_progress_remaining)
            for group in self.critic.optimizer.param_groups:
                group["lr"] = rate
            self.logger.record("train/critic_learning_rate", rate)

    CriticRate.__name__ = CriticRate.__qualname__ = f"{base.__name__}WithCriticRate"
    return CriticRate
