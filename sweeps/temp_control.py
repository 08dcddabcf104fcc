"""A staged furnace temperature-control environment that reproduces the "dead policy gradient" report.

Modelled on the ``TempControlSeqEnv`` of the RecurrentPPO question in ``shared/seeds/002_fbda76be97adc78e.txt``
(re-implemented from its description; the post's ``PredNextState`` and ``ComputeZoneReward`` were never shown,
so :func:`pred_next_state` and :func:`compute_zone_reward` are simple stand-ins). Entry point for a sweep spec:
``"sweeps.temp_control:make_temp_control"``. Nothing is registered with Gymnasium.

Process: seven thermocouple zones Z1..Z7 in a row (degC, one step = one hour). Action ``MultiDiscrete([4, 4])``:
heating level 0..3 of actuator 0 (zone Z2) and actuator 1 (zones Z5 and Z6), as in the post. Observation
``{"obs": Box(1200, 1300, (5, 7), float32)}``: the last ``history`` readings of all zones, oldest first (the post
put the stage index 0..2 in a 7th column, outside the box's bounds; here the stage is not observed at all).

Stages, by step index ``t`` (steps already taken in the episode); defaults follow the post's counters:

* ``"pre"``: ``t < phase_change_start`` (8): heating up before the material's phase change.
* ``"phase_change"``: the next ``phase_change_steps`` (4) steps. The post forces the action to ``[0, 0]`` here.
* ``"post"``: the rest of the ``episode_length`` (24) steps, 12 by default.

Curriculum phases (``phase=``; see :data:`PHASES`) decide which stages pay reward and where the agent has control:

=============  ================  =========================  ==========================================
phase          rewarded stages   action replaced by [0, 0]  zero-reward steps / overridden (defaults)
=============  ================  =========================  ==========================================
pretrain       pre               phase_change               16 / 4 of 24
stage2_only    post              phase_change               12 / 4 of 24
full           all               none                       0 / 0 (not in the post: the repaired env)
=============  ================  =========================  ==========================================

How it reproduces the report: in "pretrain" two thirds of every episode pays exactly 0, and in "phase_change" the
agent's choice is discarded (the post's stage-1 penalty ``-|a0 + a1|`` is computed on the overridden action, so it
is 0 too). The stage is not observed, so the LSTM must infer it from time; per-step rewards are at most
``len(reward_zones)`` (2), and with ``VecNormalize(norm_reward=True)`` the little signal left is squashed further.
The critic first chases the return scale (large, falling value loss; explained variance ~0), the advantages the
actor sees are noise, and the policy stays uniform: the report's entropy loss -2.77 is exactly ``-ln 16``, the
entropy of a uniform ``MultiDiscrete([4, 4])`` policy. (In the post's own "stage2_only" branch the stage never
advances, so every reward is 0; ``phase="stage2_only", phase_change_start=episode_length`` reproduces that.)
Episodes end with ``terminated=True`` after ``episode_length`` steps, like the post's ``done``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

T_MIN, T_MAX = 1200.0, 1300.0
N_ZONES = 7
#: Zone temperatures (degC) the furnace relaxes to with all heating off; Z1..Z6 lie near the post's readings.
EQUILIBRIUM = np.array([1219.0, 1223.0, 1239.0, 1242.5, 1239.5, 1243.0, 1241.0])
#: Zones (0-based) heated by each actuator: actuator 0 -> Z2, actuator 1 -> Z5 and Z6.
ACTUATOR_ZONES: tuple[tuple[int, ...], ...] = ((1,), (4, 5))
STAGES = ("pre", "phase_change", "post")
PHASES: dict[str, dict[str, frozenset[str]]] = {
    "pretrain": {"rewarded": frozenset({"pre"}), "overridden": frozenset({"phase_change"})},
    "stage2_only": {"rewarded": frozenset({"post"}), "overridden": frozenset({"phase_change"})},
    "full": {"rewarded": frozenset(STAGES), "overridden": frozenset()},
}


def pred_next_state(
    temps: np.ndarray,
    action: Sequence[int] | np.ndarray,
    rng: np.random.Generator,
    *,
    equilibrium: np.ndarray = EQUILIBRIUM,
    relax: float = 0.2,
    gain: float = 2.0,
    coupling: float = 0.05,
    noise_std: float = 0.1,
) -> np.ndarray:
    """One hour of a first-order thermal model; temperatures in degC, all rates per step (hour).

    ``T'_i = T_i + relax * (E_i - T_i) + gain * u_i + coupling * sum_{j in {i-1, i+1}} (T_j - T_i) + eps_i``,
    clipped to [1200, 1300], where ``E`` is ``equilibrium``, ``u_i`` the heating level (0..3) of the actuator
    that heats zone ``i`` (0 for unheated zones, see :data:`ACTUATOR_ZONES`) and ``eps_i ~ N(0, noise_std^2)``
    sensor noise in degC. A constant level ``u`` settles ``gain * u / relax`` degC above ``E`` (10 per level by
    default) with a time constant of ``1 / relax`` = 5 hours. The noise is drawn whatever the action, so two
    runs from the same generator state differ only through their actions.
    """
    t = np.asarray(temps, dtype=np.float64)
    heat = np.zeros_like(t)
    for level, zones in zip(np.asarray(action), ACTUATOR_ZONES, strict=False):
        heat[list(zones)] += float(level)
    exchange = np.zeros_like(t)
    exchange[1:] += t[:-1] - t[1:]
    exchange[:-1] += t[1:] - t[:-1]
    noise = rng.normal(0.0, noise_std, size=t.shape)
    return np.clip(t + relax * (equilibrium - t) + gain * heat + coupling * exchange + noise, T_MIN, T_MAX)


def compute_zone_reward(
    temps: np.ndarray,
    target_band: tuple[float, float] = (1240.0, 1260.0),
    zones: Sequence[int] | None = None,
    falloff: float = 10.0,
) -> float:
    """How many of ``zones`` (0-based; all when None) lie inside ``target_band`` = (low, high), in degC.

    ``r = sum_i max(0, 1 - d_i / falloff)`` with ``d_i`` the distance (degC) of zone ``i`` from the band (0
    inside it): 1 per zone inside the band, partial credit within ``falloff`` degC of it. ``falloff=0`` gives
    the plain count. Range ``[0, len(zones)]``. Pure: stages that pay nothing are handled by the environment.
    """
    low, high = target_band
    t = np.asarray(temps, dtype=np.float64)[list(range(len(temps)) if zones is None else zones)]
    dist = np.maximum(low - t, 0.0) + np.maximum(t - high, 0.0)
    score = (dist == 0.0).astype(float) if falloff <= 0 else np.maximum(0.0, 1.0 - dist / falloff)
    return float(score.sum())


class TempControlSeqEnv(gym.Env[dict[str, np.ndarray], np.ndarray]):
    """Staged 24-step furnace episodes; see the module docstring for stages, phases and defaults.

    ``info`` of every step holds ``stage`` (str), ``overridden`` (the agent's action was replaced),
    ``applied_action`` (what the furnace received) and ``rewarded`` (the stage pays reward in this phase).
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        phase: str = "pretrain",
        *,
        episode_length: int = 24,
        history: int = 5,
        phase_change_start: int = 8,
        phase_change_steps: int = 4,
        target_band: tuple[float, float] = (1240.0, 1260.0),
        reward_zones: Sequence[int] = (1, 5),
        falloff: float = 10.0,
        noise_std: float = 0.1,
        init_spread: float = 3.0,
    ) -> None:
        for name, value, least in (
            ("episode_length", episode_length, 1),
            ("history", history, 1),
            ("phase_change_start", phase_change_start, 0),
            ("phase_change_steps", phase_change_steps, 0),
        ):
            if int(value) != value or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        if not target_band[0] <= target_band[1]:
            raise ValueError(f"target_band must be (low, high) with low <= high, got {target_band!r}")
        if any(not 0 <= z < N_ZONES for z in reward_zones):
            raise ValueError(f"reward_zones must lie in 0..{N_ZONES - 1}, got {tuple(reward_zones)!r}")
        if noise_std < 0 or init_spread < 0:
            raise ValueError("noise_std and init_spread must be >= 0")
        self.episode_length, self.history = int(episode_length), int(history)
        self.phase_change_start, self.phase_change_steps = int(phase_change_start), int(phase_change_steps)
        self.target_band = (float(target_band[0]), float(target_band[1]))
        self.reward_zones, self.falloff = tuple(int(z) for z in reward_zones), float(falloff)
        self.noise_std, self.init_spread = float(noise_std), float(init_spread)
        self.set_phase(phase)
        self.observation_space = spaces.Dict(
            {"obs": spaces.Box(T_MIN, T_MAX, shape=(self.history, N_ZONES), dtype=np.float32)}
        )
        self.action_space = spaces.MultiDiscrete([4, 4])
        self._t = 0
        self._temps = EQUILIBRIUM.copy()
        self._readings = np.tile(self._temps, (self.history, 1))

    def set_phase(self, phase: str) -> None:
        """Switch the curriculum phase (the post's ``set_curriculum_phase``); applies from the next step."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; allowed: {', '.join(repr(p) for p in PHASES)}")
        self.phase = phase

    def stage_at(self, t: int) -> str:
        """The stage of the step taken when ``t`` steps of the episode are already done."""
        if t < self.phase_change_start:
            return "pre"
        return "phase_change" if t < self.phase_change_start + self.phase_change_steps else "post"

    def stage_plan(self) -> list[tuple[str, bool, bool]]:
        """``(stage, overridden, rewarded)`` for every step of an episode in the current phase."""
        rules = PHASES[self.phase]
        return [
            (s, s in rules["overridden"], s in rules["rewarded"])
            for s in map(self.stage_at, range(self.episode_length))
        ]

    def _obs(self) -> dict[str, np.ndarray]:
        return {"obs": np.clip(self._readings, T_MIN, T_MAX).astype(np.float32)}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start at equilibrium plus uniform jitter of +-``init_spread`` degC, the history filled with it."""
        super().reset(seed=seed)
        self._t = 0
        jitter = self.np_random.uniform(-self.init_spread, self.init_spread, size=N_ZONES)
        self._temps = np.clip(EQUILIBRIUM + jitter, T_MIN, T_MAX)
        self._readings = np.tile(self._temps, (self.history, 1))
        return self._obs(), {"stage": self.stage_at(0)}

    def step(
        self, action: Sequence[int] | np.ndarray
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self._t >= self.episode_length:
            raise RuntimeError("the episode is over; call reset()")
        chosen = np.asarray(action)
        if not self.action_space.contains(chosen):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        stage, rules = self.stage_at(self._t), PHASES[self.phase]
        overridden, rewarded = stage in rules["overridden"], stage in rules["rewarded"]
        applied = np.zeros(2, dtype=np.int64) if overridden else chosen.astype(np.int64)
        self._temps = pred_next_state(self._temps, applied, self.np_random, noise_std=self.noise_std)
        self._readings = np.vstack([self._readings[1:], self._temps])
        reward = (
            compute_zone_reward(self._temps, self.target_band, self.reward_zones, self.falloff) if rewarded else 0.0
        )
        self._t += 1
        info = {"stage": stage, "overridden": overridden, "applied_action": applied, "rewarded": rewarded}
        return self._obs(), reward, self._t >= self.episode_length, False, info


def make_temp_control(**kwargs: Any) -> TempControlSeqEnv:
    """Entry point ``"sweeps.temp_control:make_temp_control"``: a new env built from the spec's kwargs."""
    return TempControlSeqEnv(**kwargs)
