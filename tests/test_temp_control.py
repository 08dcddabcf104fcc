"""The staged temperature-control env that reproduces the RecurrentPPO dead-policy-gradient report."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from sweeps.envs import import_entry_point
from sweeps.temp_control import PHASES, TempControlSeqEnv, make_temp_control


def rollout(env: TempControlSeqEnv, seed: int, actions) -> tuple[list, list, list]:
    """Observations, rewards and infos of one episode; ``actions(t)`` gives the action of step t."""
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    observations, rewards, infos = [obs["obs"]], [], []
    for t in range(env.episode_length):
        obs, reward, terminated, truncated, info = env.step(actions(t))
        observations.append(obs["obs"])
        rewards.append(reward)
        infos.append(info)
        assert terminated == (t == env.episode_length - 1) and not truncated
    return observations, rewards, infos


@pytest.mark.parametrize("phase", sorted(PHASES))
def test_both_env_checkers_pass(phase: str) -> None:
    from gymnasium.utils.env_checker import check_env as gym_check
    from stable_baselines3.common.env_checker import check_env as sb3_check

    gym_check(make_temp_control(phase=phase), skip_render_check=True)
    sb3_check(make_temp_control(phase=phase), warn=False)


def test_spaces_and_entry_point() -> None:
    env = import_entry_point("sweeps.temp_control:make_temp_control")()
    assert isinstance(env, TempControlSeqEnv)
    assert isinstance(env.observation_space, spaces.Dict) and list(env.observation_space.spaces) == ["obs"]
    box = env.observation_space["obs"]
    assert box.shape == (5, 7) and box.dtype == np.float32
    assert np.all(box.low == 1200) and np.all(box.high == 1300)
    assert isinstance(env.action_space, spaces.MultiDiscrete)
    assert env.action_space.nvec.tolist() == [4, 4]


@pytest.mark.parametrize("length", [24, 7])
def test_an_episode_is_exactly_episode_length_steps(length: int) -> None:
    env = make_temp_control(episode_length=length)
    observations, rewards, _ = rollout(env, 0, lambda t: env.action_space.sample())
    assert len(rewards) == length
    assert all(env.observation_space.contains({"obs": o}) for o in observations)
    with pytest.raises(RuntimeError, match="reset"):
        env.step([0, 0])


def test_phase_change_overrides_the_agent_whatever_it_chooses() -> None:
    env = make_temp_control(phase="pretrain")
    _, _, infos = rollout(env, 3, lambda t: [3, 2])
    for info in infos:
        if info["stage"] == "phase_change":
            assert info["overridden"] is True
            assert info["applied_action"].tolist() == [0, 0]
        else:
            assert info["overridden"] is False
            assert info["applied_action"].tolist() == [3, 2]
    # Overridden steps do exactly what [0, 0] does: the agent's choice has no effect on the furnace at all.
    plan = env.stage_plan()
    ours, _, _ = rollout(env, 3, lambda t: [3, 3] if plan[t][1] else [1, 2])
    zero, _, _ = rollout(env, 3, lambda t: [0, 0] if plan[t][1] else [1, 2])
    np.testing.assert_array_equal(np.array(ours), np.array(zero))


@pytest.mark.parametrize("phase", sorted(PHASES))
def test_rewards_are_constant_zero_in_the_unrewarded_stages(phase: str) -> None:
    env = make_temp_control(phase=phase)
    for seed in range(3):
        _, rewards, infos = rollout(env, seed, lambda t: env.action_space.sample())
        dead = [r for r, i in zip(rewards, infos, strict=False) if not i["rewarded"]]
        assert all(r == 0.0 for r in dead)
        live = [r for r, i in zip(rewards, infos, strict=False) if i["rewarded"]]
        assert all(r >= 0.0 for r in live) and (not live or max(live) > 0.0)


def test_actions_change_the_temperatures_in_the_controlled_stage() -> None:
    env = make_temp_control(phase="pretrain")
    idle, _, _ = rollout(env, 5, lambda t: [0, 0])
    hot, _, _ = rollout(env, 5, lambda t: [3, 3])
    start = env.phase_change_start  # after the "pre" stage, where the agent is in control
    diff = hot[start][-1] - idle[start][-1]
    assert np.all(diff[[1, 4, 5]] > 10.0)  # the heated zones Z2, Z5, Z6 are far warmer
    assert np.all(np.abs(diff[[0, 6]]) < diff[1])  # the others only warm up through their neighbours
    one, _, _ = rollout(env, 5, lambda t: [3, 0])
    other, _, _ = rollout(env, 5, lambda t: [0, 3])
    assert one[start][-1][1] > other[start][-1][1] and one[start][-1][5] < other[start][-1][5]


def test_same_seed_same_trajectory_and_different_seed_differs() -> None:
    actions = np.random.default_rng(0).integers(0, 4, size=(24, 2))
    runs = [rollout(make_temp_control(phase="full"), seed, lambda t: actions[t]) for seed in (7, 7, 8)]
    (obs_a, rew_a, info_a), (obs_b, rew_b, info_b), (obs_c, _, _) = runs
    np.testing.assert_array_equal(np.array(obs_a), np.array(obs_b))
    assert rew_a == rew_b and [i["stage"] for i in info_a] == [i["stage"] for i in info_b]
    assert not np.array_equal(np.array(obs_a), np.array(obs_c))


DEFAULT_STAGES = ["pre"] * 8 + ["phase_change"] * 4 + ["post"] * 12


@pytest.mark.parametrize(
    "phase, overridden, rewarded",
    [
        ("pretrain", {"phase_change"}, {"pre"}),
        ("stage2_only", {"phase_change"}, {"post"}),
        ("full", set(), {"pre", "phase_change", "post"}),
    ],
)
def test_each_phase_sets_the_documented_stages(phase: str, overridden: set, rewarded: set) -> None:
    env = make_temp_control(phase=phase)
    _, _, infos = rollout(env, 0, lambda t: [2, 2])
    assert [i["stage"] for i in infos] == DEFAULT_STAGES
    assert [i["overridden"] for i in infos] == [s in overridden for s in DEFAULT_STAGES]
    assert [i["rewarded"] for i in infos] == [s in rewarded for s in DEFAULT_STAGES]
    assert env.stage_plan() == [(i["stage"], i["overridden"], i["rewarded"]) for i in infos]


def test_stage_boundaries_and_phase_switches_are_configurable() -> None:
    env = make_temp_control(phase="stage2_only", episode_length=10, phase_change_start=3, phase_change_steps=5)
    assert [s for s, _, _ in env.stage_plan()] == ["pre"] * 3 + ["phase_change"] * 5 + ["post"] * 2
    # The post's own "stage2_only" never left stage 0: every step is unrewarded.
    literal = make_temp_control(phase="stage2_only", phase_change_start=24)
    assert {stage for stage, _, rewarded in literal.stage_plan() if not rewarded} == {"pre"}
    assert not any(rewarded for _, _, rewarded in literal.stage_plan())
    env.set_phase("full")
    assert all(rewarded and not overridden for _, overridden, rewarded in env.stage_plan())


def test_unknown_phase_raises_naming_the_allowed_values() -> None:
    with pytest.raises(ValueError, match="'pretrain', 'stage2_only', 'full'") as err:
        make_temp_control(phase="stage3")
    assert "stage3" in str(err.value)
    with pytest.raises(ValueError, match="allowed"):
        make_temp_control().set_phase("warmup")
    with pytest.raises(ValueError, match="episode_length"):
        make_temp_control(episode_length=0)


@pytest.mark.slow
def test_a_tiny_recurrent_ppo_learns_on_it() -> None:
    from sb3_contrib import RecurrentPPO

    env = make_temp_control(phase="pretrain")
    model = RecurrentPPO(
        "MultiInputLstmPolicy",
        env,
        n_steps=32,
        batch_size=32,
        n_epochs=1,
        seed=0,
        device="cpu",
        policy_kwargs={"lstm_hidden_size": 8, "net_arch": [8]},
    )
    model.learn(64)
    assert model.num_timesteps == 64
