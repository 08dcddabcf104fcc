"""The tracker's setup thread, with the MLflow store faked (pure logic; real stores are used by
the sweep tests)."""

from __future__ import annotations

import pytest

from sweeps import tracking


class _Flaky:
    """Fails like a concurrent import of MLflow ``fails`` times, then builds."""

    calls = 0

    def __init__(self, fails: int, message: str) -> None:
        type(self).calls += 1
        if type(self).calls <= fails:
            raise ImportError(message)
        self.ready = True


@pytest.fixture(autouse=True)
def _reset() -> None:
    _Flaky.calls = 0


def test_a_partially_initialised_mlflow_met_by_the_setup_thread_is_retried(monkeypatch):
    monkeypatch.setattr(
        tracking,
        "MlflowTracker",
        lambda: _Flaky(
            2,
            "cannot import name '_get_store' from "
            "partially initialized module 'mlflow.tracking' (most likely due to a circular import)",
        ),
    )
    monkeypatch.setattr(tracking.time, "sleep", lambda s: None)
    assert tracking.BackgroundTracker().ready and _Flaky.calls == 3


def test_other_import_errors_surface_at_first_use(monkeypatch):
    monkeypatch.setattr(tracking, "MlflowTracker", lambda: _Flaky(9, "No module named 'mlflow'"))
    with pytest.raises(ImportError, match="No module named"):
        _ = tracking.BackgroundTracker().ready
    assert _Flaky.calls == 1
