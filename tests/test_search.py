"""Search: every Optuna sampler by name, its options checked against its signature, and what a
sampler does with a space it cannot model. Sweeps here run the real driver and the real sampler
against a scripted backend (tests/fakes.py); training is covered by the end-to-end tests."""

from __future__ import annotations

import math
from typing import Any

import optuna
import pytest

from stability import keys
from sweeps import pruners, samplers
from sweeps import study as st
from sweeps.backends import Metrics
from sweeps.driver import Driver
from sweeps.errors import SpecError
from sweeps.spec import from_dict
from sweeps.trial import PERIODIC_RETURN, TrialConfig
from tests.fakes import Recorder, Scripted, result

SPACE = {
    "learning_rate": {"type": "loguniform", "low": 1e-5, "high": 1e-2},
    "n_epochs": {"type": "int", "low": 3, "high": 10},
    "gae_lambda": {"type": "uniform", "low": 0.8, "high": 0.99},
}
GRID = {"n_epochs": {"type": "choice", "values": [3, 5, 10]}, "gamma": {"type": "choice", "values": [0.9, 0.99]}}


def _spec(sampler: dict[str, Any], space: dict[str, Any] | None = None, trials: int = 3) -> Any:
    return from_dict(
        {
            "name": "search",
            "env": {"id": "Pendulum-v1"},
            "algo": "PPO",
            "total_timesteps": 1000,
            "seeds": 2,
            "trials": trials,
            "sampler": sampler,
            "space": space or SPACE,
        }
    )


def _return(config: TrialConfig, attempt: int) -> list:
    lr = config.hyperparams.get("learning_rate", 3e-4)
    return [result(mean_return=-abs(math.log10(lr) + 3.5) + 0.01 * config.seed)]


@pytest.mark.parametrize("kind", samplers.KINDS)
def test_every_sampler_by_name_runs_a_three_trial_sweep(kind: str):
    spec = _spec({"kind": kind, "seed": 3}, GRID if kind == "grid" else SPACE)
    study = optuna.create_study(direction="maximize", sampler=st.make_sampler(spec))
    assert type(study.sampler).__name__.endswith(samplers.CLASSES[kind])
    progress = Driver(spec, Scripted(_return), Recorder(), study).run()
    trials = study.get_trials()
    assert progress.done == 3 and [t.state.name for t in trials] == ["COMPLETE"] * 3
    names = set(GRID if kind == "grid" else SPACE)
    assert all(set(t.params) == names for t in trials)
    if kind == "grid":
        assert len({tuple(sorted(t.params.items())) for t in trials}) == 3  # no grid point twice


def test_sampler_options_reach_the_sampler():
    spec = _spec({"kind": "tpe", "multivariate": True, "group": True, "n_startup_trials": 2, "seed": 1})
    sampler = st.make_sampler(spec)
    assert sampler._multivariate and sampler._group and sampler._n_startup_trials == 2
    cma = st.make_sampler(_spec({"kind": "cmaes", "popsize": 6, "use_separable_cma": True}))
    assert cma._popsize == 6 and cma._use_separable_cma and cma._n_startup_trials == 5


@pytest.mark.parametrize(
    ("sampler", "path", "says"),
    [
        ({"kind": "tpe", "multivariat": True}, "sampler.multivariat", "did you mean 'multivariate'"),
        ({"kind": "random", "n_ei_candidates": 4}, "sampler.n_ei_candidates", "allowed: seed"),
        ({"kind": "cmaes", "independent_sampler": "random"}, "sampler.independent_sampler", "not an option"),
        ({"kind": "qmc", "qmc_type": "lattice"}, "sampler", "the qmc sampler refused"),
        ({"kind": "cmas"}, "sampler.kind", "did you mean 'cmaes'"),
    ],
)
def test_bad_sampler_settings_are_refused_with_the_key_and_what_is_allowed(sampler: dict, path: str, says: str):
    with pytest.raises(SpecError) as err:
        _spec(sampler)
    issues = {i.path: i.message for i in err.value.issues}
    assert path in issues and says in issues[path], issues


