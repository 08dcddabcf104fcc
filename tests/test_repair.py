"""Repair: patch arithmetic and the attempt loop as pure logic, the driver's repair path against a
scripted backend, and ``rlsweep repair`` end to end on the A2C nan_scale reproduction."""

from __future__ import annotations

import fcntl
import importlib.util
import json
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from sweeps import repair as rp
from sweeps.spec import from_dict
from sweeps.study_storage import sole_writer_storage
from tests.fakes import Recorder, Scripted
from tests.helpers import stores


# --- patches ------------------------------------------------------------------------------------
def test_apply_patch_keeps_the_configs_shape_and_never_changes_its_input():
    base = {"learning_rate": "lin_3e-4", "normalize": False, "init_gains": {"policy": 0.01}, "n_steps": 5}
    out = rp.apply_patch(
        base, {"learning_rate": 1e-4, "normalize": {"reward": True}, "init_gains": {"value": 1.0}, "max_grad_norm": 0.5}
    )
    assert out == {
        "learning_rate": "lin_0.0001",
        "normalize": {"obs": False, "reward": True},
        "init_gains": {"policy": 0.01, "value": 1.0},
        "n_steps": 5,
        "max_grad_norm": 0.5,
    }
    assert base["normalize"] is False and base["init_gains"] == {"policy": 0.01}
    schedule = {"learning_rate": {"schedule": "linear", "initial": 1e-3, "final": 1e-4, "critic": 2e-3}}
    assert rp.apply_patch(schedule, {"learning_rate": 1e-4})["learning_rate"] == {
        "schedule": "linear",
        "initial": 1e-4,
        "final": 1e-5,
        "critic": 2e-4,
    }
    # normalize: true already normalises rewards and observations; the patch keeps both
    assert rp.apply_patch({"normalize": True}, {"normalize": {"reward": True}})["normalize"] == {
        "reward": True,
        "obs": True,
    }


def _finding(kind: str, patches: list[dict[str, Any]], certain: bool = True) -> dict[str, Any]:
    return {"kind": kind, "certain": certain, "patches": [{"patch": p, "why": kind} for p in patches]}


def test_candidates_put_causes_before_consequences_and_warnings_last():
    verdicts = {
        0: {
            "findings": [
                _finding("stuck_value_loss", [{"vf_coef": 0.5}]),
                _finding("nan_scale", [{"log_std_bounds": [-5, 2]}], certain=False),
            ]
        },
        1: {"findings": [_finding("exploding_updates", [{"max_grad_norm": 0.5}, {"vf_coef": 0.5}])]},
    }
    assert [c["patch"] for c in rp.candidates(verdicts)] == [
        {"max_grad_norm": 0.5},
        {"vf_coef": 0.5},
        {"log_std_bounds": [-5, 2]},
    ]


def test_the_menu_never_offers_what_the_config_or_its_algorithm_already_has():
    items = {
        m["name"]: m["patch"]
        for m in rp.menu({"learning_rate": 3e-3, "ent_coef": 0.01}, {"ent_coef": 0.0, "max_grad_norm": 0.5}, True, True)
    }
    assert items["lr/3"] == {"learning_rate": 1e-3} and items["lr/10"] == {"learning_rate": 3e-4}
    assert "clip" not in items and "ent_coef" not in items and "value_gain" not in items  # SB3's value gain is 1
    assert "policy_gain" not in items  # nor its policy gain, 0.01
    gains = {m["name"] for m in rp.menu({"init_gains": {"policy": 100.0}}, {}, False, True)}
    assert "policy_gain" in gains
    assert "weight_decay" not in items and items["log_std_bounds"] == {"log_std_bounds": [-5, 2]}
    assert "log_std_bounds" not in {m["name"] for m in rp.menu({}, {}, False, True)}
    # SB3's discount where the config's is a long horizon (as stuck_value_loss advises), not otherwise
    assert "gamma" not in items and "gamma" not in {m["name"] for m in rp.menu({}, {"gamma": 0.99}, False, True)}
    assert {"gamma": 0.99} in [m["patch"] for m in rp.menu({"gamma": 0.9999}, {"gamma": 0.99}, False, True)]
    # no value clip only where the config sets one (SB3's PPO has none by default)
    assert "clip_range_vf" not in items
    clipped = {m["name"]: m["patch"] for m in rp.menu({"clip_range_vf": 3e-5}, {"clip_range_vf": None}, True, True)}
    assert clipped["clip_range_vf"] == {"clip_range_vf": None}
    # the algorithm's own optimizer at its default rate, only where the config named another
    assert "own_optimizer" not in items and "own_optimizer" not in {
        m["name"] for m in rp.menu({"optimizer": "adam"}, {}, False, True)
    }
    sgd = {
        m["name"]: m["patch"]
        for m in rp.menu({"optimizer": "sgd"}, {"learning_rate": 7e-4, "use_rms_prop": True}, False, True)
    }
    assert sgd["own_optimizer"] == {"optimizer": "rmsprop", "learning_rate": 7e-4}


