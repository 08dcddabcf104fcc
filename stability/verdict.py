"""Verdicts: :func:`classify` runs every detector over a history, :func:`judge` replays it at
checkpoints; :class:`Finding` and :class:`Verdict` live in :mod:`stability.findings`."""

from __future__ import annotations

from dataclasses import replace

from stability.detectors import DETECTORS
from stability.findings import Finding, Verdict
from stability.signals import History
from stability.thresholds import Thresholds

# When several failures are certain, the verdict names the one that explains the others:
# non-finite numbers end everything; exploding updates cause most of what follows them; a
# reward with no signal makes a dead gradient and a stuck critic unavoidable.
PRIORITY = tuple(d.name for d in DETECTORS)  # the detectors are registered in this order
_WHOLE_RUN = frozenset(d.name for d in DETECTORS if d.whole_run_claim)


def classify(history: History, thresholds: Thresholds | None = None, final: bool = False) -> Verdict:
    """Run every detector; the verdict is the highest-priority certain finding, else healthy.

    ``final`` says the run has ended (detectors that judge a whole run may then decide).
    """
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
    excuse it), unless its detector's certain finding is a claim about the whole run so far that
    a later check no longer makes (``Detector.whole_run_claim``); the verdict is the
    highest-priority certain finding, causes before consequences."""

    def __init__(self, thresholds: Thresholds | None = None) -> None:
        self.thresholds = thresholds or Thresholds()
        self.kept: dict[str, Finding] = {}

    def check(self, history: History, final: bool = False) -> Verdict:
        now = classify(history, self.thresholds, final)
        for kind in [k for k in self.kept if k in _WHOLE_RUN]:
            if not any(f.kind == kind and f.certain for f in now.findings):
                del self.kept[kind]  # what it said of the run so far no longer holds
        for finding in now.findings:
            if not finding.certain:
                continue
            kept = self.kept.setdefault(finding.kind, finding)
            added = finding.evidence.keys() - kept.evidence.keys()
            if added:  # the first certain finding stays, and gathers what later checks add (a crash's error)
                self.kept[finding.kind] = replace(
                    kept, evidence=kept.evidence | {k: finding.evidence[k] for k in added}
                )
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


def rank(kind: str) -> int:
    """A failure class's place in the verdict priority (0 first); anything else after every class."""
    return PRIORITY.index(kind) if kind in PRIORITY else len(PRIORITY)


def _rank(f: Finding) -> tuple[bool, int]:
    return (not f.certain, rank(f.kind))


def _verdict(findings: list[Finding], history: History, notes: list[str]) -> Verdict:
    """Findings ranked; the verdict is the first certain one, else healthy."""
    findings = sorted(findings, key=_rank)
    certain = [f for f in findings if f.certain]
    if certain:
        return Verdict(certain[0].kind, certain[0].onset_step, findings, len(history), history.last_step, notes)
    return Verdict("healthy", None, findings, len(history), history.last_step, notes)


__all__ = ["PRIORITY", "rank", "Finding", "Judge", "Verdict", "checkpoints", "classify", "judge"]