def test_a_sampler_that_cannot_model_choices_says_what_optuna_does_instead():
    space = SPACE | {"batch_size": {"type": "choice", "values": [32, 64]}}
    spec = _spec({"kind": "cmaes"}, space)
    note = samplers.fallback(spec.sampler.kind, spec.dims)
    assert note is not None and "batch_size" in note and "independent sampler" in note
    assert samplers.fallback("tpe", spec.dims) is None and samplers.fallback("cmaes", _spec({}).dims) is None


def test_the_cli_validates_sampler_options_and_names_the_fallback(write_spec, cli):
    doc = {
        "name": "cma",
        "env": {"id": "CartPole-v1"},
        "algo": "PPO",
        "total_timesteps": 512,
        "sampler": {"kind": "cmaes", "popsize": 4},
        "space": {
            "learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-2},
            "batch_size": {"type": "choice", "values": [32, 64]},
        },
    }
    write_spec(doc)
    ok = cli("validate", "sweep.yaml")
    assert ok.returncode == 0 and "independent sampler" in ok.stdout and "batch_size" in ok.stdout, ok.stdout
    write_spec(doc | {"sampler": {"kind": "cmaes", "popsiz": 4}})
    bad = cli("validate", "sweep.yaml")
    assert bad.returncode == 2 and "sampler.popsiz" in bad.stderr and "did you mean 'popsize'" in bad.stderr


@pytest.mark.parametrize(
    "rule", ["mean", "median", "min", "mean - std", "mean - 2*std", "mean-0.5*std", "mean - .5 * std"]
)
def test_objective_aggregates_that_are_accepted(rule: str):
    assert from_dict({**_base(), "objective": {"aggregate": rule}}).objective.aggregate == rule


@pytest.mark.parametrize("rule", ["max", "mean + std", "mean - std2", "mean - -1*std", "avg"])
def test_objective_aggregates_that_are_refused_say_what_is_allowed(rule: str):
    with pytest.raises(SpecError) as err:
        from_dict({**_base(), "objective": {"aggregate": rule}})
    (issue,) = err.value.issues
    assert issue.path == "objective.aggregate" and "'mean - K*std'" in issue.message and repr(rule) in issue.message


def _base() -> dict[str, Any]:
    return {"name": "agg", "env": {"id": "Pendulum-v1"}, "algo": "PPO", "total_timesteps": 1000}


# --- pruning --------------------------------------------------------------------------------------
def _periodic(good: set[int]) -> Any:
    """Seeds report a periodic return at 100, 200, 300 (high in trials ``good``), then run on
    until cancelled, unless their trial is good (then they finish)."""

    def script(config: TrialConfig, attempt: int) -> list:
        level = 100.0 if config.trial in good else 1.0
        reports = [Metrics(step, {PERIODIC_RETURN: level + config.seed}) for step in (100, 200, 300)]
        return [*reports, result(mean_return=level)] if config.trial in good else reports

    return script


def _pruned_sweep(script: Any, pruner: dict[str, Any], trials: int = 3, **extra: Any):
    spec = from_dict(
        {
            "name": "pruned",
            "env": {"id": "Pendulum-v1"},
            "algo": "PPO",
            "total_timesteps": 400,
            "seeds": 2,
            "trials": trials,
            "space": {"learning_rate": {"type": "loguniform", "low": 1e-5, "high": 1e-2}},
            "objective": {"eval_every": 100},
            "pruner": pruner,
        }
        | extra
    )
    study = optuna.create_study(
        direction="maximize", pruner=pruners.build(spec.pruner.kind, spec.pruner.options, spec.total_timesteps)
    )
    backend, tracker = Scripted(script, capacity=2), Recorder()
    return Driver(spec, backend, tracker, study).run(), study, backend, tracker