# --- the plan -----------------------------------------------------------------------------------
def _plan(
    candidates: list[dict[str, Any]], verdict: str = "nan_scale", returns: dict | None = None, **kw: Any
) -> rp.Plan:
    return rp.Plan(
        3,
        {},
        verdict,
        returns or {},
        [0, 1],
        [2, 3],
        [{"patch": p, "why": "w", "source": verdict} for p in candidates],
        kw.pop("max_attempts", 2),
        menu=rp.menu({}, {"learning_rate": 7e-4}, True, True),
        **kw,
    )


def _finish(attempt: rp.Attempt, verdicts: list[str], returns: list[float], offered: list[dict] = ()) -> None:
    attempt.verdicts = dict(enumerate(verdicts))
    attempt.returns = dict(enumerate(returns))
    attempt.offered = [{"patch": p, "why": "w", "source": "x"} for p in offered]


def test_a_failing_attempt_keeps_its_patch_and_adds_the_next_finding():
    plan = _plan([{"log_std_bounds": [-5, 2]}, {"learning_rate": 2e-4}])
    first = plan.next_attempt()
    assert first.patch == {"log_std_bounds": [-5, 2]}
    _finish(first, ["nan_scale", "healthy"], [1.0], offered=[{"log_std_bounds": [-5, 2]}, {"max_grad_norm": 0.5}])
    assert plan.passes(first)[0] is False
    second = plan.next_attempt()
    assert second.patch == {"log_std_bounds": [-5, 2], "max_grad_norm": 0.5} and second.added == {"max_grad_norm": 0.5}
    _finish(second, ["healthy", "healthy"], [5.0, 6.0])
    assert plan.passes(second) == (True, "healthy on every seed")
    assert plan.confirmed(second, {2: "healthy", 3: "healthy"}, {2: 4.0, 3: 6.0})
    assert plan.status == "repaired" and plan.repaired is second
    assert second.confirm["score"] == pytest.approx(4.0) and plan.to_dict()["attempts_used"] == 2
    assert plan.next_attempt() is None and plan.status == "repaired"


def test_a_healthy_attempt_that_returns_less_is_dropped_for_the_next_candidate():
    plan = _plan(
        [{"vf_coef": 0.5}, {"normalize": {"reward": True}}], verdict="stuck_value_loss", returns={0: 300.0, 1: 310.0}
    )
    first = plan.next_attempt()
    _finish(first, ["healthy", "healthy"], [200.0, 210.0])
    ok, why = plan.passes(first)
    assert not ok and "< the failing config's 305" in why
    assert plan.next_attempt().patch == {"normalize": {"reward": True}}  # alone: the first patch hurt returns
    assert plan.next_attempt() is None and plan.status == "failed" and "2 attempt(s)" in plan.message


def _judged(verdict: str, *patches: dict) -> dict[str, Any]:
    """A seed's verdict as a training reports it, its finding carrying ``patches``."""
    finding = {"kind": verdict, "certain": True, "evidence": {}, "patches": [{"patch": p, "why": "w"} for p in patches]}
    return {"verdict": verdict, "findings": [] if verdict == "healthy" else [finding]}


def test_a_failed_confirmation_without_new_findings_uses_no_attempt_but_ends_that_line():
    plan = _plan([{"log_std_bounds": [-5, 2]}, {"max_grad_norm": 0.5}])
    first = plan.next_attempt()
    _finish(first, ["healthy", "healthy"], [1.0, 1.0])
    # the failing fresh seed's findings carry only the patch already applied
    judged = {2: _judged("healthy"), 3: _judged("nan_scale", {"log_std_bounds": [-5, 2]})}
    assert not plan.confirmed(first, {2: "healthy", 3: "nan_scale"}, {2: 1.0}, judged)
    assert plan.status == "pending" and plan.next_attempt().patch == {"max_grad_norm": 0.5}


