"""The algorithm registry reads constructor arguments from source; they must match the real classes."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from sweeps import algos


@pytest.mark.parametrize("name", algos.names())
def test_source_reading_matches_the_imported_class(name: str) -> None:
    cls = algos.load_class(name)
    sig = inspect.signature(cls.__init__)
    real = tuple(
        p
        for p in sig.parameters
        if p not in ("self", *algos.MANAGED) and sig.parameters[p].kind is not inspect.Parameter.VAR_KEYWORD
    )
    assert algos.constructor_params(name) == real
    assert algos.policy_names(name) == tuple(cls.policy_aliases)


def test_validating_a_spec_imports_no_torch_or_mlflow() -> None:
    code = (
        "import sys; from sweeps import spec; spec.load('conf/sweeps/quickstart.yaml'); "
        "print(sorted(m for m in ('torch', 'mlflow', 'stable_baselines3', 'optuna') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1]),
    )
    assert out.stdout.strip() == "[]"


def test_activation_names_resolve_to_torch_modules() -> None:
    import torch.nn as nn

    kwargs = algos.resolve_kwargs({"policy_kwargs": {"activation_fn": "relu", "net_arch": [8]}})
    assert kwargs["policy_kwargs"]["activation_fn"] is nn.ReLU