def test_a_trial_behind_the_median_is_pruned_and_its_seeds_stopped():
    progress, study, backend, tracker = _pruned_sweep(
        _periodic(good={0}), {"kind": "median", "n_startup_trials": 1, "n_warmup_steps": 150}
    )
    first, second, third = study.get_trials()
    assert first.state.name == "COMPLETE" and first.intermediate_values == {100: 100.5, 200: 100.5, 300: 100.5}
    for trial in (second, third):
        assert trial.state.name == "PRUNED" and trial.user_attrs["rlsweep.outcome"] == "pruned"
        # warm-up: step 100 was told but could not prune; step 200 (both seeds in) did
        assert trial.intermediate_values == {100: 1.5, 200: 1.5}
        assert trial.user_attrs[keys.PRUNED].startswith("pruned by the median pruner at step 200")
    assert sorted(key for keys_, _ in backend.cancelled for key in keys_) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert tracker.run("trial-1")["end"] == "KILLED" and tracker.run("trial-1")["tags"]["rlsweep.outcome"] == "pruned"
    assert tracker.run("trial-1-seed-0")["tags"]["rlsweep.cancelled"].startswith("pruned by the median pruner")
    assert progress.pruned == 2 and progress.failed == 0 and progress.done == 3


def test_without_a_pruner_periodic_returns_are_logged_and_nothing_is_pruned():
    progress, study, backend, tracker = _pruned_sweep(_periodic(good={0, 1}), {"kind": "none"}, trials=2)
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE", "COMPLETE"] and backend.cancelled == []
    assert all(t.intermediate_values == {} for t in study.get_trials())
    assert tracker.run("trial-0-seed-1")["steps"] == [100, 200, 300]


def test_a_verdict_and_a_pruning_are_both_recorded_the_verdict_first():
    def script(config: TrialConfig, attempt: int) -> list:
        if config.trial == 0:
            return [Metrics(s, {PERIODIC_RETURN: 50.0}) for s in (100, 200)] + [result(mean_return=50.0)]
        if config.seed == 0:  # behind at 200, then stopped by the pruner, but it is found dead first
            return [Metrics(s, {PERIODIC_RETURN: 0.0}) for s in (100, 200)]
        return [
            Metrics(100, {PERIODIC_RETURN: 0.0}),
            Metrics(200, {PERIODIC_RETURN: 0.0}),
            result("dead_policy_gradient", stopped_by="dead_policy_gradient"),
        ]

    _, study, _, _ = _pruned_sweep(
        script,
        {"kind": "median", "n_startup_trials": 1, "n_warmup_steps": 0},
        trials=2,
        stability={"stop_on": ["dead_policy_gradient"]},
    )
    second = study.get_trials()[1]
    assert second.state.name == "PRUNED" and second.user_attrs["rlsweep.outcome"] == "unstable"
    assert second.user_attrs["rlsweep.verdict"] == "dead_policy_gradient"
    assert second.user_attrs[keys.PRUNED].startswith("pruned by the median pruner at step 100")


@pytest.mark.parametrize(
    ("pruner", "objective", "path", "says"),
    [
        ({"kind": "median"}, {}, "objective.eval_every", "needs periodic evaluations"),
        ({"kind": "median"}, {"eval_every": 5000}, "objective.eval_every", "no evaluation before the end"),
        ({"kind": "median", "n_warmup_step": 3}, {"eval_every": 100}, "pruner.n_warmup_step", "'n_warmup_steps'"),
        ({"kind": "median", "n_warmup_steps": 1000}, {"eval_every": 100}, "pruner.n_warmup_steps", "nothing would"),
        ({"kind": "median", "n_startup_trials": 0}, {"eval_every": 100}, "pruner.n_startup_trials", "at least 1"),
        ({"kind": "percentile", "percentile": 150.0}, {"eval_every": 100}, "pruner", "refused"),
        ({"kind": "hyperband", "min_resource": 2000}, {"eval_every": 100}, "pruner.min_resource", "not below"),
        ({"kind": "none", "n_startup_trials": 3}, {}, "pruner.n_startup_trials", "takes no options"),
        ({"kind": "medain"}, {"eval_every": 100}, "pruner.kind", "did you mean 'median'"),
    ],
)
def test_bad_pruner_settings_are_refused_with_the_key_and_what_is_allowed(pruner, objective, path, says):
    with pytest.raises(SpecError) as err:
        from_dict({**_base(), "pruner": pruner, "objective": objective})
    issues = {i.path: i.message for i in err.value.issues}
    assert path in issues and says in issues[path], issues


