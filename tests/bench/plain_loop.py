"""Baseline for the overhead benchmark: the same configs as a plain loop of SB3 calls, no rlsweep.

Usage: python plain_loop.py SPEC.yaml [PART/PARTS] — trains every grid point of SPEC's space with
seed 0, exactly as a user would by hand: make_vec_env, PPO(...).learn, evaluate_policy. With
``1/2``, only every second grid point from the second: two such processes side by side split the
grid, what a user with two cores and no sweep tool would run (the machine's own parallel scaling).
"""

from __future__ import annotations

import itertools
import sys

import torch
import yaml
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy


def main(path: str, part: str = "0/1") -> None:
    torch.set_num_threads(1)  # the same one thread per trial that rlsweep's workers use
    spec = yaml.safe_load(open(path))
    names = list(spec["space"])
    grid = [spec["space"][n]["values"] for n in names]
    index, parts = (int(x) for x in part.split("/"))
    for values in list(itertools.product(*grid))[index::parts]:
        hyperparams = dict(spec["hyperparams"], **dict(zip(names, values, strict=False)))
        env = make_vec_env(spec["env"]["id"], n_envs=spec["env"]["n_envs"], seed=0)
        model = PPO("MlpPolicy", env, seed=0, device="cpu", verbose=0, **hyperparams)
        model.learn(total_timesteps=spec["total_timesteps"], log_interval=1)
        eval_env = make_vec_env(spec["env"]["id"], n_envs=1, seed=1_000_000)
        returns, _ = evaluate_policy(
            model,
            eval_env,
            n_eval_episodes=spec["objective"]["eval_episodes"],
            deterministic=True,
            return_episode_rewards=True,
        )
        print(values, sum(returns) / len(returns), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
