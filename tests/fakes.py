"""Fakes for unit tests of the driver's logic: a backend that runs nothing and a tracker that
writes to dicts. The real backends are held to the same contract by test_backend_contract.py, and
the real stores are exercised by the end-to-end tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sweeps.backends import Backend, Cancelled, Event, Failure, Metrics, Started
from sweeps.backends._base import WORKER_DIED, Payload
from sweeps.trial import TrialConfig, TrialResult

# What a scripted job does: the payloads it reports after starting. Ending without a terminal
# one (a result, a failure) leaves it running until it is cancelled.
Script = Callable[[TrialConfig, int], list[Payload]]

PATCHES = {
    "nan_scale": [{"log_std_bounds": [-5, 2]}, {"max_grad_norm": 0.5}],
    "exploding_updates": [{"learning_rate": 0.01}],
}


def result(
    verdict: str = "healthy", mean_return: float = 1.0, stopped_by: str | None = None, onset: int = 10
) -> TrialResult:
    """A finished seed as a training reports it, with a finding (and its patches) when it failed."""
    finding = {
        "kind": verdict,
        "certain": True,
        "onset_step": onset,
        "summary": "",
        "evidence": {},
        "advice": [],
        "causes": [],
        "patches": [{"patch": p, "why": "w"} for p in PATCHES.get(verdict, [])],
    }
    return TrialResult(
        mean_return=float("nan") if stopped_by else mean_return,
        std_return=0.0,
        episode_returns=[],
        timesteps=1000,
        train_seconds=0.1,
        eval_seconds=0.1,
        verdict={
            "verdict": verdict,
            "onset_step": None if verdict == "healthy" else onset,
            "findings": [] if verdict == "healthy" else [finding],
        },
        stopped_by=stopped_by,
    )


def died(message: str = "worker process local-1 died (exit code -9, signal 9)") -> Failure:
    return Failure(WORKER_DIED, message)


class Scripted(Backend):
    """Runs nothing. ``script(config, attempt)`` (attempt 1 for a job's first submission, 2 for its
    retry, ...) gives the payloads each submitted job reports, which the next ``poll`` returns
    after a ``Started``. ``interrupt_after``: the poll that raises KeyboardInterrupt (Ctrl-C)."""

    name = "scripted"

    def __init__(self, script: Script, capacity: int = 2, interrupt_after: int | None = None) -> None:
        self.script, self.capacity, self.interrupt_after = script, capacity, interrupt_after
        self.submitted: list[TrialConfig] = []
        self.cancelled: list[tuple[list[tuple[int, int]], str]] = []
        self.running: set[tuple[int, int]] = set()
        self.events: list[Event] = []
        self.polls = 0
        self.closed = 0

    @classmethod
    def outcomes(cls, outcome: Callable[[dict[str, Any], int], tuple[str, float]], capacity: int = 2) -> Scripted:
        """Each job finishes at once with ``outcome(hyperparams, seed) = (verdict, return)``."""
        return cls(lambda config, attempt: [result(*outcome(config.hyperparams, config.seed))], capacity)

    def submit(self, config: TrialConfig) -> None:
        if len(self.running) >= self.capacity:
            raise RuntimeError("submitted beyond capacity")
        self.submitted.append(config)
        attempt = sum(c.key == config.key for c in self.submitted)
        payloads = self.script(config, attempt)
        self.events += [Event(config.key, Started("scripted"))] + [Event(config.key, p) for p in payloads]
        if not any(isinstance(p, (TrialResult, Failure, Cancelled)) for p in payloads):
            self.running.add(config.key)

    def cancel(self, keys: list[tuple[int, int]], reason: str) -> None:
        self.cancelled.append((list(keys), reason))
        for key in keys:
            if key in self.running:
                self.running.discard(key)
                self.events.append(Event(key, Cancelled(reason)))

    def poll(self, timeout: float) -> list[Event]:
        self.polls += 1
        if self.interrupt_after is not None and self.polls >= self.interrupt_after:
            raise KeyboardInterrupt
        out, self.events = self.events, []
        return out

    def close(self) -> None:
        self.closed += 1


def metrics(*steps: int) -> list[Payload]:
    return [Metrics(s, {"train/value_loss": float(s)}) for s in steps]


class Recorder:
    """The tracker's interface, writing to dicts: runs by id, and the metrics each was sent."""

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}

    def start_trial(self, trial, params, resolved, name=None, tags=None, key=None) -> str:
        run = f"run{len(self.runs)}"
        self.runs[run] = {"name": name or f"trial-{trial}", "tags": dict(tags or {}), "end": None, "steps": []}
        return run

    def start_seed(self, trial, seed, parent, params, name=None, tags=None, key=None) -> str:
        return self.start_trial(trial, params, {}, name or f"trial-{trial}-seed-{seed}", tags)

    def end_run(self, run_id, status, metrics=None, tags=None, texts=None, files=None) -> None:
        self.runs[run_id]["end"] = status
        self.runs[run_id]["tags"] |= tags or {}

    def set_tags(self, run_id, tags) -> None:
        self.runs[run_id]["tags"] |= tags

    def find_trial_run(self, trial) -> str | None:
        return next((r for r, d in self.runs.items() if d["name"] == f"trial-{trial}"), None)

    def run(self, name: str) -> dict[str, Any]:
        return next(d for d in self.runs.values() if d["name"] == name)

    def reconcile(self, outcomes) -> int:
        return 0

    def trial_runs(self) -> dict[int, tuple[str | None, set[int]]]:
        found: dict[int, tuple[str | None, set[int]]] = {}
        for run, d in self.runs.items():  # named trial-N or trial-N-seed-S
            parts = d["name"].split("-")
            if parts[0] != "trial" or not parts[1].isdigit():
                continue
            parent, seeds = found.get(int(parts[1]), (None, set()))
            found[int(parts[1])] = (run, seeds) if len(parts) == 2 else (parent, seeds | {int(parts[3])})
        return found

    def log_metrics(self, run_id, step, values) -> None:
        self.runs[run_id]["steps"].append(step)

    def flush(self) -> None:
        pass

    flush_if_due = flush