def test_the_default_warm_up_waits_a_third_of_training_and_five_trials():
    assert pruners.settings("median", {}, 30000) == {"n_startup_trials": 5, "n_warmup_steps": 10000}
    assert pruners.settings("percentile", {"n_warmup_steps": 0, "percentile": 25.0}, 30000)["n_warmup_steps"] == 0
    assert pruners.settings("hyperband", {}, 30000) == {}


# --- warm starts ----------------------------------------------------------------------------------
def _lr_return(config: TrialConfig, attempt: int) -> list:
    return [result(mean_return=-abs(math.log10(config.hyperparams["learning_rate"]) + 3.0))]


def _run_on_disk(doc: dict[str, Any], script: Any = _lr_return) -> tuple[Any, Any]:
    """The sweep ``doc`` driven on a scripted backend, with its study and sweep.yaml on disk as
    ``rlsweep run`` leaves them (so another sweep can warm-start from it)."""
    from sweeps._yaml import dump_yaml

    spec = from_dict(doc)
    spec.storage_dir.mkdir(parents=True, exist_ok=True)
    (spec.storage_dir / "sweep.yaml").write_text(dump_yaml(spec.model_dump(mode="json", by_alias=True)))
    study = st.open_study(spec)
    warm = st.warm_start(study, spec)
    Driver(spec, Scripted(script), Recorder(), study).run()
    return study, warm


def test_a_sweep_warm_starts_from_another_ones_best_safe_configs_and_its_knowledge(workdir):
    source, _ = _run_on_disk(
        {
            **_base(),
            "name": "src",
            "trials": 6,
            "sampler": {"kind": "random", "seed": 0},
            "space": {
                "learning_rate": {"type": "loguniform", "low": 1e-5, "high": 1e-1},
                "n_epochs": {"type": "int", "low": 3, "high": 10},
                "gamma": {"type": "uniform", "low": 0.95, "high": 0.99},
            },
        }
    )
    best = sorted(source.get_trials(), key=lambda t: -t.value)[:2]
    doc = {
        **_base(),
        "name": "dst",
        "trials": 3,
        "sampler": {"kind": "tpe", "seed": 0},
        "space": {
            "learning_rate": {"type": "loguniform", "low": 1e-5, "high": 1e-1},
            # 1 - gamma sampled log-uniformly: the source's gamma values are carried over as 1 - gamma
            "gamma": {"type": "loguniform", "low": 0.005, "high": 0.1, "one_minus": True},
        },
        "warm_start": {"from": "src", "top": 2},
    }
    study, warm = _run_on_disk(doc)
    assert warm == st.WarmStart("src", enqueued=2, seen=6, dropped=["n_epochs"])
    trials = study.get_trials()
    learned = [t for t in trials if t.user_attrs.get("rlsweep.outcome") == "warm_start"]
    assert len(learned) == 6 and all(set(t.params) == {"learning_rate", "gamma"} for t in learned)
    own = [t for t in trials if t not in learned]
    assert [t.params["learning_rate"] for t in own[:2]] == [t.params["learning_rate"] for t in best]
    assert [t.params["gamma"] for t in own[:2]] == pytest.approx([1 - t.params["gamma"] for t in best])
    assert [t.user_attrs[keys.PARAMS]["gamma"] for t in own[:2]] == pytest.approx([t.params["gamma"] for t in best])
    assert own[0].user_attrs[keys.WARM_START] == f"src trial {best[0].number}"
    assert [t.number for t in st.counted(study)] == [t.number for t in own] and len(own) == 3
    assert st.warm_start(study, from_dict(doc)) is None  # a resumed sweep is not warm-started again


def test_warm_start_settings_are_checked(write_spec, cli, workdir):
    with pytest.raises(SpecError, match="warm_start: the grid sampler"):
        from_dict({**_base(), "space": GRID, "sampler": {"kind": "grid"}, "warm_start": {"from": "x"}})
    with pytest.raises(SpecError, match="warm_start.from: a sweep cannot warm-start from itself"):
        from_dict({**_base(), "warm_start": {"from": "agg"}})
    write_spec({**_base(), "space": SPACE, "warm_start": {"from": "never_ran"}})
    refused = cli("run", "sweep.yaml")
    assert refused.returncode == 2 and "no sweep named 'never_ran'" in refused.stderr
    assert not (workdir / "results" / "agg").exists()


