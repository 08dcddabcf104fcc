"""The local backend's CUDA MPS daemon, against a stand-in ``nvidia-cuda-mps-control`` on PATH (no GPU
here): what the backend starts, tells its workers, says, refuses and leaves behind. Whether MPS
speeds sharing up is measured on a GPU by tests/gpu/check.py."""

from __future__ import annotations

import os
import stat
import time
from itertools import count
from pathlib import Path

import pytest

from sweeps.backends._mps import Mps, MpsUnavailable, ray_share_note
from tests.backend_jobs import JOB, config, until_ended

_trials = count(1)

# -f: make the control pipe, then run until a client says quit (or FAKE_MPS_FAIL: exit at once).
# No argument: a client; it reads commands from stdin, as the real one does.
_FAKE = """#!/bin/sh
if [ "$1" = "-f" ]; then
    [ -n "$FAKE_MPS_FAIL" ] && exit 3
    echo "$$" > "$CUDA_MPS_LOG_DIRECTORY/daemon.pid"
    touch "$CUDA_MPS_PIPE_DIRECTORY/control"
    while [ ! -e "$CUDA_MPS_PIPE_DIRECTORY/quit" ]; do sleep 0.05; done
    exit 0
fi
read command
[ "$command" = "quit" ] && touch "$CUDA_MPS_PIPE_DIRECTORY/quit"
"""


@pytest.fixture
def fake_mps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-cuda-mps-control"
    script.write_text(_FAKE)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return script


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_daemon_runs_in_a_private_folder_and_quits_when_stopped(fake_mps: Path) -> None:
    daemon = Mps.start()
    pid = int((daemon.log / "daemon.pid").read_text())
    assert _alive(pid) and daemon.proc.pid == pid
    assert daemon.env() == {"CUDA_MPS_PIPE_DIRECTORY": str(daemon.pipe), "CUDA_MPS_LOG_DIRECTORY": str(daemon.log)}
    assert len(str(daemon.pipe / "control")) < 100  # a socket's path: Linux caps it at 107 bytes
    daemon.stop()
    assert daemon.proc.returncode == 0  # it quit when told, not killed
    assert not daemon.folder.exists()


def test_a_daemon_that_cannot_start_or_is_not_there_is_unavailable(
    fake_mps: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MPS_FAIL", "1")
    with pytest.raises(MpsUnavailable, match="nvidia-cuda-mps-control -f exited with code 3"):
        Mps.start()
    fake_mps.unlink()
    with pytest.raises(MpsUnavailable, match="not on PATH"):
        Mps.start()


def test_workers_sharing_a_gpu_are_told_of_the_sweeps_daemon_which_ends_with_the_backend(fake_mps: Path) -> None:
    from sweeps.backends._local import LocalBackend

    be = LocalBackend(4, job=JOB, gpus=["0", "0", "1"], mps="auto")
    try:
        daemon = be._mps
        assert daemon is not None and be.notes == ["GPU 0, 1: workers share through a CUDA MPS daemon of this sweep"]
        jobs = [config(next(_trials), updates=1) for _ in range(3)]
        for job in jobs:
            be.submit(job)
        events = until_ended(be, {j.key for j in jobs})
        assert [e.payload.cuda_mps for evs in events.values() for e in evs if e.kind == "started"] == [True] * 3
    finally:
        be.close()
    assert daemon.proc.returncode == 0 and not daemon.folder.exists()


def test_auto_goes_on_without_mps_and_says_so_on_refuses(fake_mps: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeps.backends._local import LocalBackend
    from sweeps.errors import UsageError

    monkeypatch.setenv("FAKE_MPS_FAIL", "1")
    be = LocalBackend(2, job=JOB, gpus=["0", "0"], mps="auto")
    try:
        assert be._mps is None and len(be.notes) == 1
        assert be.notes[0].startswith("GPU 0 shared without CUDA MPS (nvidia-cuda-mps-control -f exited with code 3)")
        job = config(next(_trials), updates=1)
        be.submit(job)
        started = [e for e in until_ended(be, {job.key})[job.key] if e.kind == "started"]
        assert started[0].payload.cuda_mps is False
    finally:
        be.close()
    started_at = time.monotonic()
    with pytest.raises(UsageError, match=r"backend.mps: 'on', but no CUDA MPS daemon could be started"):
        LocalBackend(2, job=JOB, gpus=["0"], mps="on")
    assert time.monotonic() - started_at < 5  # refused before any worker was spawned


def test_no_daemon_where_no_gpu_is_shared_or_mps_is_off(fake_mps: Path) -> None:
    from sweeps.backends._local import LocalBackend

    for gpus, mode in ((["0", "1"], "auto"), (["0", "0"], "off"), (None, "on")):
        be = LocalBackend(2, job=JOB, gpus=gpus, mps=mode)
        try:
            assert be._mps is None and be.notes == [], (gpus, mode)
        finally:
            be.close()
    be = LocalBackend(1, job=JOB, gpus=["0", "0"], mps="auto")  # one worker: nothing shares GPU 0
    try:
        assert be._mps is None
    finally:
        be.close()


def test_ray_trials_sharing_a_gpu_are_told_that_mps_is_the_nodes_to_start() -> None:
    note = ray_share_note(0.25)
    assert note is not None and "up to 4 trials on one GPU" in note and "nvidia-cuda-mps-control -d" in note
    assert ray_share_note(1.0) is None and ray_share_note(0.0) is None and ray_share_note(2.0) is None
