"""Leave no process behind when the driver dies, even by SIGKILL.

A local Ray instance started by ``ray.init`` mostly shares the driver's fate, but not all of it:
seen here with Ray 2.60, its dashboard and runtime-env agents outlive a driver killed with
SIGKILL, re-parented to init. The :class:`Reaper` is a small watchdog process, in a session of
its own, that the driver tells about every process below it; when the driver's pipe to it
closes without a goodbye (the driver died), it kills those processes and exits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

# The watchdog's whole program: read "PID STARTTIME" lines; "done" means a clean exit; end of
# input without it means the driver died: kill every listed process that is still the same
# process (its start time unchanged, so a reused pid is never hit).
_WATCHDOG = r"""
import os, signal, sys
tracked = set()
for line in sys.stdin:
    if line.strip() == "done":
        sys.exit(0)
    pid, start = line.split()
    tracked.add((int(pid), start))
for pid, start in tracked:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        if stat[stat.rindex(")") + 2:].split()[19] == start:
            os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError, IndexError):
        pass
"""


def die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this process when its parent dies (even by SIGKILL). Called in
    the child: first thing in a worker, or as a helper's ``preexec_fn``."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def process_table() -> dict[int, tuple[int, str, str]]:
    """Every living process: pid -> (parent pid, start time in clock ticks, state)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                fields = stat[stat.rindex(")") + 2 :].split()
                table[int(entry.name)] = (int(fields[1]), fields[19], fields[0])
            except (OSError, ValueError, IndexError):
                continue
    return table


def descendants(root: int) -> dict[int, str]:
    """Processes below ``root`` (zombies left out): pid -> start time."""
    table = process_table()
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, start, state) in table.items():
            if ppid == parent and pid not in found and state != "Z":
                found[pid] = start
                frontier.append(pid)
    return found


def stop_resource_tracker() -> None:
    """End multiprocessing's resource tracker, if this process started one, and wait until it has.
    Spawning a worker starts it; left alone it ends only once this process has exited, so for a
    moment it would be an orphan of whoever ran the driver. Any later spawn starts a new one."""
    if "multiprocessing.resource_tracker" not in sys.modules:
        return
    from multiprocessing import resource_tracker

    stop = getattr(resource_tracker._resource_tracker, "_stop", None)  # private; a Python without it
    if stop is not None:  # ends the tracker at this process's exit, as it always did
        try:
            stop()
        except (OSError, ChildProcessError):
            pass


class Reaper:
    """Watches over the processes below this one; see the module docstring. Linux only: elsewhere
    it does nothing."""

    def __init__(self) -> None:
        self._sent: set[tuple[int, str]] = set()
        self._proc: subprocess.Popen | None = None
        if sys.platform.startswith("linux"):
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _WATCHDOG],
                stdin=subprocess.PIPE,
                text=True,
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

    def track(self) -> None:
        """Tell the watchdog about processes started below the driver since the last call."""
        if self._proc is None or self._proc.stdin is None:
            return
        new = {(pid, start) for pid, start in descendants(os.getpid()).items() if pid != self._proc.pid} - self._sent
        if new:
            try:
                self._proc.stdin.write("".join(f"{pid} {start}\n" for pid, start in new))
                self._proc.stdin.flush()
            except OSError:
                return
            self._sent |= new

    def close(self) -> None:
        """A clean end: the watchdog leaves everything alone and exits."""
        if self._proc is None:
            return
        stdin = self._proc.stdin  # a pipe: the watchdog was started with stdin=PIPE
        try:
            if stdin is not None:
                stdin.write("done\n")
                stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        self._proc = None
