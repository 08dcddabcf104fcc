"""Cost of the log_std bound and the pre-clip gradient-norm logging, against the same PPO config without them.

Runs in one process, alternating the two variants so machine noise hits both alike; prints
one JSON object with the per-run seconds and the ratio of medians.
    python knob_cost.py [REPEAT] [STEPS]
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from stability.gradients import GradNormMonitor, grad_norm_callback
from sweeps.policies import BoundedActorCriticPolicy

HYPERPARAMS = dict(
    n_steps=1024, batch_size=64, n_epochs=10, gamma=0.9, learning_rate=1e-3, policy_kwargs={"net_arch": [64, 64]}
)


def train(with_knobs: bool, steps: int) -> tuple[float, float]:
    env = make_vec_env("Pendulum-v1", n_envs=4, seed=0)
    kwargs = dict(HYPERPARAMS, policy_kwargs=dict(HYPERPARAMS["policy_kwargs"]))
    policy = "MlpPolicy"
    if with_knobs:
        policy = BoundedActorCriticPolicy
        kwargs["policy_kwargs"]["log_std_bounds"] = [-5.0, 2.0]
    model = PPO(policy, env, seed=0, device="cpu", **kwargs)
    monitor = GradNormMonitor(model.policy, max_grad_norm=model.max_grad_norm) if with_knobs else None
    wall, cpu = time.perf_counter(), time.process_time()
    model.learn(steps, callback=grad_norm_callback(monitor) if monitor else None)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if monitor:
        monitor.close()
    return wall, cpu


def main(repeat: int, steps: int) -> None:
    torch.set_num_threads(1)
    runs: dict[str, list[tuple[float, float]]] = {"plain": [], "knobs": []}
    train(False, 2048)  # warm-up
    for i in range(repeat):  # alternate which variant goes first
        for variant in ("plain", "knobs") if i % 2 == 0 else ("knobs", "plain"):
            runs[variant].append(train(variant == "knobs", steps))
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in runs.items()}
    print(
        json.dumps(
            {
                "steps": steps,
                "repeat": repeat,
                "plain_s": [round(w, 3) for w, _ in runs["plain"]],
                "knobs_s": [round(w, 3) for w, _ in runs["knobs"]],
                "ratio_wall": round(med["knobs"][0] / med["plain"][0], 4),
                "ratio_cpu": round(med["knobs"][1] / med["plain"][1], 4),
                "target": "<= 1.02",
            }
        )
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8, int(sys.argv[2]) if len(sys.argv) > 2 else 8192)