def test_a_fresh_seeds_own_failure_is_answered_on_top_of_the_patch_that_passed():
    plan = _plan([{"log_std_bounds": [-5, 2]}, {"learning_rate": 0.0333}])
    first = plan.next_attempt()
    _finish(first, ["healthy", "healthy"], [1.0, 1.0])
    judged = {2: _judged("exploding_updates", {"learning_rate": 0.01}, {"max_grad_norm": 0.5}), 3: _judged("healthy")}
    assert not plan.confirmed(first, {2: "exploding_updates", 3: "healthy"}, {2: 9.0, 3: 1.0}, judged)
    second = plan.next_attempt()
    assert second.patch == {"log_std_bounds": [-5, 2], "learning_rate": 0.01} and second.source == "exploding_updates"
    assert second.added == {"learning_rate": 0.01} and second.number == 2
    _finish(second, ["healthy", "healthy"], [2.0, 2.0])
    assert plan.confirmed(second, {2: "healthy", 3: "healthy"}, {2: 2.0, 3: 2.0})
    assert plan.status == "repaired" and plan.repaired is second
    # the random baseline continues such a line too, with a draw from the menu
    rand = _plan([], strategy="random")
    first = rand.next_attempt()
    _finish(first, ["healthy", "healthy"], [1.0, 1.0])
    assert not rand.confirmed(first, {2: "exploding_updates", 3: "healthy"}, {2: 9.0, 3: 1.0}, judged)
    second = rand.next_attempt()
    assert second.patch != first.patch and all(second.patch[k] == v for k, v in first.patch.items())


def test_a_last_attempt_healthy_only_on_the_trials_seeds_is_said_so_not_the_failing_verdicts_limits():
    plan = _plan([{"init_gains": {"policy": 0.01}}], verdict="degenerate_reward", max_attempts=1)
    first = plan.next_attempt()
    _finish(first, ["healthy", "healthy"], [-100.0, -120.0])
    assert plan.passes(first)[0]
    assert not plan.confirmed(first, {2: "degenerate_reward", 3: "healthy"}, {2: -500.0, 3: -90.0})
    assert plan.next_attempt() is None and plan.status == "failed"
    assert "attempt 1 (init_gains" in plan.message and "not on fresh seeds [2, 3] (degenerate_reward)" in plan.message
    assert "reward never varies" not in plan.message and not plan.fix_env
    never_confirmed = _plan([], verdict="degenerate_reward", max_attempts=1)  # its attempt failed on its own seeds
    never_confirmed.attempts.append(rp.Attempt(1, {}, {}, "w", "x"))
    assert never_confirmed.next_attempt() is None and "reward never varies" in never_confirmed.message
    assert never_confirmed.fix_env


def test_what_knobs_cannot_repair_is_said_not_tried():
    degenerate = _plan([], verdict="degenerate_reward")
    assert degenerate.next_attempt() is None and degenerate.status == "failed"
    assert "reward never varies" in degenerate.message and not degenerate.attempts and degenerate.fix_env
    crashed = _plan([], verdict="crashed")  # an unclassified crash gets the general stabilisers
    first = crashed.next_attempt()
    assert first.source == "menu" and first.patch == {"learning_rate": 0.000233}


def test_an_env_that_broke_on_its_own_gets_no_patch_and_the_plan_says_so():
    """A NaN sensor: every nan_scale seed's finding names the env. Its other findings' patches
    (a warning's clip) only describe what the NaN broke, so none is offered, and the plan says
    why instead of trying; an attempt that fixed the policy and then met the env's NaN ends it."""
    broke = {"kind": "nan_scale", "certain": True, "evidence": {"env_nonfinite_observation_step": 300}, "patches": []}
    warning = _finding("exploding_updates", [{"max_grad_norm": 0.5}], certain=False)
    verdicts = {
        0: {"verdict": "nan_scale", "findings": [broke, warning]},
        1: {"verdict": "nan_scale", "findings": [broke]},
    }
    assert rp.env_broke(verdicts) and rp.candidates(verdicts) == []
    own = {"kind": "nan_scale", "certain": True, "evidence": {}, "patches": [{"patch": {"max_grad_norm": 0.5}}]}
    mixed = verdicts | {1: {"verdict": "nan_scale", "findings": [own]}}  # one seed's policy broke first
    assert not rp.env_broke(mixed) and rp.candidates(mixed)
    untried = _plan([], verdict="nan_scale", env_broke=True)
    assert untried.next_attempt() is None and not untried.attempts
    assert "not repairable with knobs" in untried.message and "fix the env" in untried.message and untried.fix_env
    plan = _plan([{"log_std_bounds": [-5, 2], "log_std_init": 0.0}, {"learning_rate": 1e-4}], verdict="nan_scale")
    first = plan.next_attempt()
    _finish(first, ["nan_scale", "nan_scale"], [])
    first.env_broke = True
    assert plan.next_attempt() is None and plan.status == "failed" and len(plan.attempts) == 1
    assert "attempt 1 (log_std_bounds" in plan.message and "fix the env" in plan.message
    assert plan.to_dict()["fix_env"] is True


def test_patches_the_config_cannot_take_are_skipped_and_named():
    plan = _plan(
        [{"max_grad_norm": 0.5}, {"learning_rate": 1e-4}],
        check=lambda p: "SAC has no max_grad_norm" if "max_grad_norm" in p else None,
    )
    assert plan.next_attempt().patch == {"learning_rate": 1e-4}
    assert plan.to_dict()["not_applicable"] == ["max_grad_norm: 0.5: SAC has no max_grad_norm"]


