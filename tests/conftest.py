from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import subprocess_env


@pytest.fixture(autouse=True, scope="session")
def _sb3_default_logs_in_the_session_tmpdir(tmp_path_factory: pytest.TempPathFactory):
    """SB3's learn() without a logger of its own makes an empty ``SB3-<time>`` folder in the
    system's temp dir on every call; the suite's go to its own temp dir instead (subprocesses
    inherit it), so a test run leaves nothing behind."""
    patch = pytest.MonkeyPatch()
    patch.setenv("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3_default_logs")))
    yield
    patch.undo()


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory, so results/ is created inside the test's tmp folder."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def write_spec(workdir: Path):
    def write(data: dict | str, name: str = "sweep.yaml") -> Path:
        path = workdir / name
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
        return path

    return write


@pytest.fixture
def cli(workdir: Path):
    """Run ``rlsweep ARGS`` as a real subprocess in ``workdir``."""

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "sweeps", *args],
            cwd=workdir,
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
