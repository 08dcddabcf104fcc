"""Each stability knob tested for its effect on the built model, not for being passed along."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch as th

from sweeps import algos, knobs
from sweeps.errors import SpecError
from sweeps.spec import from_dict
from tests.helpers import REPO, tiny_spec

TINY = {"n_steps": 64, "policy_kwargs": {"net_arch": [8]}}
PPO_TINY = {**TINY, "batch_size": 64, "n_epochs": 1}


def _model(algo: str, hyperparams: dict, env_id: str = "Pendulum-v1", policy: str | None = None):
    cls = algos.load_class(algo)
    policy = policy or ("MlpLstmPolicy" if algo == "RecurrentPPO" else "MlpPolicy")
    built = knobs.build(cls, policy, hyperparams)
    from stable_baselines3.common.env_util import make_vec_env

    env = knobs.wrap_train_env(make_vec_env(env_id, n_envs=1, seed=0), built)
    return built.algo_class(built.policy, env, seed=0, device="cpu", **built.algo_kwargs), built


def _extend(algo: str, **extra) -> dict:
    base = dict(TINY if algo == "A2C" else {**TINY, "batch_size": 64} if algo == "TRPO" else PPO_TINY)
    if algo == "RecurrentPPO":
        base["policy_kwargs"] = {"net_arch": [8], "lstm_hidden_size": 8}
    return {**base, **extra}


# --- log_std bounds ------------------------------------------------------------------------------
def _dist(policy, obs):
    if hasattr(policy, "lstm_actor"):
        from sb3_contrib.common.recurrent.type_aliases import RNNStates

        states = tuple(th.zeros(policy.lstm_hidden_state_shape) for _ in range(2))
        return policy.get_distribution(obs, RNNStates(states, states).pi, th.ones(1))[0]
    return policy.get_distribution(obs)


def _push(policy, obs, direction: float) -> None:
    """One optimizer step on a loss that drives log_std in ``direction`` through sampled actions."""
    dist = _dist(policy, obs)
    log_prob = dist.log_prob(dist.sample().detach())
    loss = -direction * policy.log_std.sum() - log_prob.mean()
    policy.optimizer.zero_grad()
    loss.backward()
    policy.optimizer.step()


@pytest.mark.parametrize("algo", ["PPO", "A2C", "RecurrentPPO"])
@pytest.mark.parametrize("extreme", [200.0, -200.0])
def test_log_std_bounds_hold_under_an_outward_push(algo: str, extreme: float) -> None:
    low, high = -5.0, 2.0
    model, _ = _model(algo, _extend(algo, log_std_bounds=[low, high]))
    policy = model.policy
    obs = th.as_tensor(model.env.reset(), dtype=th.float32)
    with th.no_grad():
        policy._parameters["log_std"].fill_(extreme)
    direction = math.copysign(1.0, extreme)
    for _ in range(20):
        _push(policy, obs, direction)
        std = _dist(policy, obs).distribution.stddev.detach().numpy()
        assert np.all(std >= math.exp(low) - 1e-6) and np.all(std <= math.exp(high) + 1e-5)
    raw = policy._parameters["log_std"].detach()
    assert th.all(raw >= low) and th.all(raw <= high)  # projected back inside
    assert all(th.isfinite(p).all() for p in policy.parameters())
    # learning is possible at the bound: a push inwards moves the parameter off it (once Adam's
    # momentum from the outward push has decayed)
    before = raw.clone()
    for _ in range(20):
        _push(policy, obs, -direction)
    assert th.all(policy._parameters["log_std"].detach() != before)


@pytest.mark.parametrize("extreme", [200.0, -200.0])
def test_without_bounds_the_same_push_breaks_sb3(extreme: float) -> None:
    model, _ = _model("PPO", _extend("PPO"))
    policy = model.policy
    with th.no_grad():
        policy.log_std.fill_(extreme)
    obs = th.as_tensor(model.env.reset(), dtype=th.float32)
    with pytest.raises(ValueError, match="Expected parameter (scale|loc)"):
        for _ in range(20):
            _push(policy, obs, math.copysign(1.0, extreme))


def test_train_std_reports_the_bounded_std() -> None:
    from stable_baselines3.common.logger import KVWriter, Logger

    seen: list[float] = []

    class Capture(KVWriter):
        def write(self, key_values, key_excluded, step=0):
            if "train/std" in key_values:
                seen.append(key_values["train/std"])

        def close(self):
            pass

    model, _ = _model("PPO", _extend("PPO", log_std_bounds=[-1.0, -0.5], learning_rate=0.5))
    model.set_logger(Logger(None, [Capture()]))
    model.learn(256)
    model.logger.dump(model.num_timesteps)
    assert seen and all(math.exp(-1.0) - 1e-6 <= s <= math.exp(-0.5) + 1e-6 for s in seen)


@pytest.mark.parametrize("algo", ["PPO", "A2C", "RecurrentPPO"])
def test_bounded_model_loads_with_the_plain_loader_in_a_fresh_process(algo: str, tmp_path: Path) -> None:
    model, _ = _model(algo, _extend(algo, log_std_bounds=[-3.0, 1.0], init_gains={"policy": 0.5}))
    model.learn(128)
    path = tmp_path / "model.zip"
    model.save(path)
    module = "sb3_contrib" if algo == "RecurrentPPO" else "stable_baselines3"
    code = (
        f"from {module} import {algo}; m = {algo}.load({str(path)!r}, device='cpu'); p = m.policy; "
        f"print(type(p).__name__, list(p.log_std_bounds), p.log_std.tolist())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    name, bounds, values = out.stdout.strip().split(" ", 2)
    assert name.startswith("Bounded") and bounds == "[-3.0," and "1.0]" in values
    assert values.endswith(str(model.policy.log_std.tolist()))


# --- gradient clipping -----------------------------------------------------------------------------
def test_max_grad_norm_reaches_the_algorithm_and_off_means_unclipped() -> None:
    model, built = _model("PPO", _extend("PPO", max_grad_norm=0.3))
    assert model.max_grad_norm == 0.3 == built.max_grad_norm
    model, built = _model("A2C", _extend("A2C", max_grad_norm="off"))
    assert model.max_grad_norm == math.inf


def test_pre_clip_gradient_norm_is_logged() -> None:
    from stable_baselines3.common.logger import KVWriter, Logger

    from stability.gradients import GradNormMonitor, grad_norm_callback

    rows: list[dict] = []

    class Capture(KVWriter):
        def write(self, key_values, key_excluded, step=0):
            rows.append(dict(key_values))

        def close(self):
            pass

    model, built = _model("PPO", _extend("PPO", max_grad_norm=1e-3))
    model.set_logger(Logger(None, [Capture()]))
    monitor = GradNormMonitor(model.policy, max_grad_norm=built.max_grad_norm)
    model.learn(256, callback=grad_norm_callback(monitor))
    model.logger.dump(model.num_timesteps)
    norms = [r for r in rows if "train/grad_norm" in r]
    assert len(norms) == 4  # every update, the last one included
    for row in norms:
        assert row["train/grad_norm"] > 1e-3  # the norm before clipping, not the clipped 1e-3
        assert row["train/grad_clipped_fraction"] == 1.0
        parts = [row.get(f"train/grad_norm_{r}", 0.0) for r in ("actor", "critic", "log_std", "shared")]
        assert row["train/grad_norm_critic"] > 0 and row["train/grad_norm_actor"] > 0
        assert row["train/grad_norm"] <= math.sqrt(sum(p * p for p in parts)) * 1.5


# --- optimizer and weight decay ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "algo,extra,cls,eps",
    [
        ("PPO", {"weight_decay": 0.01}, th.optim.Adam, 1e-5),
        ("PPO", {"optimizer": "adamw", "weight_decay": 0.1}, th.optim.AdamW, 1e-5),
        ("PPO", {"optimizer": "rmsprop", "weight_decay": 0.001}, th.optim.RMSprop, 1e-5),
        ("A2C", {"weight_decay": 0.01}, th.optim.RMSprop, 1e-5),
        ("A2C", {"optimizer": "adam", "weight_decay": 0.05}, th.optim.Adam, 1e-5),
        ("RecurrentPPO", {"optimizer": "adamw", "weight_decay": 0.02}, th.optim.AdamW, 1e-5),
    ],
)
def test_weight_decay_reaches_the_optimizer(algo: str, extra: dict, cls: type, eps: float) -> None:
    model, _ = _model(algo, _extend(algo, **extra))
    optimizer = model.policy.optimizer
    assert type(optimizer) is cls
    for group in optimizer.param_groups:
        assert group["weight_decay"] == extra["weight_decay"]
        assert group["eps"] == eps


def test_user_optimizer_kwargs_keep_sb3_eps() -> None:
    model, _ = _model("PPO", _extend("PPO", policy_kwargs={"net_arch": [8], "optimizer_kwargs": {"betas": (0.8, 0.9)}}))
    group = model.policy.optimizer.param_groups[0]
    assert group["eps"] == 1e-5 and group["betas"] == (0.8, 0.9)


# --- init scales ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algo", ["PPO", "A2C", "RecurrentPPO"])
def test_init_gains_set_singular_values(algo: str) -> None:
    gains = {"hidden": 0.7, "policy": 0.3, "value": 2.5}
    if algo == "RecurrentPPO":
        gains["lstm"] = 1.7
    model, _ = _model(algo, _extend(algo, init_gains=gains))
    p = model.policy

    def singular(weight):
        return th.linalg.svdvals(weight.detach())

    assert th.allclose(singular(p.action_net.weight), th.tensor(0.3), atol=1e-5)
    assert th.allclose(singular(p.value_net.weight), th.tensor(2.5), atol=1e-5)
    for layer in p.mlp_extractor.policy_net:
        if isinstance(layer, th.nn.Linear):
            assert th.allclose(singular(layer.weight), th.tensor(0.7), atol=1e-5)
    if algo == "RecurrentPPO":
        for block in p.lstm_actor.weight_hh_l0.chunk(4, dim=0):
            assert th.allclose(singular(block), th.tensor(1.7), atol=1e-4)


def test_ortho_init_off_and_log_std_init() -> None:
    model, _ = _model("PPO", _extend("PPO", ortho_init=False, log_std_init=-1.5))
    assert model.policy.ortho_init is False
    assert th.allclose(model.policy.log_std, th.tensor(-1.5))
    # SB3's default head gain is 0.01 with ortho init; without it the head is PyTorch's default init
    assert th.linalg.svdvals(model.policy.action_net.weight.detach()).max() > 0.05


# --- learning rate -------------------------------------------------------------------------------------
def test_linear_schedule_gives_the_expected_rates() -> None:
    schedule = knobs.learning_rate({"schedule": "linear", "initial": 3e-4, "final": 1e-5})
    assert schedule(1.0) == pytest.approx(3e-4) and schedule(0.0) == pytest.approx(1e-5)
    assert knobs.learning_rate("lin_1e-3")(0.5) == pytest.approx(5e-4)
    model, _ = _model("PPO", _extend("PPO", learning_rate={"schedule": "linear", "initial": 1e-3, "final": 0.0}))
    model.learn(256)
    last_progress = 1.0 - 192 / 256  # the last update runs after 192 of 256 steps... then rollouts to 256
    lr = model.policy.optimizer.param_groups[0]["lr"]
    assert lr < 1e-3 * (last_progress + 0.01) and lr == pytest.approx(
        model.lr_schedule(model._current_progress_remaining)
    )


# --- reward normalisation and scale --------------------------------------------------------------------
def test_vecnormalize_present_with_the_algorithm_gamma_and_shared_with_eval() -> None:
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    model, built = _model("PPO", _extend("PPO", gamma=0.9, normalize={"reward": True, "obs": True, "clip_reward": 5.0}))
    train_env = model.get_env()
    assert isinstance(train_env, VecNormalize)
    assert train_env.gamma == 0.9 and train_env.clip_reward == 5.0 and train_env.norm_reward
    model.learn(128)
    eval_env = knobs.wrap_eval_env(make_vec_env("Pendulum-v1", n_envs=1, seed=9), built, train_env)
    assert isinstance(eval_env, VecNormalize) and not eval_env.training and not eval_env.norm_reward
    assert np.allclose(eval_env.obs_rms.mean, train_env.obs_rms.mean)
    frozen = eval_env.obs_rms.mean.copy()
    eval_env.reset()
    for _ in range(20):
        eval_env.step(np.zeros((1, 1)))
    assert np.array_equal(eval_env.obs_rms.mean, frozen)

    plain, built = _model("PPO", _extend("PPO", normalize=False))
    assert not isinstance(plain.get_env(), VecNormalize) and built.normalize is None
    own_gamma, built = _model("PPO", _extend("PPO", gamma=0.9, normalize={"reward": True, "gamma": 0.5}))
    assert own_gamma.get_env().gamma == 0.5
    # reward-only normalisation keeps no observation statistics: the eval env stays raw
    raw = make_vec_env("Pendulum-v1", n_envs=1, seed=9)
    assert knobs.wrap_eval_env(raw, built, own_gamma.get_env()) is raw


def test_reward_scale_multiplies_rewards_before_normalisation() -> None:
    from stable_baselines3.common.env_util import make_vec_env

    built = knobs.build(algos.load_class("PPO"), "MlpPolicy", {"reward_scale": 0.1})
    raw, scaled = (
        make_vec_env("Pendulum-v1", n_envs=1, seed=3),
        knobs.wrap_train_env(make_vec_env("Pendulum-v1", n_envs=1, seed=3), built),
    )
    raw.reset(), scaled.reset()
    action = np.array([[0.5]])
    r_raw, r_scaled = raw.step(action)[1], scaled.step(action)[1]
    assert r_scaled == pytest.approx(0.1 * r_raw)


# --- validation ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides,path,words",
    [
        ({"hyperparams": {"log_std_bounds": [2, -5]}}, "hyperparams.log_std_bounds", "low < high"),
        ({"hyperparams": {"log_std_bounds": [-200, 2]}}, "hyperparams.log_std_bounds", "float32"),
        ({"hyperparams": {"optimizer": "adamm"}}, "hyperparams.optimizer", "did you mean 'adam'"),
        ({"hyperparams": {"weight_decay": -1}}, "hyperparams.weight_decay", ">= 0"),
        ({"hyperparams": {"max_grad_norm": 0}}, "hyperparams.max_grad_norm", "or off"),
        ({"hyperparams": {"init_gains": {"lstm": 1.0}}}, "hyperparams.init_gains.lstm", "PPO has no init gain"),
        ({"hyperparams": {"init_gains": {"policy": 1.0}, "ortho_init": False}}, "hyperparams.ortho_init", "true"),
        ({"hyperparams": {"normalize": {"rewards": True}}}, "hyperparams.normalize.rewards", "allowed under"),
        ({"hyperparams": {"normalize": {"gamma": 1.5}}}, "hyperparams.normalize.gamma", "(0, 1]"),
        ({"hyperparams": {"learning_rate": {"schedule": "linear"}}}, "hyperparams.learning_rate.initial", "initial"),
        ({"hyperparams": {"log_std_bounds": [-5, 2], "log_std_init": 3.0}}, "hyperparams.log_std_init", "outside"),
        (
            {"env": {"id": "CartPole-v1"}, "hyperparams": {"log_std_bounds": [-5, 2]}},
            "hyperparams.log_std_bounds",
            "Discrete(2)",
        ),
        ({"space": {"reward_scale": {"type": "choice", "values": [1.0, -1.0]}}}, "space.reward_scale", "> 0"),
    ],
)
def test_bad_knob_values_are_refused_with_the_key_path(overrides: dict, path: str, words: str) -> None:
    data = tiny_spec(env={"id": "Pendulum-v1"}, hyperparams={"n_steps": 64, "batch_size": 64})
    data.update(overrides)
    if "space" not in overrides:
        data["space"] = {}
    with pytest.raises(SpecError) as info:
        from_dict(data)
    text = info.value.render()
    assert f"  {path}:" in text and words in text, text


def test_every_knob_validates_in_the_shipped_sweeps() -> None:
    from sweeps.spec import load

    for name in ("knobs_pendulum", "knobs_pendulum_a2c"):
        spec = load(REPO / "conf" / "sweeps" / f"{name}.yaml")
        names = {key.split(".")[0] for key in (*spec.dims, *knobs_flat(spec.hyperparams))}
        assert set(knobs.KNOBS) <= names, set(knobs.KNOBS) - names


def knobs_flat(hyperparams: dict) -> list[str]:
    from sweeps.space import flatten

    return list(flatten(hyperparams))


def test_gym_env_builds() -> None:
    assert gym.make("Pendulum-v1").action_space.shape == (1,)


# --- the other algorithms -------------------------------------------------------------------------------
OFF_TINY = {"learning_starts": 50, "buffer_size": 500, "batch_size": 32, "policy_kwargs": {"net_arch": [8]}}


@pytest.mark.parametrize("algo", ["SAC", "TQC"])
def test_squashed_gaussian_log_std_bounds_replace_the_builtin_clamp(algo: str, tmp_path: Path) -> None:
    model, _ = _model(algo, {**OFF_TINY, "log_std_bounds": [-3.0, -1.0]})
    actor = model.policy.actor
    with th.no_grad():
        actor.log_std.weight.mul_(1000.0)
        actor.log_std.bias.fill_(50.0)
    obs = th.as_tensor(model.env.reset(), dtype=th.float32)
    _, log_std, _ = actor.get_action_dist_params(obs)
    assert th.all(log_std <= -1.0) and th.all(log_std >= -3.0)
    model.learn(64)
    model.save(tmp_path / "m.zip")
    module = "sb3_contrib" if algo == "TQC" else "stable_baselines3"
    code = (
        f"from {module} import {algo}; m = {algo}.load({str(tmp_path / 'm.zip')!r}, device='cpu'); "
        f"print(type(m.policy).__name__, list(m.policy.actor.log_std_bounds))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [f"Bounded{algo}Policy", "[-3.0,", "-1.0]"]


@pytest.mark.parametrize("algo", ["SAC", "TD3", "TQC"])
def test_weight_decay_reaches_actor_and_critic_optimizers(algo: str) -> None:
    model, _ = _model(algo, {**OFF_TINY, "optimizer": "adamw", "weight_decay": 0.03})
    for optimizer in (model.policy.actor.optimizer, model.policy.critic.optimizer):
        assert type(optimizer) is th.optim.AdamW
        assert all(g["weight_decay"] == 0.03 and g["eps"] == 1e-8 for g in optimizer.param_groups)


def test_trpo_takes_bounds_and_gains() -> None:
    model, _ = _model("TRPO", _extend("TRPO", log_std_bounds=[-2.0, 0.0], init_gains={"value": 3.0}))
    assert type(model.policy).__name__ == "BoundedActorCriticPolicy"
    assert th.allclose(th.linalg.svdvals(model.policy.value_net.weight.detach()), th.tensor(3.0), atol=1e-5)
    model.learn(128)
    assert th.all(model.policy.log_std <= 0.0) and th.all(model.policy.log_std >= -2.0)


@pytest.mark.parametrize(
    "algo,knob,value",
    [
        ("TRPO", "max_grad_norm", 0.5),
        ("TD3", "log_std_bounds", [-5, 2]),
        ("SAC", "init_gains", {"policy": 1.0}),
        ("SAC", "max_grad_norm", 1.0),
    ],
)
def test_knob_that_does_not_apply_names_both(algo: str, knob: str, value) -> None:
    data = tiny_spec(algo=algo, env={"id": "Pendulum-v1"}, hyperparams={knob: value}, space={})
    with pytest.raises(SpecError) as info:
        from_dict(data)
    assert f"the knob '{knob}' does not apply to {algo}" in info.value.render()


@pytest.mark.parametrize("algo", ["SAC", "TD3", "TQC", "TRPO"])
def test_every_algorithm_runs_a_trial_with_curves(algo: str) -> None:
    from sweeps.trial import TrialConfig, run

    hyperparams = dict(OFF_TINY) if algo != "TRPO" else _extend("TRPO")
    hyperparams.update(normalize={"obs": True, "reward": True}, reward_scale=0.5, weight_decay=1e-4)
    if algo in ("SAC", "TQC"):
        hyperparams["log_std_bounds"] = [-5.0, 1.0]
    points: list[tuple[int, dict]] = []

    class Collect:
        def metrics(self, step, values):
            points.append((step, values))

    config = TrialConfig(
        "t",
        0,
        0,
        algo,
        "MlpPolicy",
        {"id": "Pendulum-v1", "n_envs": 1},
        hyperparams,
        total_timesteps=400,
        eval_episodes=1,
    )
    result = run(config, Collect())
    assert math.isfinite(result.mean_return) and result.timesteps >= 400
    keys = {k for _, values in points for k in values}
    assert any(k.startswith("train/") for k in keys) and "train/grad_norm" in keys, keys


def test_the_reward_scale_knob_reaches_the_callbacks_context() -> None:
    """The detectors read the logged returns in the critic's units and name a tiny scale: a trial
    hands its reward_scale to the callback, which records it (and nothing when it is 1)."""
    from sweeps.trial import TrialConfig, run

    class Quiet:
        def metrics(self, step, values):
            pass

    contexts = []
    for knob in ({"reward_scale": 2.5e-8}, {}):
        hyperparams = {"n_steps": 8, "policy_kwargs": {"net_arch": [8]}, **knob}
        config = TrialConfig(
            "t", 0, 0, "A2C", "MlpPolicy", {"id": "CartPole-v1", "n_envs": 1}, hyperparams, 64, eval_episodes=1
        )
        contexts.append(run(config, Quiet()).context)
    assert contexts[0]["reward_scale"] == 2.5e-8 and "reward_scale" not in contexts[1]


def test_dict_observations_and_multidiscrete_actions_through_a_trial() -> None:
    """RecurrentPPO on the shipped temperature-control env, with VecNormalize on its Dict observation."""
    from sweeps.trial import TrialConfig, run

    points: list[tuple[int, dict]] = []

    class Collect:
        def metrics(self, step, values):
            points.append((step, values))

    env = {"id": "sweeps.temp_control:make_temp_control", "kwargs": {"phase": "pretrain"}, "n_envs": 2}
    hyperparams = {
        "n_steps": 32,
        "batch_size": 64,
        "n_epochs": 1,
        "normalize": {"obs": True, "reward": True},
        "weight_decay": 0.1,
        "init_gains": {"lstm": 1.0, "value": 1.0},
        "policy_kwargs": {"lstm_hidden_size": 8, "net_arch": [8]},
    }
    config = TrialConfig(
        "t", 0, 0, "RecurrentPPO", "MultiInputLstmPolicy", env, hyperparams, total_timesteps=128, eval_episodes=2
    )
    result = run(config, Collect())
    assert len(result.episode_returns) == 2 and result.timesteps == 128
    steps = sorted({s for s, v in points if "train/value_loss" in v})
    assert steps == [64, 128]


@pytest.mark.parametrize("algo", ["SAC", "TD3", "TQC"])
def test_critic_learning_rate_reaches_the_critic_optimizer_only(algo: str) -> None:
    lr = {"schedule": "linear", "initial": 1e-3, "final": 0.0, "critic": 4e-3}
    model, _ = _model(algo, {**OFF_TINY, "learning_rate": lr})
    assert model.policy.critic.optimizer.param_groups[0]["lr"] == pytest.approx(4e-3)
    model.learn(150)
    progress = model._current_progress_remaining
    actor_lr = model.policy.actor.optimizer.param_groups[0]["lr"]
    critic_lr = model.policy.critic.optimizer.param_groups[0]["lr"]
    assert actor_lr == pytest.approx(1e-3 * progress, rel=0.05) and actor_lr < 1e-3
    assert critic_lr == pytest.approx(4 * actor_lr)


def test_critic_rate_refused_where_there_is_no_critic_optimizer() -> None:
    data = tiny_spec(
        env={"id": "Pendulum-v1"},
        space={},
        hyperparams={"n_steps": 64, "batch_size": 64, "learning_rate": {"initial": 1e-3, "critic": 1e-2}},
    )
    with pytest.raises(SpecError, match="learning_rate.critic: a separate critic rate needs"):
        from_dict(data)


def test_log_std_bounds_with_gsde() -> None:
    """gSDE keeps a log_std matrix of its own; every read of it is bounded too."""
    model, _ = _model("PPO", _extend("PPO", use_sde=True, log_std_bounds=[-2.0, -1.0], log_std_init=-1.5))
    policy = model.policy
    assert policy.log_std.shape[0] > 1  # (latent_sde_dim, action_dim)
    with th.no_grad():
        policy._parameters["log_std"].fill_(30.0)
    assert th.all(policy.log_std <= -1.0)
    model.learn(128)
    raw = policy._parameters["log_std"].detach()
    assert th.all(raw >= -2.0) and th.all(raw <= -1.0) and th.isfinite(raw).all()


def test_squashed_bounds_refuse_other_policies() -> None:
    data = tiny_spec(
        algo="SAC", policy="CnnPolicy", env={"id": "Pendulum-v1"}, space={}, hyperparams={"log_std_bounds": [-5, 1]}
    )
    with pytest.raises(SpecError, match="supports MlpPolicy and MultiInputPolicy, not CnnPolicy"):
        from_dict(data)
