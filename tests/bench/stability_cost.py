"""Cost of StabilityCallback: the same SB3 runs with and without it, alternated in one process.

Three configurations cover the range of update sizes: PPO on CartPole with SB3's defaults
(2048-step rollouts, 10 epochs), A2C on CartPole as rl-zoo3 tunes it (8 envs x 5 steps: an
update every 40 steps, the worst case for per-update work), and PPO on Pendulum (Gaussian
policy: log_std and action-mean probes). Prints one JSON object.
    python stability_cost.py [REPEAT] [STEPS]
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
from stable_baselines3 import A2C, PPO
from stable_baselines3.common.env_util import make_vec_env

from stability import StabilityCallback

CONFIGS = {
    "ppo_cartpole_defaults": (PPO, "CartPole-v1", 1, {}),
    "a2c_cartpole_zoo": (A2C, "CartPole-v1", 8, {"ent_coef": 0.0}),
    "ppo_pendulum": (PPO, "Pendulum-v1", 4, {"n_steps": 1024, "gamma": 0.9, "learning_rate": 1e-3}),
}


def train(name: str, with_callback: bool, steps: int) -> tuple[float, float]:
    algo, env_id, n_envs, kwargs = CONFIGS[name]
    model = algo("MlpPolicy", make_vec_env(env_id, n_envs=n_envs, seed=0), seed=0, device="cpu", **kwargs)
    callback = StabilityCallback() if with_callback else None
    wall, cpu = time.perf_counter(), time.process_time()
    model.learn(steps, callback=callback)
    return time.perf_counter() - wall, time.process_time() - cpu


def main(repeat: int, steps: int) -> None:
    torch.set_num_threads(1)
    out: dict[str, dict] = {}
    for name in CONFIGS:
        train(name, True, 2048)  # warm-up: imports, first-call costs
        runs: dict[str, list[tuple[float, float]]] = {"plain": [], "callback": []}
        for i in range(repeat):  # alternate which variant goes first
            for variant in ("plain", "callback") if i % 2 == 0 else ("callback", "plain"):
                runs[variant].append(train(name, variant == "callback", steps))
        med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in runs.items()}
        out[name] = {
            "plain_wall_s": [round(w, 2) for w, _ in runs["plain"]],
            "callback_wall_s": [round(w, 2) for w, _ in runs["callback"]],
            "ratio_wall": round(med["callback"][0] / med["plain"][0], 4),
            "ratio_cpu": round(med["callback"][1] / med["plain"][1], 4),
        }
    print(json.dumps({"steps": steps, "repeat": repeat, "configs": out, "target": "<= 1.03"}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4, int(sys.argv[2]) if len(sys.argv) > 2 else 20_000)