# --- multi-objective ------------------------------------------------------------------------------
def _spread_return(config: TrialConfig, attempt: int) -> list:
    """Higher learning rates return more on average and differ more between seeds."""
    lr = config.hyperparams["learning_rate"]
    level = 10.0 * (math.log10(lr) + 5.0)
    return [result(mean_return=level + (level / 2 if config.seed else -level / 2))]


@pytest.mark.parametrize("kind", [k for k in samplers.KINDS if k not in ("cmaes", "grid")])
def test_a_two_objective_sweep_tells_both_values_with_every_sampler_that_can(kind: str):
    doc = {**_base(), "seeds": 2, "trials": 3, "space": SPACE, "sampler": {"kind": kind, "seed": 0}}
    spec = from_dict(doc | {"objective": {"directions": {"spread": "minimize", "return": "maximize"}}})
    assert spec.objective.names == ["return", "spread"] and spec.objective.maximize == [True, False]
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=st.make_sampler(spec))
    Driver(spec, Scripted(_spread_return), Recorder(), study).run()
    for trial in study.get_trials():
        level = 10.0 * (math.log10(trial.params["learning_rate"]) + 5.0)
        assert trial.values == pytest.approx([level, level / 2])


def test_a_multi_objective_sweep_exports_its_safe_pareto_front_and_draws_it(workdir):
    from sweeps import export, report
    from sweeps import results as results_module

    doc = {
        **_base(),
        "name": "pareto",
        "seeds": 2,
        "trials": 6,
        "space": {"learning_rate": {"type": "loguniform", "low": 1e-5, "high": 1e-1}},
        "sampler": {"kind": "random", "seed": 2},
        "objective": {"directions": {"return": "maximize", "spread": "minimize"}},
    }
    _run_on_disk(doc, _spread_return)
    res = results_module.load("pareto")
    path, written = export.export("pareto")
    front = written["pareto_front"]
    assert front["objectives"] == {"return": "maximize", "spread": "minimize"}
    # return and spread rise together here, so every safe config is on the front
    assert sorted(c["trial"] for c in front["configs"]) == sorted(t.number for t in res.safe())
    assert all(set(c["values"]) == {"return", "spread"} for c in front["configs"])
    assert "pareto_front" in path.read_text()
    report.pareto_plot(res, workdir / "pareto.png")
    assert (workdir / "pareto.png").stat().st_size > 5000


def test_the_pareto_front_keeps_exactly_the_undominated_points():
    from sweeps.scoring import pareto_front

    points = [(0, [10.0, 1.0]), (1, [8.0, 0.5]), (2, [7.0, 2.0]), (3, [10.0, 1.0]), (4, [12.0, 3.0])]
    assert pareto_front(points, [True, False]) == [0, 1, 3, 4]  # 2 is worse than 0 in both
    assert pareto_front(points, [True, True]) == [4]


@pytest.mark.parametrize(
    ("extra", "path", "says"),
    [
        ({"objective": {"directions": {"return": "maximize", "speed": "minimize"}}}, "objective.directions", "'speed'"),
        ({"objective": {"directions": {"spread": "minimize"}}}, "objective.directions", "has 'return'"),
        (
            {
                "objective": {"directions": {"return": "maximize", "spread": "minimize"}, "eval_every": 100},
                "pruner": {"kind": "median"},
            },
            "pruner",
            "single-objective",
        ),
        (
            {"objective": {"directions": {"return": "maximize", "spread": "minimize"}}, "sampler": {"kind": "cmaes"}},
            "sampler.kind",
            "one objective",
        ),
    ],
)
def test_bad_multi_objective_settings_are_refused(extra: dict, path: str, says: str):
    with pytest.raises(SpecError) as err:
        from_dict({**_base(), "space": SPACE} | extra)
    issues = {i.path: i.message for i in err.value.issues}
    assert path in issues and says in issues[path], issues