def test_the_random_baseline_draws_from_the_menu_reproducibly():
    draws = []
    for _ in range(2):
        plan = _plan([{"max_grad_norm": 0.5}], strategy="random", rng_seed=5)
        draws.append(plan.next_attempt().patch)
    assert draws[0] == draws[1] and draws[0] in [m["patch"] for m in plan.menu]


def test_the_summary_file_keeps_other_trials_and_replaces_a_rerun(tmp_path):
    path = tmp_path / "repairs.yaml"
    a, b = _plan([{"vf_coef": 0.5}]), _plan([], verdict="degenerate_reward")
    b.origin = 4
    a.next_attempt()
    b.next_attempt()
    rp.write_summary(path, [a, b])
    a.finish("failed", "gave up")
    doc = rp.write_summary(path, [a])
    assert [r["trial"] for r in doc["repairs"]] == [3, 4] and doc["totals"] == {"failed": 2}
    assert yaml.safe_load(path.read_text())["repairs"][0]["message"] == "gave up"


# --- the driver, against a scripted backend -------------------------------------------------------
def _driver(
    outcome: Any, repair: rp.RepairSettings | None = None, trials: int = 1, auto: bool = True, storage: Any = None
):
    from sweeps.driver import Driver

    spec = from_dict(
        {
            "name": "scripted",
            "env": {"id": "Pendulum-v1"},
            "algo": "A2C",
            "total_timesteps": 1000,
            "seeds": 2,
            "trials": trials,
            "space": {"learning_rate": {"type": "choice", "values": [0.1, 0.2]}},
            "stability": {"repair": {"auto": auto, "max_attempts": 2}},
        }
    )
    study = optuna.create_study(direction="maximize", storage=storage)
    backend, tracker = Scripted.outcomes(outcome), Recorder()
    return Driver(spec, backend, tracker, study, repair=repair), study, backend, tracker


def test_auto_repair_runs_in_the_sweep_and_records_each_attempt_as_a_new_trial():
    def outcome(hp: dict, seed: int) -> tuple[str, float]:
        return ("healthy", 10.0 + seed) if hp.get("log_std_bounds") == [-5, 2] else ("nan_scale", -100.0)

    driver, study, backend, tracker = _driver(outcome, rp.RepairSettings(budget=8))
    progress = driver.run()
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]  # the failing one was scored (no stop_on)
    original, fixed = trials
    assert original.user_attrs["rlsweep.verdict"] == "nan_scale" and "rlsweep.repair_of" not in original.user_attrs
    assert original.user_attrs["rlsweep.patches"][0]["patch"] == {"log_std_bounds": [-5, 2]}
    assert fixed.user_attrs["rlsweep.repair_of"] == 0 and fixed.user_attrs["rlsweep.repair_patch"] == {
        "log_std_bounds": [-5, 2]
    }
    assert fixed.params == {"learning_rate": original.params["learning_rate"], "patch.log_std_bounds=[-5, 2]": True}
    assert fixed.value == pytest.approx(10.5) and fixed.user_attrs["rlsweep.confirm"]["seeds"] == [2, 3]
    assert progress.done == 1 and progress.repairs == {"repaired": 1}
    seeds_run = sorted((c.trial < 0, c.seed) for c in backend.submitted)
    assert seeds_run == [(False, 0), (False, 1), (True, 0), (True, 1), (True, 2), (True, 3)]
    parent = tracker.runs[tracker.find_trial_run(0)]
    assert parent["tags"]["rlsweep.repaired_by"] and parent["tags"]["rlsweep.repair"].startswith("repaired")
    repair_runs = [r for r in tracker.runs.values() if r["tags"].get("rlsweep.repair_of") == "0"]
    assert {r["name"] for r in repair_runs} >= {"trial-0-repair-1", "trial-0-repair-1-confirm"}
    from sweeps import study as st

    assert [t.number for t in st.counted(study)] == [0]  # repairs never count towards 'trials'


def test_repair_combines_patches_and_stops_at_max_attempts():
    def both(hp: dict, seed: int) -> tuple[str, float]:
        fixed = hp.get("log_std_bounds") == [-5, 2] and hp.get("max_grad_norm") == 0.5
        return ("healthy", 1.0) if fixed else ("nan_scale", -100.0)

    driver, study, _, _ = _driver(both, rp.RepairSettings(max_attempts=2))
    driver.run()
    plan = driver.plans[0]
    assert plan.status == "repaired" and plan.repaired.patch == {"log_std_bounds": [-5, 2], "max_grad_norm": 0.5}
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE", "COMPLETE", "COMPLETE"]

    driver, study, _, _ = _driver(lambda hp, seed: ("nan_scale", -100.0), rp.RepairSettings(max_attempts=2))
    driver.run()
    plan = driver.plans[0]
    assert plan.status == "failed" and len(plan.attempts) == 2 and "2 attempt(s)" in plan.message
    assert [t.user_attrs.get("rlsweep.repair_attempt") for t in study.get_trials()] == [None, 1, 2]


