"""The labelled corpus's harness (tests/bench/corpus): label rules and the measurement rollouts.

The corpus itself is run by `make corpus`; these check the parts whose bugs would give runs wrong
labels without any error showing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.env_util import make_vec_env

from sweeps.repro_envs import DictObservation

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench" / "corpus"))

import labels  # noqa: E402
import measure  # noqa: E402


def _run(rollouts: dict) -> dict:
    """A corpus run record whose snapshots say nothing failed."""
    n = 3
    return {
        "error": "",
        "measurements": {
            "rollouts": rollouts,
            "std_max": [None] * n,
            "std_min": [None] * n,
            "finite": [True] * n,
            "param_norm": [10.0, 10.5, 11.0],
            "kl_from_start": [0.0, 0.05, 0.1],
            "determinism": [0.5, 0.6, 0.7],
            "kind": "categorical",
            "budget": 3000,
            "snapshot_steps": [0, 1500, 3000],
        },
    }


def _fit(rel_rmse: float) -> dict:
    return {"rel_rmse": rel_rmse, "r2": 0.9, "raw_reward_std": 1.0, "episode_returns": [10.0, 30.0]}


def test_a_run_whose_measurement_rollout_failed_is_unmeasured_not_healthy():
    measured = {"start": _fit(0.1), "half": _fit(0.1), "end": _fit(0.1)}
    assert labels.label(_run(measured), 100.0) == "healthy"
    broken = dict(measured, end={"error": "KeyError: None"})
    assert labels.label(_run(broken), 100.0) == "unmeasured"
    # a rollout that failed on non-finite numbers is the run's own failure, and labelled so
    nonfinite = dict(measured, end={"error": "ValueError: Expected parameter logits ... found invalid values"})
    assert labels.label(_run(nonfinite), 100.0) == "nan_scale"


def test_a_run_the_reference_rules_would_label_is_unmeasured_without_a_reference_return():
    nan = float("nan")
    measured = {"start": _fit(0.1), "half": _fit(0.1), "end": _fit(0.1)}
    off = {"start": _fit(0.9), "half": _fit(0.9), "end": dict(_fit(0.9), r2=0.0)}
    # a critic off its targets: stuck when the policy did not get half way to the reference,
    # a lagging critic when it did, and undecidable when the env's reference case has no run
    assert labels.label(_run(off), 100.0) == "stuck_value_loss"
    assert labels.label(_run(off), 15.0) == "healthy"
    assert labels.label(_run(off), nan) == "unmeasured"
    assert labels.label(_run(off), None) == "unmeasured"
    collapsed = _run(measured)
    collapsed["measurements"]["determinism"] = [0.5, 0.01, 0.01]
    assert labels.label(collapsed, 100.0) == "entropy_collapse"
    assert labels.label(collapsed, nan) == "unmeasured"
    # a run neither rule would touch needs no reference, and an earlier rule still labels
    assert labels.label(_run(measured), nan) == "healthy"
    dead = _run(off)
    dead["measurements"]["kl_from_start"] = [0.0, 0.001, 0.001]
    assert labels.label(dead, nan) == "dead_policy_gradient"


def test_a_run_that_repeats_an_earlier_split_s_training_is_named_and_left_out_of_the_distinct_score():
    import score

    def run(case: str, seed: int, kl: list[float]) -> dict:
        out = _run({})
        out.update(case=case, seed=seed, algo="A2C")
        out["measurements"].update(kl_from_start=kl, param_norm=[10.0, 10.5, 11.0, 11.5][: len(kl)])
        return out

    later = "cartpole_wide_scaled_a2c_vanishing_advantages"  # fresh73, written after fresh71's twin
    earlier = "cartpole_short_scaled_a2c_vanishing_advantages"
    same = [0.0, 0.00123, 0.00456, 0.0081]
    frozen = [0.0, 0.0, 1e-6, 0.0]
    runs = [
        run(later, 1, [0.0, 0.001234, 0.004561, 0.008104]),  # the same to 3 digits: the same training
        run(earlier, 1, same),
        run(later, 2, same),  # another seed is another training
        run(earlier, 3, same),
        run(later, 3, [0.0, 0.00124, 0.00456, 0.0081]),  # a digit apart
        # a policy that never moved, or a run that blew up at once, tells no training from another
        run(earlier, 4, frozen),
        run(later, 4, frozen),
        run(earlier, 5, [0.0, 0.0, float("inf")]),
        run(later, 5, [0.0, 0.0, float("inf")]),
    ]
    cases = {c["id"]: c for c in score.load_cases()}
    assert score.repeats(runs, cases) == {f"{later}__s1": f"{earlier}__s1"}


def test_a_dict_observation_episode_cut_by_its_time_limit_is_measured():
    def make() -> gym.Env:
        return DictObservation(gym.make("CartPole-v1", max_episode_steps=5), horizon=5)

    env = make_vec_env(make, n_envs=1, seed=0)
    values = []

    def step(obs, state, start):
        assert isinstance(obs, dict) and obs["state"].shape == (1, 4)  # a batch of one, as the VecEnv gives
        values.append(0.0)
        return np.array([0]), 0.0, state

    # pushing left for 5 steps keeps CartPole up: every episode ends by its time limit
    result = measure.rollout(step, env, 20, lambda o: o, lambda r: r, 0.99)
    env.close()
    assert len(result["episode_returns"]) == 4
    assert len(values) > 20  # the cut episodes' last observations were valued too


def test_the_corpus_cases_each_have_their_own_runs_and_a_scored_split(tmp_path):
    """A case's id names its runs' folders, so two cases under one id would share runs (the second
    skipped as done, and scored with the first's config); a split score.py does not know is never
    scored."""
    import run
    import score
    import yaml

    cases = run.load_cases()
    assert len({c["id"] for c in cases}) == len(cases)
    assert {c["split"] for c in cases} == set(score.SPLITS["all"])
    # nor is one config written twice under two ids (it would be scored in two splits, the
    # second no longer unseen)
    configs: dict[str, str] = {}
    for c in cases:
        what = [c["env"], c["path"], c.get("algo"), c.get("hyperparams"), c.get("args"), c["total_timesteps"]]
        key = yaml.safe_dump(what, sort_keys=True)
        assert key not in configs, f"{c['id']} has the config of {configs[key]}"
        configs[key] = c["id"]
    data = yaml.safe_load(run.CASES.read_text())
    data["cases"].append(dict(data["cases"][0]))
    twice = tmp_path / "cases.yaml"
    twice.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match=f"case ids used twice: {data['cases'][0]['id']}$"):
        run.load_cases(twice)


# Cases written before this check existed whose Gaussian knobs went to an env without a Box action
# space (tempcontrol's is MultiDiscrete): SB3 ignored them. Their labels still say what ran; their
# mechanism names overstate it. Kept as written (a split is fixed once its runs exist), none added.
_GAUSSIAN_KNOBS_IGNORED = frozenset(
    {
        "tempcontrol_ppo_runaway_log_std",
        "tempcontrol_recurrent_rmsprop_lr_huge",
        "tempcontrol_a2c_log_std_shrunk",
        "tempcontrol_a2c_runaway_log_std",
        "tempcontrol_ppo_log_std_shrunk",
        "tempcontrol_recurrent_log_std_shrunk",
        "tempcontrol_recurrent_runaway_log_std",
        "tempcontrol_recurrent_unnormalised_advantages",
        "tempcontrol_recurrent_saturated_outputs",
        "tempcontrol_a2c_std_init_underflow",
        "tempcontrol_ppo_std_init_overflow",
        "tempcontrol_ppo_log_std_capped",
        "tempcontrol_recurrent_log_std_capped",
        "tempcontrol_ppo_small_std_start",
    }
)


def test_gaussian_knobs_go_only_to_envs_with_a_box_action_space():
    """``rlsweep validate`` refuses a Gaussian knob on a non-Box env; the corpus builds its models
    without it, so a case could silently train something else than its mechanism says."""
    import run

    from sweeps.envs import env_factory

    cases, envs = run.load_cases(), {}
    for c in cases:
        knobs = {"log_std_init", "log_std_bounds", "use_sde"} & set(c.get("hyperparams") or {})
        if not knobs or c["id"] in _GAUSSIAN_KNOBS_IGNORED:
            continue
        key = json.dumps(c["env"], sort_keys=True, default=str)
        if key not in envs:
            env = env_factory(c["env"])()
            envs[key] = type(env.action_space).__name__
            env.close()
        assert envs[key] == "Box", f"{c['id']}: {sorted(knobs)} on a {envs[key]} action space"


def test_a_gsde_measurement_redraws_its_noise_as_training_does_and_leaves_training_its_own():
    """gSDE's noise is a matrix redrawn at each rollout of ``n_steps``: a measurement that kept one
    draw for its whole 3000 steps would measure a behaviour training never had (one draw's
    episodes all alike). The matrix training was using is put back afterwards."""
    import run
    import torch as th

    case = {
        "id": "probe",
        "env": {"id": "Pendulum-v1", "n_envs": 2},
        "algo": "PPO",
        "policy": "MlpPolicy",
        "hyperparams": {"n_steps": 200, "use_sde": True, "log_std_init": 0.0},
    }
    model, env, built = run.build_sb3(case, 0)
    model.policy.reset_noise(2)
    in_training = model.policy.action_dist.exploration_mat.clone()
    drawn = []
    real = model.policy.reset_noise
    model.policy.reset_noise = lambda n=1: (drawn.append(n), real(n))[1]
    torch_state = th.get_rng_state()
    result = run._safe_rollout(run.SB3Probe(model, case, 0, built))
    env.close()
    assert th.equal(th.get_rng_state(), torch_state)  # measuring a run does not change its training's draws
    assert len(drawn) == 1 + run.ROLLOUT_STEPS // 200  # before the first step, then after every 200th
    assert len(set(np.round(result["episode_returns"], 3))) == len(result["episode_returns"]) == 15
    assert th.equal(model.policy.action_dist.exploration_mat, in_training)


def test_nan_observations_reach_a_dict_observation():
    """The broken-sensor wrapper fills every float part of a Dict observation (the temperature
    env's) with NaN, as it does a Box one."""
    from sweeps.repro_envs import NanObservationsAfter
    from sweeps.temp_control import make_temp_control

    env = NanObservationsAfter(make_temp_control(phase="full"), after=2)
    obs, _ = env.reset(seed=0)
    first, *_ = env.step(env.action_space.sample())
    second, *_ = env.step(env.action_space.sample())
    assert np.isfinite(first["obs"]).all() and np.isnan(second["obs"]).all()


def test_nan_rewards_start_at_their_step():
    """The broken-reward wrapper pays the env's rewards until its step, NaN from then on."""
    from sweeps.repro_envs import NanRewardsAfter

    env = NanRewardsAfter(gym.make("CartPole-v1"), after=3)
    env.reset(seed=0)
    rewards = [env.step(0)[1] for _ in range(3)]
    assert rewards[:2] == [1.0, 1.0] and np.isnan(rewards[2])
