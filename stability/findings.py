"""Findings and verdicts: what the detectors conclude, as plain data (a leaf: the detectors and
:mod:`stability.verdict`, which ranks them, both build on it)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any


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