def test_a_fresh_seeds_failure_in_a_sweep_is_answered_by_the_next_attempt():
    """The driver hands the fresh seeds' findings to the plan: bounds cure the trial's seeds but
    fresh seed 2 explodes; the next attempt keeps the bounds and lowers the rate, and is confirmed."""

    def outcome(hp: dict, seed: int) -> tuple[str, float]:
        if hp.get("log_std_bounds") != [-5, 2]:
            return "nan_scale", -100.0
        if hp.get("learning_rate") != 0.01 and seed == 2:
            return "exploding_updates", 50.0
        return "healthy", 10.0

    driver, study, _, _ = _driver(outcome, rp.RepairSettings(budget=16))
    driver.run()
    (plan,) = driver.plans
    first, second = plan.attempts
    assert first.confirm["verdicts"] == {2: "exploding_updates", 3: "healthy"} and not first.confirm["safe"]
    assert second.patch == {"log_std_bounds": [-5, 2], "learning_rate": 0.01} and second.source == "exploding_updates"
    assert plan.status == "repaired" and plan.repaired is second and second.confirm["safe"]
    assert [t.user_attrs.get("rlsweep.repair_attempt") for t in study.get_trials()] == [None, 1, 2]


def test_patched_knobs_off_the_space_are_params_any_later_repair_can_reuse(tmp_path):
    """Two repairs that patch the same knob to different values are both told to one study (a
    one-value categorical per knob made the study's storage refuse the second: its choices may not
    change)."""
    from sweeps.driver import _patch_param

    study = optuna.create_study(direction="maximize", storage=sole_writer_storage(f"sqlite:///{tmp_path}/o.db"))
    for patch in (
        {"learning_rate": 0.0333, "log_std_bounds": [-5, 2]},
        {"learning_rate": 0.01, "log_std_bounds": [-3, 1], "normalize": {"reward": True}},
        {"target_kl": None, "normalize_advantage": True, "max_grad_norm": 0.5},
        {"learning_rate": 0.0333, "log_std_bounds": [-5, 2], "normalize": {"reward": True}},
    ):
        params, dists = {}, {}
        for knob, value in patch.items():
            name, params[name], dists[name] = _patch_param(knob, value)
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=1.0))
    first, second, third, _ = study.get_trials()
    assert first.params == {"patch.learning_rate": 0.0333, "patch.log_std_bounds=[-5, 2]": True}
    assert second.params["patch.learning_rate"] == 0.01 and second.params['patch.normalize={"reward": true}']
    assert third.params == {
        "patch.target_kl=null": True,
        "patch.normalize_advantage=true": True,
        "patch.max_grad_norm": 0.5,
    }


def test_a_study_that_recorded_a_patched_knob_the_old_way_still_takes_the_repair(tmp_path):
    def outcome(hp: dict, seed: int) -> tuple[str, float]:
        return ("healthy", 10.0) if hp.get("max_grad_norm") == 0.5 else ("nan_scale", -100.0)

    storage = sole_writer_storage(f"sqlite:///{tmp_path}/o.db")
    driver, study, _, _ = _driver(outcome, rp.RepairSettings(budget=16), trials=2, storage=storage)  # 1st: the old
    legacy = optuna.distributions.CategoricalDistribution([0.5])
    study.add_trial(
        optuna.trial.create_trial(
            params={"patch.max_grad_norm": 0.5}, distributions={"patch.max_grad_norm": legacy}, value=0
        )
    )
    driver.run()
    (plan,) = driver.plans
    assert plan.status == "repaired" and plan.repaired.patch == {"log_std_bounds": [-5, 2], "max_grad_norm": 0.5}
    told = study.get_trials()[-1]
    assert told.user_attrs["rlsweep.repair_patch"] == plan.repaired.patch and set(told.params) == {"learning_rate"}


def test_auto_repair_never_more_than_doubles_the_sweeps_jobs():
    driver, study, backend, _ = _driver(lambda hp, seed: ("nan_scale", -100.0), trials=2)
    driver.run()
    assert len(backend.submitted) <= 2 * 2 * 2  # trials x seeds, twice
    assert {p.status for p in driver.plans} <= {"failed", "budget"} and "budget" in {p.status for p in driver.plans}


