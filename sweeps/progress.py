"""The live view of a running sweep, and the tables shown after it and by ``rlsweep status``."""

from __future__ import annotations

import json
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from stability import keys
from sweeps.driver import Progress


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
        f"trials {p.done}/{p.target} done, {p.running} running, {p.failed} failed | best {best} | "
        f"{verdict_counts(p.verdicts)}{_repairs(p)} | elapsed {_clock(time.monotonic() - p.started)} | "
        f"ETA {_clock(p.eta())}"
    )


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
        elif (p.done, sum(p.repairs.values())) != self._last_done:
            self._last_done = (p.done, sum(p.repairs.values()))
            self.console.print(summary_line(p), highlight=False)


def trials_table(trials: list[Any], title: str, limit: int | None = None) -> Table:
    """Trials best first: number, outcome, objective, per-seed returns, params, error."""
    table = Table(title=title, title_justify="left")
    for column in ("trial", "outcome", "verdict", "objective", "returns per seed", "params"):
        table.add_column(column, overflow="fold")
    ranked = sorted(trials, key=lambda t: (t.value is None, -(t.value or 0.0), t.number))
    for t in ranked[:limit]:
        attrs = t.user_attrs
        outcome = attrs.get(keys.OUTCOME, t.state.name.lower())
        returns = ", ".join(f"{float(v):.1f}" for v in attrs.get(keys.RETURNS, {}).values())
        params = attrs.get(keys.PARAMS, t.params)
        text = ", ".join(f"{k}={json.dumps(v) if not isinstance(v, float) else f'{v:.4g}'}" for k, v in params.items())
        if keys.REPAIR_OF in attrs:
            outcome += f" (repair of {attrs[keys.REPAIR_OF]})"
            patch = ", ".join(f"{k}={json.dumps(v)}" for k, v in (attrs.get(keys.REPAIR_PATCH) or {}).items())
            text = (text + "; " if text else "") + f"patch: {patch}"
        if keys.ERROR in attrs:
            text += f"\n[red]{attrs[keys.ERROR][:300]}[/red]"
        value = "-" if t.value is None else f"{t.value:.2f}"
        table.add_row(str(t.number), outcome, attrs.get(keys.VERDICT, "-"), value, returns or "-", text or "-")
    return table
