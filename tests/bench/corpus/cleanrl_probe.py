"""Privileged measurements of a run of the CleanRL-style script (``conf/repro/cleanrl_ppo.py``).

The script's agent is measured as a network: its Gaussian (tanh mean, state-independent
log std, without the dropout bug's noise) on fixed probe states, normalised with the training
env's statistics at that moment; its critic on fresh rollouts of an env that carries a frozen
copy of the training normalisation (CleanRL normalises inside the env wrappers).
"""

from __future__ import annotations

import importlib.util
import math
import time
import traceback
from pathlib import Path
from typing import Any

import gymnasium as gym
import measure
import numpy as np
import torch

SCRIPT = Path(__file__).resolve().parents[3] / "conf" / "repro" / "cleanrl_ppo.py"


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("cleanrl_ppo", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wrapper(env: Any, kind: type) -> Any:
    while env is not None:
        if isinstance(env, kind):
            return env
        env = getattr(env, "env", None)
    return None


class _OneEnv:
    """A single gym env behind the few VecEnv calls ``measure.rollout`` makes (auto-reset, SB3 info keys)."""

    def __init__(self, env: gym.Env, seed: int) -> None:
        self.env, self.seed = env, seed

    def reset(self) -> np.ndarray:
        obs, _ = self.env.reset(seed=self.seed)
        return np.asarray(obs)[None]

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        obs, reward, terminated, truncated, info = self.env.step(action[0])
        info = dict(info)
        if terminated or truncated:
            info["TimeLimit.truncated"] = bool(truncated and not terminated)
            info["terminal_observation"] = np.asarray(obs)
            if "episode" in info:
                info["episode"] = {"r": float(np.asarray(info["episode"]["r"]).reshape(-1)[0])}
            obs, _ = self.env.reset()
        return np.asarray(obs)[None], np.array([reward]), np.array([terminated or truncated]), [info]


class Probe:
    def __init__(self, module: Any, args_list: list[str], seed: int, snapshots: int, rollout_steps: int) -> None:
        self.module, self.seed, self.n, self.rollout_steps = module, seed, snapshots, rollout_steps
        self.snapshots: list[measure.Snapshot] = []
        self.rollouts: dict[str, Any] = {}
        self.marks: list[int] = []
        self.half = 0

    def start(self, agent: Any, envs: Any, args: Any) -> None:
        self.args = args
        raw = gym.wrappers.FlattenObservation(gym.make(args.env_id))
        raw.action_space.seed(self.seed)
        obs, _ = raw.reset(seed=self.seed + 777_000)
        kept = []
        for t in range(measure.PROBES * 4):
            obs, _, term, trunc, _ = raw.step(raw.action_space.sample())
            if t % 4 == 0:
                kept.append(np.asarray(obs, dtype=np.float64))
            if term or trunc:
                obs, _ = raw.reset()
        self.probe = np.stack(kept)
        self.marks = [int(args.total_timesteps * (k + 1) / self.n) for k in range(self.n)]
        self.half = self.marks[self.n // 2 - 1]
        self.snapshots.append(self.snapshot(0, agent, envs))
        self.rollouts["start"] = self.rollout(agent, envs)

    def update(self, global_step: int, agent: Any, envs: Any) -> None:
        while self.marks and global_step >= self.marks[0]:
            mark = self.marks.pop(0)
            self.snapshots.append(self.snapshot(global_step, agent, envs))
            if mark == self.half:
                self.rollouts["half"] = self.rollout(agent, envs)

    def end(self, global_step: int, agent: Any, envs: Any) -> None:
        self.snapshots.append(self.snapshot(global_step, agent, envs))
        self.rollouts["end"] = self.rollout(agent, envs)

    def _normalise(self, obs: np.ndarray, envs: Any) -> np.ndarray:
        norm = _wrapper(envs.envs[0], gym.wrappers.NormalizeObservation)
        if norm is None:
            return obs
        rms = norm.obs_rms
        return np.clip((obs - rms.mean) / np.sqrt(rms.var + 1e-8), -10, 10)

    def snapshot(self, step: int, agent: Any, envs: Any) -> measure.Snapshot:
        params = [p.detach().double() for p in agent.parameters()]
        with torch.no_grad():
            x = torch.as_tensor(self._normalise(self.probe, envs), dtype=torch.float32)
            mean = torch.tanh(agent.actor_mean(agent.trunk(x)))
            std = torch.exp(agent.actor_logstd.expand_as(mean))
        return measure.Snapshot(
            step,
            "normal",
            mean=mean.numpy().astype(np.float64),
            std=std.numpy().astype(np.float64),
            param_norm=float(math.sqrt(sum(float((p * p).sum()) for p in params))),
            params_finite=all(bool(torch.isfinite(p).all()) for p in params),
        )

    def rollout(self, agent: Any, envs: Any) -> dict[str, Any]:
        try:
            env = self.module.make_env(self.args.env_id, self.args.gamma, self.args.normalize)()
            for kind, attr in (
                (gym.wrappers.NormalizeObservation, "obs_rms"),
                (gym.wrappers.NormalizeReward, "return_rms"),
            ):
                source, target = _wrapper(envs.envs[0], kind), _wrapper(env, kind)
                if source is not None and target is not None:
                    setattr(target, attr, __import__("copy").deepcopy(getattr(source, attr)))
                    target.update_running_mean = False

            def step(obs: np.ndarray, state: Any, start: bool) -> tuple[np.ndarray, float, Any]:
                with torch.no_grad():
                    x = torch.as_tensor(obs, dtype=torch.float32)
                    action, _, _, value = agent.get_action_and_value(x)
                return action.numpy(), float(value.reshape(-1)[0]), None

            return measure.rollout(
                step, _OneEnv(env, self.seed + 555_000), self.rollout_steps, lambda o: o, lambda r: r, self.args.gamma
            )
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"[:500]}


def run(case: dict[str, Any], seed: int, out: Path, snapshots: int, rollout_steps: int) -> dict[str, Any]:
    from run import _summarise

    module = _script()
    argv = [
        "--total-timesteps",
        str(case["total_timesteps"]),
        "--seed",
        str(seed),
        "--logdir",
        str(out / "tb"),
        *case.get("args", []),
    ]
    probe = Probe(module, argv, seed, snapshots, rollout_steps)
    error = None
    started = time.perf_counter()
    try:
        module.main(argv, hook=probe)
    except Exception as exc:
        error = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    record = {"snapshots": probe.snapshots, "rollouts": probe.rollouts}
    return {
        "history": None,
        "error": error,
        "train_seconds": time.perf_counter() - started,
        "timesteps": int(case["total_timesteps"]),
        "callback_verdict": None,
        "stopped_by": None,
        "measurements": _summarise(record, int(case["total_timesteps"])),
    }