def test_a_passing_attempt_the_budget_cannot_confirm_is_told_unconfirmed():
    driver, study, backend, _ = _driver(
        lambda hp, seed: ("healthy", 1.0) if hp.get("log_std_bounds") else ("nan_scale", -100.0)
    )
    driver.run()  # 1 trial x 2 seeds: the attempt fits the budget, its confirmation does not
    (plan,) = driver.plans
    assert plan.status == "budget" and "passed on seeds [0, 1]" in plan.message
    assert (
        study.get_trials()[1].user_attrs["rlsweep.repair_of"] == 0
        and "rlsweep.confirm" not in study.get_trials()[1].user_attrs
    )


# --- end to end ---------------------------------------------------------------------------------
BROKEN = {
    "name": "a2c_broken",
    "env": {"id": "sweeps.repro_envs:make_spiky_targets", "n_envs": 1},
    "algo": "A2C",
    "total_timesteps": 6000,
    "seeds": 2,
    "trials": 1,
    "objective": {"eval_episodes": 3},
    "hyperparams": {"n_steps": 5, "learning_rate": 0.1, "max_grad_norm": "off", "log_std_bounds": [-103, 88]},
    "stability": {"stop_on": ["nan_scale"], "stop_siblings": False},
}


@pytest.mark.slow
def test_rlsweep_repair_fixes_the_a2c_nan_scale_reproduction_and_records_it(write_spec, cli, workdir):
    write_spec(BROKEN)
    ran = cli("run", "sweep.yaml", "--workers", "2")
    assert ran.returncode == 0, ran.stderr[-2000:]
    fixed = cli("repair", "a2c_broken", "--workers", "2", "--max-attempts", "3")
    assert fixed.returncode == 0, fixed.stdout[-2000:] + fixed.stderr[-2000:]
    assert "trial 0 (nan_scale, return -): repaired by" in " ".join(fixed.stdout.split()), fixed.stdout
    doc = yaml.safe_load((workdir / "results" / "a2c_broken" / "repairs.yaml").read_text())
    (item,) = doc["repairs"]
    assert item["status"] == "repaired" and item["verdict_before"] == "nan_scale" and item["verdict_after"] == "healthy"
    assert item["confirm"]["seeds"] == [2, 3] and item["confirm"]["safe"] is True
    n = item["attempts_used"]
    assert item["attempts"][0]["patch"] == {"log_std_bounds": [-5, 2]}  # the nan_scale finding's first patch
    assert item["attempts"][0]["source"] == "nan_scale"
    # a later attempt answers the trial's failure or what the attempt before it still showed, on
    # its own seeds or on the fresh ones (with the bounds, learning rate 0.1 and no clipping can
    # still make updates that move the weights by more than their own size: exploding_updates,
    # whose patch lowers the learning rate; a lower rate can leave the critic behind returns of
    # scale 500: stuck_value_loss, whose patch normalises the reward)
    for before, after in zip(item["attempts"], item["attempts"][1:], strict=False):
        shown = {before["verdict"], *(before.get("confirm") or {}).get("verdicts", {}).values()}
        assert after["source"] in {"nan_scale"} | shown, (before, after)
        if after["source"] != "nan_scale":  # an answer keeps the patch it answers
            assert all(after["patch"][k] == v for k, v in before["patch"].items()), (before, after)
    client, experiment, study = stores(workdir, "a2c_broken")
    trials = study.get_trials()
    assert trials[0].state.name == "PRUNED" and "rlsweep.repair_of" not in trials[0].user_attrs  # never rewritten
    assert [t.user_attrs["rlsweep.repair_of"] for t in trials[1:]] == [0] * n and trials[n].state.name == "COMPLETE"
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`rlsweep.repair_of` = '0'")
    names = {r.info.run_name for r in runs}
    assert {
        f"trial-0-repair-{n}",
        f"trial-0-repair-{n}-seed-0",
        f"trial-0-repair-{n}-seed-1",
        f"trial-0-repair-{n}-confirm",
        f"trial-0-repair-{n}-confirm-seed-2",
    } <= names
    attempt = next(r for r in runs if r.info.run_name == f"trial-0-repair-{n}")
    assert attempt.data.tags["rlsweep.repair_attempt"] == str(n) and attempt.info.status == "FINISHED"
    assert json.loads(attempt.data.tags["rlsweep.repair_patch"]) == item["patch"]
    original = client.search_runs([experiment.experiment_id], filter_string="attributes.run_name = 'trial-0'")[0]
    assert original.data.tags["rlsweep.repaired_by"] == attempt.info.run_id
    exported = cli("export", "a2c_broken")
    assert exported.returncode == 0 and "repair of trial 0" in " ".join(exported.stdout.split())
    doc = yaml.safe_load((workdir / "results" / "a2c_broken" / "safe_configs.yaml").read_text())
    assert doc["configs"][0]["repaired"]["from_trial"] == 0
    exported_hp = doc["configs"][0]["hyperparams"]
    for k, v in item["patch"].items():  # a mapping knob (normalize) merges into the config's mapping
        assert exported_hp[k] == v if not isinstance(v, dict) else v.items() <= exported_hp[k].items(), (k, v)
    again = cli("repair", "a2c_broken")
    assert again.returncode == 0 and "no failing trial to repair" in again.stdout


