"""CUDA MPS for local workers that share a GPU.

Without MPS, processes on one GPU take turns: the GPU runs one process's kernels at a time. RL's
small networks launch many tiny kernels, so turns, not arithmetic, bound them. On an H200, four
PPO jobs (256x256 MLP) on one GPU trained 1.49x as fast as one job without MPS and 4.52x with it,
side by side in one run (``tests/gpu/check.py``, README). So when ``jobs_per_gpu > 1``, the local
backend starts a control daemon of its own for the sweep (``backend.mps``): in the foreground, as
its child, talking through a private pipe folder that only its workers are told of
(``CUDA_MPS_PIPE_DIRECTORY``), so it neither touches nor is touched by another MPS daemon on the
machine, and it ends with the sweep.

A CUDA program that cannot reach the daemon runs as it would without MPS, so a daemon that dies
mid-sweep costs speed, never a trial.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from sweeps.backends._reaper import die_with_parent
from sweeps.trial import MPS_PIPE_VAR

CONTROL = "nvidia-cuda-mps-control"
LOG_VAR = "CUDA_MPS_LOG_DIRECTORY"


def ray_share_note(gpu: float) -> str | None:
    """What to tell a user whose Ray trials take a fraction of a GPU: Ray shares it by
    ``CUDA_VISIBLE_DEVICES`` alone, so without an MPS daemon on the nodes (which rlsweep cannot
    start there) the trials take turns on it, as local workers without MPS do."""
    if not 0 < gpu < 1:
        return None
    return (
        f"resources_per_trial.gpu {gpu:g}: Ray puts up to {int(1 // gpu)} trials on one GPU, and they take turns "
        "on it unless the nodes run CUDA MPS (nvidia-cuda-mps-control -d, started by whoever runs the node): "
        "small networks then train several times slower than they could"
    )


class MpsUnavailable(RuntimeError):
    """No MPS daemon could be started: the message says why."""


class Mps:
    """A private MPS control daemon, running until ``stop()``."""

    def __init__(self, proc: subprocess.Popen[bytes], folder: Path) -> None:
        self.proc, self.folder = proc, folder
        self.pipe, self.log = folder / "pipe", folder / "log"

    @classmethod
    def start(cls, wait: float = 10.0) -> Mps:
        """Start the daemon and wait until its control pipe is there. The folder is short and under
        the system's temp folder: the pipe is a socket, whose path Linux caps at 107 bytes."""
        binary = shutil.which(CONTROL)
        if binary is None:
            raise MpsUnavailable(f"{CONTROL} is not on PATH (it comes with NVIDIA's driver utilities)")
        folder = Path(tempfile.mkdtemp(prefix="rlsweep-mps-"))
        (folder / "pipe").mkdir()
        (folder / "log").mkdir()
        env = dict(os.environ, **{MPS_PIPE_VAR: str(folder / "pipe"), LOG_VAR: str(folder / "log")})
        proc = subprocess.Popen(
            [binary, "-f"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,  # the driver killed outright takes it along
        )
        daemon = cls(proc, folder)
        deadline = time.monotonic() + wait
        while not (daemon.pipe / "control").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                code = proc.returncode
                daemon.stop()
                why = f"exited with code {code}" if code is not None else f"made no pipe in {wait:g} s"
                raise MpsUnavailable(f"{CONTROL} -f {why}")
            time.sleep(0.05)
        return daemon

    def env(self) -> dict[str, str]:
        """What a worker needs to reach this daemon (set before CUDA starts in it)."""
        return {MPS_PIPE_VAR: str(self.pipe), LOG_VAR: str(self.log)}

    def stop(self) -> None:
        """Ask the daemon to quit (it ends its server first), then make sure; remove its folder."""
        if self.proc.poll() is None:
            binary = shutil.which(CONTROL)
            try:
                if binary is not None:
                    subprocess.run(
                        [binary], input=b"quit\n", env=dict(os.environ, **self.env()), capture_output=True, timeout=10
                    )
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=5)
        shutil.rmtree(self.folder, ignore_errors=True)
