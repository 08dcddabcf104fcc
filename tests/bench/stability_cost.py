"""Cost of StabilityCallback: the same SB3 runs with and without it, alternated in one process.

Three configurations cover the range of update sizes: PPO on CartPole with SB3's defaults
(2048-step rollouts, 10 epochs), A2C on CartPole as rl-zoo3 tunes it (8 envs x 5 steps: an
update every 40 steps, the worst case for per-update work), and PPO on Pendulum (Gaussian
policy: log_std and action-mean probes). Prints one JSON object.

Two figures per configuration. ``ratio_wall``/``ratio_cpu``: median training time with the
callback over the median without, the runs alternated; on a shared machine their noise (often
+-10% between neighbouring runs) is larger than the cost measured. ``hooks_fraction``: the time
spent inside the callback's own hooks, timed in the run, over that run's training time; both
stretch together when the machine slows, so it is steady. It leaves out the gradient-norm
monitor, whose clip replaces torch's (``clip_us``: one clip of the policy's gradients, ours
against torch's, timed here), and cache effects on the training itself.
    python stability_cost.py [REPEAT] [STEPS] [CONFIG ...]
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time

import torch
from stable_baselines3 import A2C, PPO
from stable_baselines3.common.env_util import make_vec_env

from stability import StabilityCallback
from stability.gradients import GradNormMonitor

HOOKS = ("_init_callback", "_on_step", "_on_rollout_start", "_on_rollout_end", "_on_training_end")


class TimedCallback(StabilityCallback):
    """StabilityCallback with a stopwatch around each of its hooks."""

    spent = 0.0


def _timed(name: str):  # type: ignore[no-untyped-def]
    inner = getattr(StabilityCallback, name)

    def hook(self, *args):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        try:
            return inner(self, *args)
        finally:
            self.spent += time.perf_counter() - start

    return hook


for _name in HOOKS:
    setattr(TimedCallback, _name, _timed(_name))

CONFIGS = {
    "ppo_cartpole_defaults": (PPO, "CartPole-v1", 1, {}),
    "a2c_cartpole_zoo": (A2C, "CartPole-v1", 8, {"ent_coef": 0.0}),
    "ppo_pendulum": (PPO, "Pendulum-v1", 4, {"n_steps": 1024, "gamma": 0.9, "learning_rate": 1e-3}),
}


def _model(name: str):  # type: ignore[no-untyped-def]
    algo, env_id, n_envs, kwargs = CONFIGS[name]
    return algo("MlpPolicy", make_vec_env(env_id, n_envs=n_envs, seed=0), seed=0, device="cpu", **kwargs)


def train(name: str, with_callback: bool, steps: int) -> tuple[float, float, float]:
    """Wall and CPU seconds of ``learn``, and the seconds spent in the callback's hooks."""
    model = _model(name)
    callback = TimedCallback() if with_callback else None
    wall, cpu = time.perf_counter(), time.process_time()
    model.learn(steps, callback=callback)
    return time.perf_counter() - wall, time.process_time() - cpu, callback.spent if callback else 0.0


def clip_us(name: str, calls: int = 1000, rounds: int = 5) -> tuple[float, float]:
    """Microseconds per clip of the policy's gradients, the monitor's and torch's: the fastest of
    ``rounds`` alternated rounds of ``calls`` each (the least disturbed by the machine)."""
    policy = _model(name).policy
    for p in policy.parameters():
        p.grad = torch.randn_like(p)
    original = torch.nn.utils.clip_grad_norm_
    monitor = GradNormMonitor(policy, max_grad_norm=0.5)
    best = [math.inf, math.inf]
    for i in range(rounds):
        for k in (0, 1) if i % 2 == 0 else (1, 0):
            clip = (monitor._clip, original)[k]
            start = time.perf_counter()
            for _ in range(calls):
                clip(policy.parameters(), 0.5)
            best[k] = min(best[k], (time.perf_counter() - start) / calls * 1e6)
    monitor.close()
    return best[0], best[1]


def main(repeat: int, steps: int, names: list[str]) -> None:
    torch.set_num_threads(1)
    out: dict[str, dict] = {}
    for name in names or CONFIGS:
        train(name, True, 2048)  # warm-up: imports, first-call costs
        runs: dict[str, list[tuple[float, float, float]]] = {"plain": [], "callback": []}
        for i in range(repeat):  # alternate which variant goes first
            for variant in ("plain", "callback") if i % 2 == 0 else ("callback", "plain"):
                runs[variant].append(train(name, variant == "callback", steps))
        med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in runs.items()}
        ours, torchs = clip_us(name)
        out[name] = {
            "plain_wall_s": [round(r[0], 2) for r in runs["plain"]],
            "callback_wall_s": [round(r[0], 2) for r in runs["callback"]],
            "hooks_fraction": round(statistics.median(r[2] / r[0] for r in runs["callback"]), 4),
            "clip_us": {"monitor": round(ours, 1), "torch": round(torchs, 1)},
            "ratio_wall": round(med["callback"][0] / med["plain"][0], 4),
            "ratio_cpu": round(med["callback"][1] / med["plain"][1], 4),
        }
    print(json.dumps({"steps": steps, "repeat": repeat, "configs": out, "target": "<= 1.03"}))


if __name__ == "__main__":
    unknown = [name for name in sys.argv[3:] if name not in CONFIGS]
    if unknown:
        sys.exit(f"stability_cost.py: unknown configuration {unknown}; allowed: {', '.join(CONFIGS)}")
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4, int(sys.argv[2]) if len(sys.argv) > 2 else 20_000, sys.argv[3:])