@pytest.mark.slow
def test_a_trial_knobs_cannot_repair_ends_with_its_attempts_and_a_clear_message(write_spec, cli, workdir):
    # NaN observations from the env, under a Gaussian started at log std 24: the policy's own break
    # hides the env's, so its patches are tried; the first one (a usable std) leaves only the env's
    # NaN, and the plan ends there, saying so (no learning rate, clipping or bound fixes that)
    spec = dict(
        BROKEN,
        name="nan_obs",
        algo="PPO",
        env={
            "id": "Pendulum-v1",
            "n_envs": 1,
            "wrappers": [{"entry_point": "sweeps.repro_envs:NanObservationsAfter", "kwargs": {"after": 300}}],
        },
        total_timesteps=1024,
        seeds=1,
        hyperparams={"n_steps": 256, "log_std_init": 24.0, "log_std_bounds": [-103, 88]},
    )
    write_spec(spec)
    assert cli("run", "sweep.yaml").returncode == 0
    result = cli("repair", "nan_obs", "--max-attempts", "2")
    assert result.returncode == 0, result.stderr[-2000:]
    (item,) = yaml.safe_load((workdir / "results" / "nan_obs" / "repairs.yaml").read_text())["repairs"]
    assert item["status"] == "failed" and item["attempts_used"] == 1
    assert "attempt 1 (log_std_bounds" in item["message"] and "fix the env" in item["message"]
    assert [a["verdict"] for a in item["attempts"]] == ["nan_scale"]
    assert "fix the env" in " ".join(result.stdout.split())


@pytest.mark.slow
def test_repair_refuses_unknown_trials_and_a_running_sweep(write_spec, cli, workdir):
    write_spec(dict(BROKEN, name="tiny_ok", hyperparams={"n_steps": 5}, total_timesteps=500, seeds=1, stability={}))
    assert cli("run", "sweep.yaml").returncode == 0
    unknown = cli("repair", "tiny_ok", "--trial", "7")
    assert unknown.returncode == 2 and "trial 7 does not exist" in unknown.stderr
    healthy = cli("repair", "tiny_ok", "--trial", "0")
    assert healthy.returncode == 2 and "nothing to repair" in healthy.stderr
    nothing = cli("repair", "tiny_ok")
    assert nothing.returncode == 0 and "no failing trial to repair" in nothing.stdout
    with open(workdir / "results" / "tiny_ok" / ".lock", "w") as held:  # as a running driver holds it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        busy = cli("repair", "tiny_ok")
    assert busy.returncode == 2 and "another rlsweep process is running" in busy.stderr
    assert cli("repair", "no_such_sweep").returncode == 2


