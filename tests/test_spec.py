"""The sweep spec: good specs load, bad ones are refused with the key path, exit 2, nothing written."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml

from sweeps import spec as spec_module
from sweeps.errors import SpecError
from tests.helpers import tiny_spec


def _with(path: str, value, base: dict | None = None) -> dict:
    """``tiny_spec()`` with the value at dotted ``path`` replaced (``...=DELETE`` removes it)."""
    data = copy.deepcopy(base or tiny_spec())
    *parents, leaf = path.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    if value is DELETE:
        node.pop(leaf, None)
    else:
        node[leaf] = value
    return data


DELETE = object()

GOOD = [
    ("tiny", tiny_spec()),
    (
        "grid over choices and int",
        tiny_spec(
            sampler={"kind": "grid"},
            trials=None,
            space={
                "stats_window_size": {"type": "int", "low": 1, "high": 3},
                "gamma": {"type": "choice", "values": [0.9, 0.99]},
            },
        ),
    ),
    (
        "nested and dotted keys",
        tiny_spec(
            space={
                "policy_kwargs": {"net_arch": {"type": "choice", "values": [[8], [16, 16]]}},
                "policy_kwargs.activation_fn": {"type": "choice", "values": ["tanh", "relu"]},
            },
            hyperparams={"n_steps": 64, "batch_size": 64},
        ),
    ),
    ("fixed values in space", tiny_spec(space={"gamma": 0.95, "ent_coef": {"type": "fixed", "value": 0.01}})),
    ("explicit seeds", tiny_spec(seeds=[3, 7, 11])),
    (
        "presets of whole configs",
        tiny_spec(
            sampler={"kind": "grid"},
            trials=None,
            space={
                "preset": {
                    "type": "choice",
                    "values": [
                        {"learning_rate": 1e-3, "policy_kwargs": {"net_arch": [8]}},
                        {"learning_rate": "lin_3e-4", "max_grad_norm": "off", "clip_range": "lin_0.2"},
                    ],
                }
            },
        ),
    ),
    ("stability section", tiny_spec(stability={"stop_on": ["nan_scale", "dead_policy_gradient"]})),
    ("override keys", tiny_spec(stability={"override_keys": ["safety_stop", "intervened"]})),
    ("A2C", tiny_spec(algo="A2C", hyperparams={"n_steps": 8})),
    ("RecurrentPPO", tiny_spec(algo="RecurrentPPO", policy="MlpLstmPolicy")),
    (
        "entry point env with kwargs",
        tiny_spec(env={"id": "tests.helpers:faulty_cartpole", "kwargs": {"fail_at_step": None}}),
    ),
    (
        "wrappers",
        tiny_spec(
            env={
                "id": "CartPole-v1",
                "wrappers": [
                    "gymnasium.wrappers:RecordEpisodeStatistics",
                    {"entry_point": "gymnasium.wrappers:TimeLimit", "kwargs": {"max_episode_steps": 100}},
                ],
            }
        ),
    ),
    (
        "env kwargs swept",
        tiny_spec(
            env={"id": "tests.helpers:faulty_cartpole"},
            space={"env.kwargs.fail_at_step": {"type": "choice", "values": [None, 50]}},
        ),
    ),
    (
        "int with step and log int",
        tiny_spec(
            hyperparams={"batch_size": 64, "policy_kwargs": {"net_arch": [8]}},
            space={
                "n_steps": {"type": "int", "low": 32, "high": 128, "step": 32},
                "n_epochs": {"type": "int", "low": 1, "high": 8, "log": True},
            },
        ),
    ),
    ("empty space", tiny_spec(space={})),
]


@pytest.mark.parametrize("label,data", GOOD, ids=[g[0] for g in GOOD])
def test_good_specs_load(label: str, data: dict, write_spec) -> None:
    spec = spec_module.load(write_spec(data))
    assert spec.name == data["name"]
    assert spec.n_trials >= 1
    assert len(spec.seed_list) >= 1


def test_yaml_exponent_without_dot_is_a_number(write_spec) -> None:
    text = yaml.safe_dump(tiny_spec()).replace("total_timesteps: 512", "total_timesteps: 3e5")
    assert "3e5" in text
    spec = spec_module.load(write_spec(text))
    assert spec.total_timesteps == 300000


def test_grid_trials_default_to_grid_size(write_spec) -> None:
    data = tiny_spec(
        sampler={"kind": "grid"},
        space={
            "stats_window_size": {"type": "int", "low": 1, "high": 3},
            "gamma": {"type": "choice", "values": [0.9, 0.99]},
        },
    )
    del data["trials"]
    assert spec_module.load(write_spec(data)).n_trials == 6


def test_defaults_resolve_under_results(write_spec, workdir: Path) -> None:
    spec = spec_module.load(write_spec(tiny_spec()))
    assert spec.storage_dir == Path("results/tiny")
    assert spec.mlflow_uri == f"sqlite:///{workdir / 'results' / 'mlflow.db'}"
    assert spec.resolved()["seeds"] == [0, 1]


# (label, spec data or raw text, key path the error must name, words the message must contain)
BAD = [
    ("unknown top key", _with("sampler_kind", "tpe"), "sampler_kind", "did you mean"),
    ("unknown sampler kind", _with("sampler.kind", "tpee"), "sampler.kind", "did you mean 'tpe'"),
    ("unknown nested key", _with("objective.episodes", 3), "objective.episodes", "allowed"),
    ("missing algo", _with("algo", DELETE), "algo", "required"),
    ("missing env", _with("env", DELETE), "env", "required"),
    ("unknown algo", _with("algo", "PPO2"), "algo", "did you mean 'PPO'"),
    ("wrong type timesteps", _with("total_timesteps", "lots"), "total_timesteps", "integer"),
    ("negative timesteps", _with("total_timesteps", -5), "total_timesteps", "greater than 0"),
    ("fractional timesteps", _with("total_timesteps", 1000.5), "total_timesteps", "integer"),
    ("zero n_envs", _with("env.n_envs", 0), "env.n_envs", "greater than 0"),
    ("unknown env id", _with("env.id", "CartPol-v1"), "env.id", "'CartPole-v1'"),
    ("unimportable entry point", _with("env.id", "no_such_module:make"), "env.id", "cannot import"),
    ("missing callable", _with("env.id", "tests.helpers:nothing_here"), "env.id", "no attribute"),
    ("bad wrapper", _with("env.wrappers", ["gymnasium.wrappers:NoSuchWrapper"]), "env.wrappers.0", "no attribute"),
    (
        "inverted range",
        _with("space.learning_rate", {"type": "uniform", "low": 0.1, "high": 0.01}),
        "space.learning_rate",
        "low < high",
    ),
    (
        "empty range",
        _with("space.learning_rate", {"type": "uniform", "low": 0.1, "high": 0.1}),
        "space.learning_rate",
        "low < high",
    ),
    (
        "non-positive log range",
        _with("space.learning_rate", {"type": "loguniform", "low": 0, "high": 0.1}),
        "space.learning_rate.low",
        "low > 0",
    ),
    (
        "unknown distribution",
        _with("space.learning_rate", {"type": "lognormal", "low": 1, "high": 2}),
        "space.learning_rate.type",
        "not one of",
    ),
    (
        "range bound as text",
        _with("space.learning_rate", {"type": "uniform", "low": "small", "high": 1}),
        "space.learning_rate.low",
        "finite number",
    ),
    ("empty choice", _with("space.gamma", {"type": "choice", "values": []}), "space.gamma.values", "non-empty"),
    (
        "one_minus not a flag",
        _with("space.gamma", {"type": "loguniform", "low": 1e-4, "high": 0.03, "one_minus": "yes"}),
        "space.gamma.one_minus",
        "true or false",
    ),
    (
        "one_minus on a choice",
        _with("space.gamma", {"type": "choice", "values": [0.9], "one_minus": True}),
        "space.gamma.one_minus",
        "unknown key",
    ),
    (
        "duplicate choices",
        _with("space.gamma", {"type": "choice", "values": [0.9, 0.9]}),
        "space.gamma.values",
        "distinct",
    ),
    (
        "int with float bound",
        _with("space.stats_window_size", {"type": "int", "low": 1.5, "high": 4}),
        "space.stats_window_size.low",
        "integer",
    ),
    (
        "int step does not divide",
        _with("space.stats_window_size", {"type": "int", "low": 1, "high": 4, "step": 2}),
        "space.stats_window_size.step",
        "multiple",
    ),
    (
        "unknown key in distribution",
        _with("space.learning_rate", {"type": "uniform", "low": 0.1, "high": 1, "lwo": 3}),
        "space.learning_rate.lwo",
        "allowed",
    ),
    (
        "unknown hyperparameter",
        _with("hyperparams.learnin_rate", 0.1),
        "hyperparams.learnin_rate",
        "did you mean 'learning_rate'",
    ),
    (
        "unknown swept hyperparameter",
        _with("space.gama", {"type": "choice", "values": [0.9]}),
        "space.gama",
        "did you mean 'gamma'",
    ),
    ("managed hyperparameter", _with("hyperparams.seed", 3), "hyperparams.seed", "seeds"),
    ("set twice", _with("hyperparams.learning_rate", 0.001), "space.learning_rate", "one place"),
    ("unknown policy", _with("policy", "MLPPolicy"), "policy", "did you mean 'MlpPolicy'"),
    ("grid with continuous dim", _with("sampler.kind", "grid"), "space.learning_rate", "grid sampler"),
    (
        "grid trials beyond size",
        _with("sampler.kind", "grid", _with("space", {"gamma": {"type": "choice", "values": [0.9, 0.99]}})),
        "trials",
        "at most 2",
    ),
    (
        "bad activation",
        _with("hyperparams.policy_kwargs.activation_fn", "sigmoidish"),
        "hyperparams.policy_kwargs.activation_fn",
        "not one of",
    ),
    ("seeds duplicated", _with("seeds", [1, 1]), "seeds", "distinct"),
    ("bad name", _with("name", "../escape"), "name", "letters"),
    ("space not a mapping", _with("space", [1, 2]), "space", "valid dictionary"),
    (
        "sweeping other env keys",
        _with("space.env.n_envs", {"type": "choice", "values": [1, 2]}),
        "space.env",
        "env.kwargs",
    ),
    (
        "preset not a choice of mappings",
        _with("space", {"preset": {"type": "choice", "values": [1, 2]}}),
        "space.preset",
        "mappings of hyperparameters",
    ),
    (
        "unknown key in a preset",
        _with("space", {"preset": {"type": "choice", "values": [{"gama": 0.9}]}}),
        "space.preset.values.0.gama",
        "did you mean 'gamma'",
    ),
    (
        "bad knob in a preset",
        _with("space", {"preset": {"type": "choice", "values": [{"max_grad_norm": -1}]}}),
        "space.preset.values.0.max_grad_norm",
        "norm > 0",
    ),
    (
        "unknown stop_on class",
        _with("stability.stop_on", ["nan_scal"]),
        "stability.stop_on.0",
        "did you mean 'nan_scale'",
    ),
    ("bad clip_range schedule", _with("hyperparams.clip_range", "cos_0.2"), "hyperparams.clip_range", "lin_X"),
    ("reference return true", _with("stability.reference_return", True), "stability.reference_return", "a number"),
    ("reference return nan", _with("stability.reference_return", math.nan), "stability.reference_return", "finite"),
    ("time budget unit", _with("time_budget", "2 weeks"), "time_budget", "units s, m, h, d"),
    ("time budget zero", _with("time_budget", 0), "time_budget", "positive"),
    ("time budget list", _with("time_budget", [1]), "time_budget", "'90m'"),
    ("top level is a list", "- 1\n- 2\n", "<top level>", "mapping"),
    ("empty file", "", "<top level>", "empty"),
    ("yaml syntax", "name: [unclosed\n", "<top level>", "line"),
    ("duplicate key", "name: a\nname: b\n", "<top level>", "duplicate key 'name'"),
]


@pytest.mark.parametrize("label,data,path,words", BAD, ids=[b[0] for b in BAD])
def test_bad_specs_name_the_key_path(label, data, path, words, write_spec) -> None:
    file = write_spec(data)
    with pytest.raises(SpecError) as info:
        spec_module.load(file)
    text = info.value.render()
    assert text.startswith(str(file)), text
    assert f"  {path}:" in text, text
    assert words in text, text


def test_all_errors_reported_at_once(write_spec) -> None:
    data = _with("sampler.kind", "tpee", _with("total_timesteps", "x", _with("algo", "PPO")))
    data["objective"]["eval_episodes"] = 0
    with pytest.raises(SpecError) as info:
        spec_module.load(write_spec(data))
    paths = {issue.path for issue in info.value.issues}
    assert {"sampler.kind", "total_timesteps", "objective.eval_episodes"} <= paths


def test_non_utf8_file(workdir: Path) -> None:
    path = workdir / "bad.yaml"
    path.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(SpecError, match="UTF-8"):
        spec_module.load(path)


@pytest.mark.parametrize("command", ["validate", "run"])
def test_cli_refuses_bad_spec_with_exit_2_and_writes_nothing(command, cli, write_spec, workdir: Path) -> None:
    file = write_spec(_with("sampler.kind", "tpee"))
    before = sorted(p.name for p in workdir.iterdir())
    result = cli(command, str(file))
    assert result.returncode == 2, result.stderr
    said = "sampler.kind: 'tpee' is not one of tpe, random, grid, cmaes, gp, qmc, nsgaii; did you mean 'tpe'?"
    assert said in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in workdir.iterdir()) == before


def test_cli_validate_ok(cli, write_spec) -> None:
    result = cli("validate", str(write_spec(tiny_spec())))
    assert result.returncode == 0, result.stderr
    assert "ok (PPO on CartPole-v1, 3 trials x 2 seeds" in result.stdout


def test_imported_packages_are_this_projects() -> None:
    import stability
    import sweeps

    assert getattr(sweeps, "RLSWEEP", False) and getattr(stability, "RLSWEEP", False)
    root = Path(__file__).resolve().parents[1]
    assert Path(sweeps.__file__).resolve().parent == root / "sweeps"
    assert Path(stability.__file__).resolve().parent == root / "stability"


def test_every_shipped_sweep_validates() -> None:
    shipped = sorted((Path(__file__).resolve().parents[1] / "conf" / "sweeps").glob("*.yaml"))
    assert len(shipped) >= 10
    for path in shipped:
        spec = spec_module.load(path)
        assert spec.name == path.stem, path


def test_the_ray_backend_without_ray_installed_says_how_to_get_it(monkeypatch):
    import importlib.util

    from sweeps import spec as spec_module
    from sweeps.errors import SpecError
    from tests.helpers import tiny_spec

    real = importlib.util.find_spec

    def without_ray(name: str, *args):
        return None if name.startswith("ray") else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_ray)
    with pytest.raises(SpecError) as err:
        spec_module.from_dict(tiny_spec(backend={"kind": "ray"}))
    assert "pip install 'rlsweep[ray]'" in str(err.value) and "backend.kind" in str(err.value)
    spec_module.from_dict(tiny_spec(backend={"kind": "local"}))  # the local backend needs no Ray


@pytest.mark.parametrize(
    ("backend", "path", "says"),
    [
        ({"gpus": [0, 0]}, "backend.gpus", "each GPU once"),
        ({"gpus": []}, "backend.gpus", "empty list"),
        ({"jobs_per_gpu": 4}, "backend.jobs_per_gpu", "applies with backend.gpus"),
        ({"gpus": [0], "device": "cpu"}, "backend.device", "sit idle"),
        ({"gpus": [-1]}, "backend.gpus.0", "greater than or equal to 0"),
        ({"kind": "ray", "gpus": [0]}, "backend.gpus", "kind 'local' only"),
        ({"kind": "ray", "mps": "off"}, "backend.mps", "kind 'local' only"),
        ({"mps": "on"}, "backend.mps", "applies with backend.gpus"),
        ({"gpus": [0], "mps": "sometimes"}, "backend.mps", "not one of auto, on, off"),
    ],
)
def test_local_gpu_sharing_settings_are_checked(backend, path, says):
    from sweeps.errors import SpecError

    doc = {"name": "g", "env": {"id": "CartPole-v1"}, "algo": "PPO", "total_timesteps": 100, "backend": backend}
    with pytest.raises(SpecError) as err:
        spec_module.from_dict(doc)
    issues = {i.path: i.message for i in err.value.issues}
    assert path in issues and says in issues[path], issues


def test_a_missing_gpu_is_refused_with_exit_2_and_nothing_written(write_spec, cli, workdir):
    write_spec(
        {"name": "g", "env": {"id": "CartPole-v1"}, "algo": "PPO", "total_timesteps": 100, "backend": {"gpus": [7]}}
    )
    result = cli("run", "sweep.yaml")
    assert result.returncode == 2 and "backend.gpus: GPU 7 is not there" in result.stderr, result.stderr
    assert not (workdir / "results").exists()


@pytest.mark.parametrize(
    ("given", "seconds"), [(45, 45.0), ("45", 45.0), ("90m", 5400.0), ("1.5h", 5400.0), ("1d", 86400.0)]
)
def test_a_time_budget_is_read_as_seconds(given, seconds):
    doc = {"name": "t", "env": {"id": "CartPole-v1"}, "algo": "PPO", "total_timesteps": 100, "time_budget": given}
    spec = spec_module.from_dict(doc)
    assert spec.time_budget == seconds and spec.resolved()["time_budget"] == seconds


def test_one_minus_samples_the_distance_from_one():
    from sweeps import knobs
    from sweeps import space as sp

    dims, issues = sp.parse_space({"gamma": {"type": "loguniform", "low": 1e-4, "high": 0.03, "one_minus": True}})
    (dist,) = sp.to_optuna(dims).values()
    assert not issues and (dist.low, dist.high, dist.log) == (1e-4, 0.03, True)  # Optuna models 1 - gamma
    assert sp.decode(dims, {"gamma": 0.01}) == {"gamma": pytest.approx(0.99)}
    assert sp.encode(dims, {"gamma": 0.99, "not_sampled": 1}) == {"gamma": pytest.approx(0.01)}
    assert knobs.candidates(dims["gamma"]) == pytest.approx([0.9999, 0.97])  # what validation checks


def test_a_local_store_url_names_its_file_from_any_cwd_and_nothing_else_is_a_file(tmp_path, monkeypatch):
    from sweeps.spec import optuna_url, sqlite_file, sqlite_url

    monkeypatch.chdir(tmp_path)
    url = sqlite_url(Path("results") / "mlflow.db")
    assert url == f"sqlite:///{tmp_path.resolve() / 'results' / 'mlflow.db'}"
    assert sqlite_file(url) == tmp_path.resolve() / "results" / "mlflow.db"
    assert sqlite_file(optuna_url(tmp_path / "s")) == tmp_path.resolve() / "s" / "optuna.db"
    assert sqlite_file("sqlite:///rel.db") == Path("rel.db")  # as MLflow and SQLAlchemy read it
    for other in ("http://127.0.0.1:5000", "postgresql://u@h/db", "file:///tmp/mlruns"):
        assert sqlite_file(other) is None
