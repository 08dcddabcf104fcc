"""The live view of a running sweep, and the tables shown after it and by ``rlsweep status``."""

from __future__ import annotations

import json
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from sweeps.driver import Progress
from sweeps.results import record


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(seconds)
    return (
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else f"{seconds // 60:02d}:{seconds % 60:02d}"
    )


def summary_line(p: Progress) -> str:
    best = "-" if p.best is None else f"{p.best:.2f} (trial {p.best_trial})"
    return (
        f"trials {p.done}/{p.target} done, {p.running} running, {p.failed} failed"
        f"{f', {p.pruned} pruned' if p.pruned else ''} | best {best} | "
        f"{verdict_counts(p.verdicts)}{_repairs(p)} | elapsed {_clock(time.monotonic() - p.started)} | "
        f"ETA {_clock(p.eta())}{_budget(p)}{_outage(p)}"
    )


def _budget(p: Progress) -> str:
    if p.deadline is None:
        return ""
    if p.out_of_time:
        return " | time budget spent: no new trials"
    return f" | time budget left {_clock(max(p.deadline - time.monotonic(), 0.0))}"


def _outage(p: Progress) -> str:
    if p.tracking_down is None:
        return ""
    down = _clock(time.monotonic() - p.tracking_down)
    return f" | MLflow server unreachable for {down}: {p.tracking_held} writes held, training goes on"


def _repairs(p: Progress) -> str:
    if not (p.repairs or p.repairing):
        return ""
    done = ", ".join(f"{k} {v}" for k, v in sorted(p.repairs.items()))
    return f" | repairs: {done or '-'}" + (f", {p.repairing} running" if p.repairing else "")


def verdict_counts(counts: dict[str, int]) -> str:
    """``healthy 5, nan_scale 2``: healthy first, then failure classes by count."""
    if not counts:
        return "verdicts -"
    order = sorted(counts, key=lambda k: (k != "healthy", -counts[k], k))
    return ", ".join(f"{k} {counts[k]}" for k in order)


class LiveDisplay:
    """A one-line live status on a terminal; a line per finished trial when output is piped."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._live: Any = None
        self._last_done: tuple[int, int] = (-1, -1)
        self._up = True  # the tracking server answered last time

    def __enter__(self) -> LiveDisplay:
        if self.console.is_terminal:
            from rich.live import Live

            self._live = Live("starting workers...", console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def __call__(self, p: Progress) -> None:
        if self._live is not None:
            self._live.update(summary_line(p))
        elif (p.done, sum(p.repairs.values())) != self._last_done or (p.tracking_down is None) != self._up:
            self._last_done = (p.done, sum(p.repairs.values()))
            if (p.tracking_down is None) != self._up:  # piped: the outage's start and end get a line too
                self._up = p.tracking_down is None
                if self._up:
                    self.console.print("MLflow server reachable again: held writes sent", highlight=False)
            self.console.print(summary_line(p), highlight=False)


def trials_table(trials: list[Any], title: str, limit: int | None = None) -> Table:
    """Trials best first: number, outcome, objective, per-seed returns, params, error."""
    table = Table(title=title, title_justify="left")
    for column in ("trial", "outcome", "verdict", "objective", "returns per seed", "params"):
        table.add_column(column, overflow="fold")
    records = sorted(map(record, trials), key=lambda r: (r.value is None, -(r.value or 0.0), r.number))
    for r in records[:limit]:
        outcome = r.outcome
        returns = ", ".join(f"{v:.1f}" for v in r.returns.values())
        text = ", ".join(f"{k}={f'{v:.4g}' if isinstance(v, float) else json.dumps(v)}" for k, v in r.params.items())
        if r.repair_of is not None:
            outcome += f" (repair of {r.repair_of})"
            patch = ", ".join(f"{k}={json.dumps(v)}" for k, v in r.patch.items())
            text = (text + "; " if text else "") + f"patch: {patch}"
        if r.error:
            text += f"\n[red]{r.error[:300]}[/red]"
        value = "-" if r.values is None else ", ".join(f"{v:.2f}" for v in r.values)
        table.add_row(str(r.number), outcome, r.verdict or "-", value, returns or "-", text or "-")
    return table