def test_repair_a_handed_over_config(write_spec, cli, workdir):
    """--spec with --trial-config: the config is trained as a one-trial sweep of its own, repaired if it
    fails (here it does not), and a config file that is not a mapping is refused with exit 2."""
    write_spec(
        dict(
            BROKEN,
            name="handed",
            algo="PPO",
            env={"id": "CartPole-v1", "n_envs": 1},
            seeds=1,
            total_timesteps=256,
            hyperparams={"n_steps": 64},
            stability={},
            space={"learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-2}},
        )
    )
    (workdir / "config.yaml").write_text("hyperparams: {learning_rate: 0.0003, batch_size: 32}\n")
    done = cli("repair", "--spec", "sweep.yaml", "--trial-config", "config.yaml")
    assert done.returncode == 0, done.stderr[-2000:]
    (folder,) = (workdir / "results").glob("handed-repair-*")
    study = optuna.load_study(study_name=folder.name, storage=f"sqlite:///{folder}/optuna.db")
    (trial,) = study.get_trials()
    assert trial.user_attrs["rlsweep.outcome"] == "complete" and not (folder / "repairs.yaml").exists()
    (workdir / "list.yaml").write_text("[1, 2]\n")
    bad = cli("repair", "--spec", "sweep.yaml", "--trial-config", "list.yaml")
    assert bad.returncode == 2 and "list.yaml" in bad.stderr and "expected a mapping" in bad.stderr
    both = cli("repair", "handed", "--spec", "sweep.yaml")
    assert both.returncode == 2 and "not both" in both.stderr


def _repair_bench() -> Any:
    path = Path(__file__).resolve().parent / "bench" / "repair_bench.py"
    spec = importlib.util.spec_from_file_location("repair_bench", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_repair_benchmark_says_why_each_case_was_not_repaired() -> None:
    """The benchmark's summary splits the unrepaired cases by why (the env's own fault, healthy but
    returning less, still failing) and gives the rate over the failures a knob can reach."""
    bench = _repair_bench()

    def row(
        repaired: bool,
        labels: list[str] | None,
        fresh: list[str] | None = None,
        fix_env: bool = False,
        verdict: str = "nan_scale",
    ) -> dict[str, Any]:
        attempts = [] if labels is None else [{"labels": labels, "fresh_labels": fresh}]
        # no message: a row says why through the plan's own fields, never its wording
        return {"repaired": repaired, "fix_env": fix_env, "verdict_before": verdict, "attempts": attempts}

    rows = [
        row(True, ["healthy"] * 3),
        row(False, None, fix_env=True, verdict="degenerate_reward"),  # a reward that never varies
        row(False, None, fix_env=True),  # the env handed back non-finite values
        row(False, ["healthy"] * 3),  # attempts spent, each healthy but returning less
        row(False, ["healthy", "stuck_value_loss", "healthy"]),
        row(False, None),  # no patch left to try
        row(False, None, verdict="healthy"),  # rlsweep's verdicts called every seed healthy
        # healthy on the trial's seeds but not on every fresh one: still failing, whatever it returned
        row(False, ["healthy"] * 3, ["healthy", "entropy_collapse", "healthy"]),
    ]
    assert [bench.why_not(r) for r in rows] == [None, "env", "env", "return", "failing", "failing", "missed", "failing"]
    line = bench._why_not("findings", rows)
    assert "2 the env's own fault" in line and "1 never tried" in line and "1 labelled healthy" in line
    assert "3 still failing" in line and line.endswith("of the 6 failures a knob can reach, 1 repaired (17%)")


def test_the_repair_benchmarks_corpus_rows_carry_what_its_report_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A corpus case's row, built by the attempt loop with training faked: the first patch offered
    is tried on the trial's seeds, confirmed on fresh ones, and judged by the labels; a case whose
    env handed back NaNs is not attempted and says so. ``why_not`` reads exactly these rows."""
    bench = _repair_bench()
    tried: list[tuple[str, int]] = []

    def train(case: dict[str, Any], patch: dict[str, Any], seed: int, folder: Path) -> dict[str, Any]:
        tried.append((json.dumps(patch, sort_keys=True), seed))
        ok = patch == {"normalize": {"reward": True}}
        verdict = {"verdict": "healthy" if ok else "stuck_value_loss", "findings": []}
        return {"verdict": verdict, "error": None, "seconds": 1.0, "label": "healthy", "return": 50.0 if ok else 5.0}

    monkeypatch.setattr(bench, "_train", train)
    case = {
        "id": "fake_stuck",
        "class": "stuck_value_loss",
        "mechanism": "huge_returns",
        "algo": "A2C",
        "policy": "MlpPolicy",
        "env": {"id": "CartPole-v1", "n_envs": 1},
        "total_timesteps": 1000,
        "hyperparams": {"learning_rate": 0.001},
    }
    stuck = {
        "kind": "stuck_value_loss",
        "certain": True,
        "evidence": {},
        "patches": [{"patch": {"normalize": {"reward": True}}, "why": "returns in the thousands"}],
    }
    item = {
        "case": case,
        "labels": ["stuck_value_loss"] * 3,
        "reference": 40.0,
        "verdicts": {s: {"verdict": "stuck_value_loss", "findings": [stuck]} for s in (1, 2, 3)},
        "returns": {1: 5.0, 2: 6.0, 3: 4.0},
    }
    row = bench.repair_case((item, "findings"))
    assert row["verdict_before"] == "stuck_value_loss" and row["fix_env"] is False
    assert row["status"] == "repaired" and row["repaired"] and row["attempts_used"] == 1
    (attempt,) = row["attempts"]
    assert attempt["labels"] == ["healthy"] * 3 and attempt["fresh_labels"] == ["healthy"] * 3
    assert attempt["labels_healthy"] and row["runs"] == 6
    assert sorted(seed for _, seed in tried) == bench.SEEDS + bench.FRESH
    assert bench.why_not(row) is None

    sensor = {"kind": "nan_scale", "certain": True, "evidence": {"env_nonfinite_obs": 1}, "patches": []}
    broke = dict(
        item,
        labels=["nan_scale"] * 3,
        verdicts={s: {"verdict": "nan_scale", "findings": [sensor]} for s in (1, 2, 3)},
    )
    tried.clear()
    row = bench.repair_case((broke, "findings"))
    assert row["fix_env"] is True and row["verdict_before"] == "nan_scale" and not row["repaired"]
    assert row["attempts"] == [] and tried == [] and bench.why_not(row) == "env"
