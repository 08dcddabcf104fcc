"""Findings, verdicts, and :func:`classify`, which runs every detector over a history."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from stability.signals import History
from stability.thresholds import Thresholds

# When several failures are certain, the verdict names the one that explains the others:
# non-finite numbers end everything; exploding updates cause most of what follows them; a
# reward with no signal makes a dead gradient and a stuck critic unavoidable.
PRIORITY = (
    "nan_scale",
    "exploding_updates",
    "degenerate_reward",
    "dead_policy_gradient",
    "stuck_value_loss",
    "entropy_collapse",
)


@dataclass(frozen=True)
class Finding:
    """One detector's conclusion: what, from when, on which numbers, and what to change.

    ``certain`` is False for a warning: the signals are heading towards the failure but have
    not reached it (e.g. log_std climbing towards float32's exp() limit).
    """

    kind: str
    onset_step: int
    summary: str
    evidence: dict[str, Any]
    advice: list[str]
    causes: list[str] = field(default_factory=list)
    certain: bool = True
    # Machine-readable fixes, computed from the run's own config: each {"patch": {knob: value}, "why": text}.
    patches: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return _finite(asdict(self))


@dataclass(frozen=True)
class Verdict:
    verdict: str
    onset_step: int | None
    findings: list[Finding]
    updates: int
    last_step: int
    notes: list[str] = field(default_factory=list)  # what limited the judgement (e.g. a short run)

    @classmethod
    def empty(cls) -> Verdict:
        return cls("healthy", None, [], 0, 0)

    @property
    def certain(self) -> bool:
        return self.verdict != "healthy"

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if not f.certain]

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "onset_step": self.onset_step,
            "updates": self.updates,
            "last_step": self.last_step,
            "notes": list(self.notes),
            "findings": [f.to_dict() for f in self.findings],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        findings = [Finding(**f) for f in data.get("findings", [])]
        return cls(
            data["verdict"],
            data.get("onset_step"),
            findings,
            int(data.get("updates", 0)),
            int(data.get("last_step", 0)),
            list(data.get("notes", [])),
        )

    def render(self) -> str:
        """A few readable lines: the verdict, then per finding the evidence and the advice."""
        head = f"verdict: {self.verdict}"
        if self.onset_step is not None:
            head += f" (onset at step {self.onset_step})"
        lines = [head + f" — {self.updates} updates checked, last step {self.last_step}"]
        if not self.findings:
            lines.append("  no detector fired")
        for f in self.findings:
            label = f.kind if f.certain else f"warning: {f.kind}"
            lines.append(f"  {label} from step {f.onset_step}: {f.summary}")
            for key, value in f.evidence.items():
                lines.append(f"    {key} = {_fmt(value)}")
            for cause in f.causes:
                lines.append(f"    likely cause: {cause}")
            for advice in f.advice:
                lines.append(f"    try: {advice}")
        for note in self.notes:
            lines.append(f"  note: {note}")
        return "\n".join(lines)


def classify(history: History, thresholds: Thresholds | None = None, final: bool = False) -> Verdict:
    """Run every detector; the verdict is the highest-priority certain finding, else healthy.

    ``final`` says the run has ended (detectors that judge a whole run may then decide).
    """
    from stability.detectors import DETECTORS

    thresholds = thresholds or Thresholds()
    findings: list[Finding] = []
    for detector in DETECTORS:
        if not thresholds.enabled(detector.name):
            continue
        finding = detector.detect(history, thresholds.of(detector.name), final)
        if finding is not None:
            findings.append(finding)
    notes = []
    if len(history) < SHORT_RUN:
        notes.append(
            f"short run: {len(history)} updates (detectors are sure from {SHORT_RUN}); judged on what "
            "there is, with smaller windows"
        )
    return _verdict(findings, history, notes)


SHORT_RUN = 20  # updates below which a run is judged with what it has, and the verdict says so


def checkpoints(n: int) -> list[int]:
    """Update counts at which a run is judged while it trains: every update up to 20, then every
    5% of the updates so far. The callback and :func:`judge` use the same schedule, so a run's
    verdict does not depend on whether it was watched live or read from its log afterwards."""
    out, k = [], 1
    while k <= n:
        out.append(k)
        k += max(1, k // 20)
    return out


class Judge:
    """The verdict of a run as it grows: a finding that was certain at any check stays in the
    verdict (a learning rate that decays later, or a signal that drifts back over a limit, does not
    excuse it); the verdict is the highest-priority certain finding, causes before consequences."""

    def __init__(self, thresholds: Thresholds | None = None) -> None:
        self.thresholds = thresholds or Thresholds()
        self.kept: dict[str, Finding] = {}

    def check(self, history: History, final: bool = False) -> Verdict:
        now = classify(history, self.thresholds, final)
        for finding in now.findings:
            if finding.certain:
                self.kept.setdefault(finding.kind, finding)
        current = {f.kind: f for f in now.findings}
        findings = [self.kept[k] if k in self.kept else f for k, f in current.items()]
        findings += [f for k, f in self.kept.items() if k not in current]
        return _verdict(findings, history, list(now.notes))


def judge(history: History, thresholds: Thresholds | None = None) -> Verdict:
    """The final verdict of a finished run: judged at every checkpoint, then as a whole."""
    judge_ = Judge(thresholds)
    replay = (
        history
        if history.total_steps
        else History(history.steps, history.series, history.context, history.error, history.last_step or None)
    )
    for n in checkpoints(len(replay))[:-1]:
        judge_.check(replay.prefix(n))
    return judge_.check(replay, final=True)


def _rank(f: Finding) -> tuple[bool, int]:
    return (not f.certain, PRIORITY.index(f.kind) if f.kind in PRIORITY else 99)


def _verdict(findings: list[Finding], history: History, notes: list[str]) -> Verdict:
    """Findings ranked; the verdict is the first certain one, else healthy."""
    findings = sorted(findings, key=_rank)
    certain = [f for f in findings if f.certain]
    if certain:
        return Verdict(certain[0].kind, certain[0].onset_step, findings, len(history), history.last_step, notes)
    return Verdict("healthy", None, findings, len(history), history.last_step, notes)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


def _finite(value: Any) -> Any:
    """JSON has no inf/NaN: write them as strings so every reader can parse the file."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
