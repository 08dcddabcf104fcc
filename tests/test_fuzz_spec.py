"""Hostile sweep files: every generated spec is either valid or refused with a SpecError, never a traceback.

Property-based (hypothesis): specs built from the real keys with wrong, odd and extreme values, random
keys, and YAML text edge cases. A few go through the CLI too: exit code 2, one message naming the file,
nothing written.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sweeps import spec as spec_module
from sweeps.errors import SpecError
from tests.helpers import subprocess_env, tiny_spec

KEYS = [
    "name",
    "env",
    "algo",
    "policy",
    "total_timesteps",
    "hyperparams",
    "space",
    "seeds",
    "trials",
    "workers",
    "sampler",
    "objective",
    "storage",
    "tracking",
    "stability",
]
HYPER = [
    "learning_rate",
    "n_steps",
    "batch_size",
    "gamma",
    "clip_range",
    "ent_coef",
    "max_grad_norm",
    "log_std_bounds",
    "weight_decay",
    "optimizer",
    "init_gains",
    "normalize",
    "reward_scale",
    "ortho_init",
    "log_std_init",
    "policy_kwargs",
    "preset",
    "env.kwargs.phase",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        [
            "3e5",
            "1e-3",
            "off",
            "lin_3e-4",
            "lin_x",
            "PPO",
            "CartPole-v1",
            "tpe",
            "grid",
            ".nan",
            "~",
            "nan_scale",
            "MlpPolicy",
            "relu",
            "adamw",
            "sweeps.temp_control:make_temp_control",
            "os:system",
            "../../etc/passwd",
            "x" * 300,
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(
                st.sampled_from(HYPER + KEYS + ["type", "low", "high", "values", "kind", "id"]), st.text(max_size=8)
            ),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=12,
)
dists = st.fixed_dictionaries(
    {"type": st.sampled_from(["uniform", "loguniform", "int", "choice", "fixed", "normal"])},
    optional={
        "low": scalars,
        "high": scalars,
        "values": st.lists(values, max_size=4),
        "value": values,
        "log": scalars,
        "step": scalars,
    },
)


@st.composite
def specs(draw: st.DrawFn) -> dict:
    """A valid spec with a few parts replaced, removed or added."""
    data = tiny_spec()
    for _ in range(draw(st.integers(0, 4))):
        action = draw(st.sampled_from(["replace", "delete", "add", "hyper", "space", "nested"]))
        if action == "replace":
            data[draw(st.sampled_from(KEYS))] = draw(values)
        elif action == "delete":
            data.pop(draw(st.sampled_from(KEYS)), None)
        elif action == "add":
            data[draw(st.text(min_size=1, max_size=12))] = draw(values)
        elif action == "hyper":
            if isinstance(data.get("hyperparams"), dict):
                data["hyperparams"][draw(st.sampled_from(HYPER))] = draw(values)
        elif action == "space":
            if isinstance(data.get("space"), dict):
                data["space"][draw(st.sampled_from(HYPER))] = draw(st.one_of(dists, values))
        else:
            section = draw(st.sampled_from(["env", "sampler", "objective", "stability", "tracking"]))
            if isinstance(data.get(section), dict):
                data[section][
                    draw(
                        st.sampled_from(
                            [
                                "id",
                                "n_envs",
                                "kwargs",
                                "kind",
                                "seed",
                                "eval_episodes",
                                "aggregate",
                                "stop_on",
                                "thresholds",
                                "wrappers",
                                "x",
                            ]
                        )
                    )
                ] = draw(values)
    return data


def _check(path: Path) -> None:
    try:
        spec_module.load(path)
    except SpecError as error:
        text = error.render()
        assert text.startswith(str(path)), text
        assert "Traceback" not in text


@settings(
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(data=specs())
def test_generated_specs_load_or_are_refused(data: dict, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "spec.yaml"
    try:
        text = yaml.safe_dump(data, allow_unicode=True)
    except yaml.YAMLError:
        return
    path.write_text(text, encoding="utf-8")
    _check(path)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    raw=st.one_of(
        st.text(max_size=300).map(lambda t: t.encode("utf-8", errors="surrogatepass")), st.binary(max_size=300)
    )
)
def test_arbitrary_bytes_are_refused_cleanly(raw: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "spec.yaml"
    path.write_bytes(raw)
    _check(path)


VALID = yaml.safe_dump(tiny_spec())
EDGE_CASES = {
    "exponent without dot": VALID.replace("total_timesteps: 512", "total_timesteps: 3e5"),
    "nan timesteps": VALID.replace("total_timesteps: 512", "total_timesteps: .nan"),
    "null algo": VALID.replace("algo: PPO", "algo: ~"),
    "duplicate keys": VALID + "algo: A2C\n",
    "tab indentation": VALID.replace("  id: CartPole-v1", "\tid: CartPole-v1"),
    "huge number": VALID.replace("total_timesteps: 512", "total_timesteps: " + "9" * 400),
    "huge float": VALID.replace("total_timesteps: 512", "total_timesteps: 1.0e+400"),
    "deep nesting": "name: deep\nhyperparams: " + "[" * 5000 + "]" * 5000 + "\n",
    "deep mapping": "name: deep\nhyperparams: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n",
    "alias bomb": "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n",
    "python object tag": "name: x\nalgo: !!python/object/apply:os.system ['true']\n",
    "control characters": VALID.replace("tiny", "ti\x07ny"),
    "key named like a pydantic union tag": VALID + "list[int]: null\n",
}


@pytest.mark.parametrize("label", sorted(EDGE_CASES))
def test_yaml_edge_cases(label: str, tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(EDGE_CASES[label], encoding="utf-8")
    _check(path)


def test_non_utf8_and_huge_files(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(SpecError, match="UTF-8"):
        spec_module.load(path)
    big = tmp_path / "big.yaml"
    with big.open("w") as handle:  # a 50 MB file
        handle.write(VALID)
        line = "# " + "x" * 1022 + "\n"
        for _ in range(50 * 1024):
            handle.write(line)
    with pytest.raises(SpecError, match="too large"):
        spec_module.load(big)


@pytest.mark.parametrize("label", ["duplicate keys", "deep nesting", "python object tag"])
def test_cli_refuses_with_exit_2_and_writes_nothing(label: str, tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(EDGE_CASES[label], encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "sweeps", "run", "spec.yaml"],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "spec.yaml" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]
