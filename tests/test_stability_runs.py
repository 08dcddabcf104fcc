"""StabilityCallback on real (tiny) SB3 training, stop_on in a sweep, and `rlsweep diagnose`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from statistics import median

import optuna
import pytest
import torch as th
import yaml
from mlflow.tracking import MlflowClient
from stable_baselines3 import A2C, PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import KVWriter, Logger

from stability import StabilityCallback
from stability.callback import _context as callback_context
from sweeps.repro_envs import make_spiky_targets
from tests.helpers import rlsweep, subprocess_env, tiny_spec

pytestmark = pytest.mark.slow
th.set_num_threads(1)
REPO = Path(__file__).resolve().parents[1]


class Capture(KVWriter):
    def __init__(self) -> None:
        self.dumps: list[tuple[int, dict]] = []

    def write(self, key_values: dict, key_excluded: dict, step: int = 0) -> None:
        self.dumps.append((step, dict(key_values)))


_rlsweep = rlsweep


@pytest.mark.parametrize("algo", [PPO, A2C])
def test_callback_captures_every_update_including_the_last(algo):
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    kwargs = {"n_steps": 32, "batch_size": 64, "n_epochs": 2} if algo is PPO else {"n_steps": 8}
    model = algo("MlpPolicy", env, seed=0, device="cpu", policy_kwargs={"net_arch": [8]}, **kwargs)
    writer = Capture()
    model.set_logger(Logger(None, [writer]))
    cb = StabilityCallback(min_update_steps=1)  # one record per update (the default groups small ones)
    model.learn(640 if algo is PPO else 160, callback=cb, log_interval=1)
    updates = 10
    assert len(cb.history) == updates
    rollout = 64 if algo is PPO else 16
    assert cb.history.steps == [rollout * (i + 1) for i in range(updates)]
    key = "train/policy_gradient_loss" if algo is PPO else "train/policy_loss"
    logged = [d[key] for _, d in writer.dumps if key in d]
    assert len(logged) == updates  # SB3 alone dumps one fewer: the last update is the callback's dump
    assert cb.history.values("pg_loss") == pytest.approx(logged)
    own = [d for _, d in writer.dumps if "stability/params_finite" in d or "stability/reward_std" in d]
    assert own and all("stability/log_std_min" not in d for d in own)  # Discrete: no log_std
    assert cb.history.values("reward_std")[0] == 0.0  # CartPole pays 1 per step...
    assert cb.history.values("return_std")[0] > 0.0  # ...but its returns have spread
    assert cb.verdict.verdict == "healthy"


def test_small_updates_are_grouped_and_averaged():
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = A2C("MlpPolicy", env, seed=0, device="cpu", n_steps=8, policy_kwargs={"net_arch": [8]})
    writer = Capture()
    model.set_logger(Logger(None, [writer]))
    cb = StabilityCallback(min_update_steps=64)  # 16-step updates: 4 per record
    model.learn(320, callback=cb, log_interval=1)
    logged = [d["train/policy_loss"] for _, d in writer.dumps if "train/policy_loss" in d]
    assert len(logged) == 20 and cb.history.steps == [64, 128, 192, 256, 320]
    expected = [sum(logged[i : i + 4]) / 4 for i in range(0, 20, 4)]
    assert cb.history.values("pg_loss") == pytest.approx(expected)
    # ep_return_recent: the mean of the episodes that ended within each record, in the order they
    # ended, which the Monitor's returns (SB3's buffer, under 100 here) split into consecutive runs
    ended = [float(e["r"]) for e in model.ep_info_buffer]
    recent = cb.history.values("ep_return_recent")
    assert len(ended) < 100 and 1 <= len(recent) <= len(cb.history)
    assert _consecutive_means(ended, recent)


def _consecutive_means(values: list[float], means: list[float]) -> bool:
    """Whether ``values`` splits into consecutive non-empty runs whose means are ``means``, in order."""
    if not means:
        return not values
    return any(
        sum(values[:m]) / m == pytest.approx(means[0]) and _consecutive_means(values[m:], means[1:])
        for m in range(1, len(values) + 1)
    )


def test_crash_in_rollout_ends_as_nan_scale_with_the_torch_error():
    env = make_vec_env(make_spiky_targets, n_envs=1, seed=0)
    model = A2C("MlpPolicy", env, seed=0, device="cpu", learning_rate=0.1, max_grad_norm=float("inf"))
    cb = StabilityCallback()
    with pytest.raises(ValueError, match="Expected parameter") as crash:
        model.learn(5000, callback=cb)
    verdict = cb.finish(crash.value)
    assert verdict.verdict == "nan_scale"
    finding = verdict.findings[0]
    assert "Expected parameter" in finding.evidence["error"]
    assert any("log_std_bounds" in a for a in finding.advice)
    assert verdict.onset_step <= model.num_timesteps


@pytest.mark.parametrize("wrapper", ["NanObservationsAfter", "NanRewardsAfter"])
def test_an_env_that_hands_back_nan_is_named_and_given_no_knob(wrapper):
    """A sensor that reads NaN from step 300 on, under a healthy PPO: the verdict names the env's
    observation (or reward) and its step, and proposes no knob (the A2C above, whose huge actions
    break the env's reward, keeps its patches)."""
    from sweeps import repro_envs

    env = make_vec_env(
        "Pendulum-v1", n_envs=1, seed=0, wrapper_class=getattr(repro_envs, wrapper), wrapper_kwargs={"after": 300}
    )
    model = PPO("MlpPolicy", env, n_steps=128, batch_size=64, n_epochs=2, seed=0, device="cpu")
    cb = StabilityCallback()
    error = None
    try:
        model.learn(1024, callback=cb)
    except ValueError as crash:
        error = crash
    verdict = cb.finish(error)
    what = "observation" if wrapper == "NanObservationsAfter" else "reward"
    assert cb.history.context["env_nonfinite"]["what"] == what and cb.history.context["env_nonfinite"]["step"] == 300
    assert verdict.verdict == "nan_scale"
    finding = next(f for f in verdict.findings if f.kind == "nan_scale")
    assert f"non-finite {what} at step 300" in finding.summary and finding.patches == []


def test_stop_on_ends_a_dead_run_early():
    env = make_vec_env("CartPole-v1", n_envs=1, seed=0)
    model = PPO(
        "MlpPolicy",
        env,
        seed=0,
        device="cpu",
        n_steps=32,
        batch_size=32,
        n_epochs=2,
        learning_rate=1e-12,
        policy_kwargs={"net_arch": [8]},
    )
    cb = StabilityCallback(stop_on=["dead_policy_gradient"])
    model.learn(10_000, callback=cb)
    assert cb.stopped_by == "dead_policy_gradient"
    assert 5000 <= model.num_timesteps <= 6000  # judged once half the budget is done, then stopped
    assert cb.verdict.verdict == "dead_policy_gradient"


def test_gaussian_signals_and_tensorboard_diagnose(tmp_path):
    env = make_vec_env("Pendulum-v1", n_envs=2, seed=0)
    model = PPO(
        "MlpPolicy",
        env,
        seed=0,
        device="cpu",
        n_steps=64,
        batch_size=64,
        n_epochs=2,
        policy_kwargs={"net_arch": [16]},
        tensorboard_log=str(tmp_path / "tb"),
    )
    cb = StabilityCallback(min_update_steps=1)
    model.learn(1280, callback=cb, tb_log_name="run")
    h = cb.history
    assert len(h) == 10
    for name in (
        "log_std_min",
        "log_std_max",
        "grad_norm",
        "grad_norm_actor",
        "grad_norm_critic",
        "grad_norm_log_std",
        "adv_std",
        "return_rms",
        "loc_abs_max",
        "params_finite",
        "update_ratio",
    ):
        assert h.has(name), name
    assert h.values("log_std_max")[-1] == pytest.approx(float(model.policy.log_std.detach().max()))
    # one ratio per update, the first measured from the weights training started with
    assert len(h.values("update_ratio")) == 10 and all(0.0 < v < 1.0 for v in h.values("update_ratio"))
    result = subprocess.run(
        [sys.executable, "-m", "sweeps", "diagnose", str(tmp_path / "tb"), "--json"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "healthy" and report["updates"] == 10
    assert not any(f["certain"] for f in report["findings"])  # 1280 steps: warnings at most


def test_diagnose_refuses_unreadable_input_cleanly(tmp_path):
    (tmp_path / "events.out.tfevents.1.host").write_bytes(b"this is not a tensorboard file at all")
    bad = {
        "empty": b"",
        "truncated": b"\x18\x00\x00\x00\x00\x00\x00\x00\xa3\x7f\x4b\x22\x09\x00",
        "noise": bytes(range(256)) * 16,
    }
    for name, data in bad.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "events.out.tfevents.1.host").write_bytes(data)
    for args in (
        [str(tmp_path / "events.out.tfevents.1.host")],
        *([str(tmp_path / name)] for name in bad),
        ["0123456789abcdef0123456789abcdef", "--tracking-uri", f"sqlite:///{tmp_path / 'none.db'}"],
        [str(tmp_path / "missing")],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "sweeps", "diagnose", *args],
            capture_output=True,
            text=True,
            env=subprocess_env(),
            cwd=tmp_path,
        )
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr and result.stderr.strip()
    assert not (tmp_path / "none.db").exists()


def test_stop_on_in_a_sweep_prunes_with_the_verdict(tmp_path):
    spec = tiny_spec(
        "doomed",
        total_timesteps=4096,
        trials=2,
        space={"learning_rate": {"type": "choice", "values": [1e-12, 1e-3]}},
        sampler={"kind": "grid"},
        stability={"stop_on": ["dead_policy_gradient"]},
    )
    spec["env"]["n_envs"] = 1
    spec["hyperparams"] |= {"n_steps": 32, "batch_size": 32, "n_epochs": 4, "policy_kwargs": {"net_arch": [64]}}
    (tmp_path / "doomed.yaml").write_text(yaml.safe_dump(spec))
    result = _rlsweep(tmp_path, "run", "doomed.yaml", "--workers", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    study = optuna.load_study(study_name="doomed", storage=f"sqlite:///{tmp_path / 'results/doomed/optuna.db'}")
    by_lr = {t.params["learning_rate"]: t for t in study.get_trials()}
    dead = by_lr[1e-12]
    assert dead.state.name == "PRUNED" and dead.value is None
    assert dead.user_attrs["rlsweep.verdict"] == "dead_policy_gradient"
    assert dead.user_attrs["rlsweep.outcome"] == "unstable"
    # stop_on names only dead_policy_gradient: the learning trial runs to its end and is scored. Its
    # verdict is not asserted healthy: with single-env 32-step rollouts over 4k steps its critic
    # lags returns rising 20 -> 350 and stuck_value_loss fires (a known false positive, in the README)
    assert by_lr[1e-3].state.name == "COMPLETE" and by_lr[1e-3].value is not None
    assert by_lr[1e-3].user_attrs["rlsweep.verdict"] != "dead_policy_gradient"

    client = MlflowClient(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("doomed")
    found = client.search_runs(
        [experiment.experiment_id], filter_string="tags.`stability.verdict` = 'dead_policy_gradient'"
    )
    seeds = [r for r in found if "rlsweep.seed" in r.data.tags]
    # the first seed to be found dead ends the trial: its sibling, training beside it, is stopped at
    # its next update (cancelled), unless it reached the same verdict first
    dead_trial = [
        r
        for r in client.search_runs([experiment.experiment_id])
        if "rlsweep.seed" in r.data.tags and r.data.tags["rlsweep.trial"] == str(dead.number)
    ]
    cancelled = [r for r in dead_trial if r.data.tags["rlsweep.outcome"] == "skipped"]
    assert len(seeds) + len(cancelled) == 2 and len(found) == len(seeds) + 1 and seeds
    assert all("found dead_policy_gradient" in r.data.tags["rlsweep.cancelled"] for r in cancelled)
    for run in seeds:
        assert run.data.tags["stability.stopped_by"] == "dead_policy_gradient"
        assert int(run.data.tags["stability.onset_step"]) < 4096
        assert run.data.metrics["time/train_seconds"] > 0
        names = {a.path for a in client.list_artifacts(run.info.run_id, "stability")}
        assert names == {"stability/verdict.json", "stability/signals.png"}
        folder = Path(client.download_artifacts(run.info.run_id, "stability", str(tmp_path / run.info.run_id)))
        assert json.loads((folder / "verdict.json").read_text())["verdict"] == "dead_policy_gradient"
        assert (folder / "signals.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        history = client.get_metric_history(run.info.run_id, "stability/params_finite")
        assert history and max(m.step for m in history) < 4096  # stopped early: budget saved
    status = _rlsweep(tmp_path, "status", "doomed")
    assert (
        status.returncode == 0
        and "dead_policy_gradient 1" in status.stdout
        and "complete: 1, unstable: 1" in status.stdout
    )


@pytest.mark.parametrize(
    "algo, kwargs, expect",
    [
        (PPO, {"n_steps": 64, "batch_size": 64, "n_epochs": 2, "normalize_advantage": False}, "dead_policy_gradient"),
        (A2C, {"n_steps": 5}, None),
    ],
)
def test_live_verdict_and_diagnose_of_the_same_log_agree(tmp_path, algo, kwargs, expect):
    """The callback's verdict during training and `rlsweep diagnose` on the log that run wrote are
    the same verdict: same records, same checks. (A plain SB3 log, without the callback's extra
    signals, is a different input; the corpus benchmark scores that path on its own.)"""
    from stable_baselines3.common.logger import configure

    from stability.diagnose import history_from_scalars
    from stability.readers import read_tensorboard
    from stability.verdict import judge
    from sweeps.wrappers import ScaleReward

    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    if expect:  # vanishing advantages: rewards x 1e-7 and no advantage normalisation
        env = ScaleReward(env, 1e-7)
    model = algo("MlpPolicy", env, seed=0, device="cpu", policy_kwargs={"net_arch": [16]}, **kwargs)
    model.set_logger(configure(str(tmp_path / "tb"), ["tensorboard"]))
    cb = StabilityCallback()
    model.learn(4096, callback=cb, log_interval=1)
    model.logger.close()
    offline = judge(history_from_scalars(read_tensorboard(tmp_path / "tb")))
    assert offline.verdict == cb.verdict.verdict
    assert abs(len(offline.findings) - len(cb.verdict.findings)) <= 1
    if expect:
        assert cb.verdict.verdict == expect
    result = subprocess.run(
        [sys.executable, "-m", "sweeps", "diagnose", str(tmp_path / "tb"), "--json"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=tmp_path,
    )
    report = json.loads(result.stdout)
    assert report["verdict"] == cb.verdict.verdict
    assert all("patches" in f for f in report["findings"])
    if expect:  # the live verdict's patches come from the run's config: advantages are not normalised
        dead = next(f for f in cb.verdict.findings if f.kind == expect)
        assert {"normalize_advantage": True} in [p["patch"] for p in dead.patches]


def test_override_info_keys_are_configurable():
    import gymnasium as gym

    from sweeps.repro_envs import OverrideActions

    env = make_vec_env(lambda: OverrideActions(gym.make("CartPole-v1"), prob=1.0, key="safety_stop"), n_envs=1, seed=0)
    model = PPO(
        "MlpPolicy", env, seed=0, device="cpu", n_steps=64, batch_size=64, n_epochs=1, policy_kwargs={"net_arch": [8]}
    )
    default, custom = StabilityCallback(), StabilityCallback(override_keys=["safety_stop"], reference_return=300.0)
    model.learn(128, callback=[default, custom])
    assert custom.history.values("override_fraction")[0] == 1.0
    assert default.history.values("override_fraction")[0] == 0.0
    # the reference return: a wrapper under Monitor that may change the reward leaves none; one given stands
    assert "reference_return" not in default.history.context
    assert (custom.history.context["reference_return"], custom.history.context["reference_source"]) == (300.0, "given")
    plain = StabilityCallback()
    cartpole = PPO("MlpPolicy", "CartPole-v1", seed=0, device="cpu", n_steps=64, batch_size=64, n_epochs=1)
    cartpole.learn(64, callback=plain)
    assert plain.history.context["reference_return"] == 475.0  # CartPole-v1's registered reward_threshold
    # the time limit of the env as made (another than registered here), through the wrapper too
    assert default.history.context["time_limit"] == 500 and plain.history.context["time_limit"] == 500
    cut = StabilityCallback()
    cut_env = make_vec_env("CartPole-v1", env_kwargs={"max_episode_steps": 120})
    short = PPO("MlpPolicy", cut_env, seed=0, device="cpu", n_steps=64, batch_size=64, n_epochs=1)
    short.learn(64, callback=cut)
    assert cut.history.context["time_limit"] == 120 and "reference_return" not in cut.history.context
    # a SubprocVecEnv's workers are asked for the limit alone (their env, and its spec, stay there)
    from stable_baselines3.common.vec_env import SubprocVecEnv

    remote = StabilityCallback()
    sub_env = make_vec_env("CartPole-v1", n_envs=2, env_kwargs={"max_episode_steps": 90}, vec_env_cls=SubprocVecEnv)
    try:
        model = PPO("MlpPolicy", sub_env, seed=0, device="cpu", n_steps=32, batch_size=64, n_epochs=1)
        model.learn(64, callback=remote)
    finally:
        sub_env.close()
    assert remote.history.context["time_limit"] == 90 and "reference_return" not in remote.history.context


def test_optimizer_class_by_name_builds_the_model(write_spec, cli):
    """A spec that validates builds its model: policy_kwargs.optimizer_class given as a name."""
    from sweeps import algos, knobs

    built = knobs.build(
        PPO, "MlpPolicy", {"policy_kwargs": {"optimizer_class": "SGD", "optimizer_kwargs": {"momentum": 0.9}}}
    )
    model = PPO(built.policy, "CartPole-v1", device="cpu", **built.algo_kwargs)
    assert type(model.policy.optimizer).__name__ == "SGD"
    assert model.policy.optimizer.param_groups[0]["momentum"] == 0.9
    assert callback_context(model, None)["momentum"] == 0.9  # recorded: it sizes SGD's step (see advice)
    built = knobs.build(PPO, "MlpPolicy", {"optimizer": "sgd", "learning_rate": 0.1})
    assert type(PPO(built.policy, "CartPole-v1", device="cpu", **built.algo_kwargs).policy.optimizer).__name__ == "SGD"
    spec = write_spec(tiny_spec(hyperparams={"policy_kwargs": {"optimizer_class": "Sgdd"}}))
    result = cli("validate", str(spec))
    assert result.returncode == 2 and "optimizer_class" in result.stdout + result.stderr
    assert algos.class_name_problem("optimizer_class", "SGD") is None


def test_spec_override_keys_reach_the_callback():
    import tempfile

    from sweeps.configs import stability_settings
    from sweeps.spec import load as load_spec
    from sweeps.trial import _stability_callback

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.yaml"
        path.write_text(yaml.safe_dump(tiny_spec(stability={"override_keys": ["safety_stop"], "reference_return": 90})))
        spec = load_spec(path)
    settings = stability_settings(spec)
    config = type("C", (), {"stability": settings})()
    callback = _stability_callback(config, None, 0.01)
    assert callback.override_keys == ("safety_stop",) and callback.reference_return == 90.0
    assert callback.reward_scale == 0.01


# The quickstart's trial 4 of a clean-clone make demo (2026-12-06): gamma 0.999 with 64-step
# rollouts. Its seeds evaluate at 450-500, as well as the best trial, while its critic stays
# 67-72% off the returns: once called stuck_value_loss.
_LAGGING_CRITIC = {
    "learning_rate": 0.0009658179826892162,
    "n_steps": 64,
    "batch_size": 128,
    "gamma": 0.999,
    "clip_range": 0.12040896214960561,
    "ent_coef": 4.232824558620121e-05,
}


@pytest.mark.parametrize("fixed", [None, _LAGGING_CRITIC], ids=["first-two-trials", "lagging-critic"])
def test_quickstart_gives_no_failure_verdict_to_seeds_that_learn(tmp_path, fixed):
    """The quickstart's first two configs, and the one whose critic lags a policy that learns as
    well as the best: every seed that learns is healthy (a lagging critic is a warning)."""
    from tests.helpers import split_runs, stores

    spec = yaml.safe_load((REPO / "conf" / "sweeps" / "quickstart.yaml").read_text()) | {"trials": 2}
    if fixed is not None:
        spec = {k: v for k, v in spec.items() if k not in ("space", "sampler")} | {"trials": 1}
        spec["hyperparams"] = spec["hyperparams"] | fixed
    (tmp_path / "quickstart.yaml").write_text(yaml.safe_dump(spec))
    result = rlsweep(tmp_path, "run", "quickstart.yaml", "--workers", "2")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    client, experiment, _ = stores(tmp_path, "quickstart")
    _, seeds = split_runs(client, experiment.experiment_id)
    assert len(seeds) == 2 * spec["trials"]
    learnt = [s for s in seeds if s.data.metrics.get("eval/mean_return", 0.0) >= 150.0]  # random: ~20
    assert learnt, "no seed learnt: the check below would prove nothing"
    assert {s.data.tags["stability.verdict"] for s in learnt} == {"healthy"}
    if fixed is not None:
        # The critic is off the returns its policy earns (the callback's critic_error, read here
        # without the detectors: the error's RMS over the returns' RMS, over the last records),
        # so the check above is on a lagging critic. Whether its finding fires beside a policy that
        # learns turns on the critic's error half way through, which differs between CPUs (on
        # one, ~0.7 on both windows; on another, under the 0.65 bar at half): where it fires it
        # is a warning that names why, never a failure.
        lag = max(
            median([m.value for m in client.get_metric_history(s.info.run_id, "stability/critic_error")][-10:])
            for s in learnt
        )
        assert lag >= 0.6, f"the critic is within {lag:.2f} of its returns: not the lagging critic this test is for"
        for run in learnt:
            path = client.download_artifacts(run.info.run_id, "stability/verdict.json", str(tmp_path))
            findings = json.loads(Path(path).read_text())["findings"]
            stuck = [f for f in findings if f["kind"] == "stuck_value_loss"]
            assert all(not f["certain"] and "learns regardless" in f["causes"][0] for f in stuck), stuck
