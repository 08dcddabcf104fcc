"""Continuous-action PPO, CleanRL style, that reproduces a user's "my value loss never falls" report.

The user's hand-written PPO (shared MLP trunk obs->64->128->64 with ReLU, tanh actor mean head,
state-independent ``actor_logstd``, critic head 64->32->1, Adam, GAE, clipped surrogate, clipped
value loss, entropy bonus) carried four bugs. Each one can be switched on by itself:

``--dropout-in-forward``
    An ``nn.Dropout(0.2)`` is constructed inside the action-sampling method on every call and
    applied to the actor's path. A freshly built module is in training mode, so units are dropped
    during rollouts *and* updates, with different masks: the log-probabilities the update compares
    against were computed by a different network, so the ratio is noise (approx_kl, clipfrac up).
``--head-std FLOAT``
    Orthogonal-init gain of both output layers (the report used 1.0). CleanRL's values are 0.01
    for the actor head and 1.0 for the critic head; set them separately with ``--actor-head-std``
    and ``--critic-head-std``. A gain of 1.0 on the actor head starts the tanh mean far from zero.
``--weight-decay FLOAT``
    Adam's (coupled, L2) weight decay; the report used 0.1. It drags every weight, the critic's
    and ``actor_logstd`` included, towards zero on every step, so the critic cannot fit returns.
``--unassigned-to-device``
    ``tensor.to(device)`` without assigning the result. Harmless on CPU; kept for fidelity.

Everything else follows CleanRL's ``ppo_continuous_action.py`` (observation and reward
normalisation, annealed learning rate, advantage normalisation, value clipping, gradient
clipping at 0.5) with a smaller rollout (4 envs x 256 steps) so short runs give many updates.
TensorBoard tags are CleanRL's (``losses/*``, ``charts/*``), plus ``losses/grad_norm``: the mean,
over the update's minibatches, of the pre-clip gradient norm ``clip_grad_norm_`` returns. As in
CleanRL, the losses and approx_kl are those of the update's last minibatch; clipfrac is the mean
over all minibatches.

    python conf/repro/cleanrl_ppo.py --total-timesteps 30000 --seed 1 --logdir results/repro/clean
    python conf/repro/cleanrl_ppo.py --dropout-in-forward --head-std 1.0 --weight-decay 0.1 ...
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.distributions.normal import Normal
from torch.utils.tensorboard import SummaryWriter


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="CleanRL-style continuous PPO with switchable bugs.")
    parser.add_argument("--env-id", default="Pendulum-v1")
    parser.add_argument("--total-timesteps", type=int, default=30000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--num-steps", type=int, default=256, help="steps per env per rollout")
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--anneal-lr", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--gae-lambda", type=float, default=0.95)
    parser.add_argument("--num-minibatches", type=int, default=16)
    parser.add_argument("--update-epochs", type=int, default=10)
    parser.add_argument("--norm-adv", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--clip-coef", type=float, default=0.2)
    parser.add_argument("--clip-vloss", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--ent-coef", type=float, default=0.0)
    parser.add_argument("--vf-coef", type=float, default=0.5)
    parser.add_argument("--max-grad-norm", type=float, default=0.5)
    parser.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="CleanRL's observation and reward normalisation (and clipping) wrappers",
    )
    parser.add_argument("--logdir", default=None, help="TensorBoard folder (default results/repro_cleanrl/...)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    # the bugs of the report
    parser.add_argument(
        "--dropout-in-forward",
        action="store_true",
        help="BUG: nn.Dropout(0.2) built inside the action-sampling method (always training mode)",
    )
    parser.add_argument(
        "--head-std",
        type=float,
        default=None,
        help="BUG when 1.0: init gain of both output heads (sets both options below)",
    )
    parser.add_argument("--actor-head-std", type=float, default=0.01)
    parser.add_argument("--critic-head-std", type=float, default=1.0)
    parser.add_argument("--weight-decay", type=float, default=0.0, help="BUG when 0.1: Adam weight_decay")
    parser.add_argument(
        "--unassigned-to-device",
        action="store_true",
        help="BUG (harmless on CPU): x.to(device) without assigning the result",
    )
    args = parser.parse_args(argv)
    if args.head_std is not None:
        args.actor_head_std = args.critic_head_std = args.head_std
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_updates = max(1, args.total_timesteps // args.batch_size)
    return args


def make_env(env_id: str, gamma: float, normalize: bool):
    def thunk() -> gym.Env:
        env = gym.make(env_id)
        env = gym.wrappers.FlattenObservation(env)
        env = gym.wrappers.RecordEpisodeStatistics(env)  # raw returns, before any normalisation
        env = gym.wrappers.ClipAction(env)
        if normalize:
            env = gym.wrappers.NormalizeObservation(env)
            env = gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10), env.observation_space)
            env = gym.wrappers.NormalizeReward(env, gamma=gamma)
            env = gym.wrappers.TransformReward(env, lambda reward: float(np.clip(reward, -10, 10)))
        return env

    return thunk


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(
        self, obs_dim: int, act_dim: int, actor_head_std: float, critic_head_std: float, dropout_in_forward: bool
    ) -> None:
        super().__init__()
        self.trunk = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.ReLU(),
            layer_init(nn.Linear(64, 128)),
            nn.ReLU(),
            layer_init(nn.Linear(128, 64)),
            nn.ReLU(),
        )
        self.actor_mean = layer_init(nn.Linear(64, act_dim), std=actor_head_std)
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))
        self.critic = nn.Sequential(
            layer_init(nn.Linear(64, 32)),
            nn.ReLU(),
            layer_init(nn.Linear(32, 1), std=critic_head_std),
        )
        self.dropout_in_forward = dropout_in_forward

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(self.trunk(x))

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):
        hidden = self.trunk(x)
        actor_hidden = hidden
        if self.dropout_in_forward:
            # BUG: a new Dropout on every call is always in training mode (agent.eval() cannot reach
            # it), and the masks of the rollout and of the update differ.
            dropout = nn.Dropout(0.2)
            actor_hidden = dropout(hidden)
        mean = torch.tanh(self.actor_mean(actor_hidden))
        std = torch.exp(self.actor_logstd.expand_as(mean))
        dist = Normal(mean, std)
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action).sum(1), dist.entropy().sum(1), self.critic(hidden)


def finished_episodes(infos: dict) -> list[tuple[float, int]]:
    """(return, length) of every episode that ended this step (same-step autoreset puts the
    ending sub-env's info under ``final_info``)."""
    out = []
    for source in (infos.get("final_info", {}), infos):
        if "episode" in source:
            for i in np.nonzero(source["_episode"])[0]:
                out.append((float(source["episode"]["r"][i]), int(source["episode"]["l"][i])))
    return out


def main(argv: list[str] | None = None, hook: Any = None) -> None:
    """Train. ``hook`` (optional) is told ``start(agent, envs, args)``, ``update(global_step, agent,
    envs)`` after every update and ``end(global_step, agent, envs)``: the labelled corpus measures
    the run through it (tests/bench/corpus)."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    logdir = Path(args.logdir or f"results/repro_cleanrl/{args.env_id}__s{args.seed}__{int(time.time())}")
    writer = SummaryWriter(str(logdir))
    writer.add_text(
        "hyperparameters",
        "|param|value|\n|-|-|\n" + "\n".join(f"|{key}|{value}|" for key, value in sorted(vars(args).items())),
    )

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    device = torch.device(args.device)

    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, args.gamma, args.normalize) for _ in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    if not isinstance(envs.single_action_space, gym.spaces.Box):
        raise ValueError("only continuous actions")
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    act_dim = int(np.prod(envs.single_action_space.shape))

    agent = Agent(obs_dim, act_dim, args.actor_head_std, args.critic_head_std, args.dropout_in_forward).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5, weight_decay=args.weight_decay)

    obs = torch.zeros((args.num_steps, args.num_envs, obs_dim), device=device)
    actions = torch.zeros((args.num_steps, args.num_envs, act_dim), device=device)
    logprobs = torch.zeros((args.num_steps, args.num_envs), device=device)
    rewards = torch.zeros((args.num_steps, args.num_envs), device=device)
    dones = torch.zeros((args.num_steps, args.num_envs), device=device)
    values = torch.zeros((args.num_steps, args.num_envs), device=device)

    global_step = 0
    start_time = time.time()
    next_obs, _ = envs.reset(seed=args.seed)
    envs.action_space.seed(args.seed)
    next_obs = torch.as_tensor(next_obs, dtype=torch.float32, device=device)
    next_done = torch.zeros(args.num_envs, device=device)
    if hook is not None:
        hook.start(agent, envs, args)

    for update in range(1, args.num_updates + 1):
        if args.anneal_lr:
            frac = 1.0 - (update - 1.0) / args.num_updates
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        # ---- rollout
        for step in range(args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            rewards[step] = torch.as_tensor(reward, dtype=torch.float32, device=device).view(-1)
            next_obs = torch.as_tensor(next_obs, dtype=torch.float32, device=device)
            next_done = torch.as_tensor(np.logical_or(terminations, truncations), dtype=torch.float32, device=device)
            if args.unassigned_to_device:
                next_obs.to(device)  # BUG: the result is thrown away
                next_done.to(device)
            for episodic_return, episodic_length in finished_episodes(infos):
                writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                writer.add_scalar("charts/episodic_length", episodic_length, global_step)

        # ---- GAE
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards)
            lastgaelam = 0
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    nextnonterminal = 1.0 - next_done
                    nextvalues = next_value
                else:
                    nextnonterminal = 1.0 - dones[t + 1]
                    nextvalues = values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values

        b_obs = obs.reshape(-1, obs_dim)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape(-1, act_dim)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        # ---- PPO update
        b_inds = np.arange(args.batch_size)
        clipfracs, grad_norms = [], []
        for _epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, args.batch_size, args.minibatch_size):
                mb_inds = b_inds[start : start + args.minibatch_size]
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()
                with torch.no_grad():
                    old_approx_kl = (-logratio).mean()
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs.append(((ratio - 1.0).abs() > args.clip_coef).float().mean().item())

                mb_advantages = b_advantages[mb_inds]
                if args.norm_adv:
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                newvalue = newvalue.view(-1)
                if args.clip_vloss:
                    v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                    v_clipped = b_values[mb_inds] + torch.clamp(
                        newvalue - b_values[mb_inds], -args.clip_coef, args.clip_coef
                    )
                    v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                    v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                else:
                    v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()

                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

                optimizer.zero_grad()
                loss.backward()
                grad_norms.append(nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm).item())
                optimizer.step()

        y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        writer.add_scalar("losses/value_loss", v_loss.item(), global_step)
        writer.add_scalar("losses/policy_loss", pg_loss.item(), global_step)
        writer.add_scalar("losses/entropy", entropy_loss.item(), global_step)
        writer.add_scalar("losses/old_approx_kl", old_approx_kl.item(), global_step)
        writer.add_scalar("losses/approx_kl", approx_kl.item(), global_step)
        writer.add_scalar("losses/clipfrac", float(np.mean(clipfracs)), global_step)
        writer.add_scalar("losses/explained_variance", float(explained_var), global_step)
        writer.add_scalar("losses/grad_norm", float(np.mean(grad_norms)), global_step)
        writer.add_scalar("charts/SPS", int(global_step / (time.time() - start_time)), global_step)
        if hook is not None:
            hook.update(global_step, agent, envs)

    if hook is not None:
        hook.end(global_step, agent, envs)

    envs.close()
    writer.close()
    print(f"{global_step} steps, {args.num_updates} updates in {time.time() - start_time:.1f}s -> {logdir}")


if __name__ == "__main__":
    main()
