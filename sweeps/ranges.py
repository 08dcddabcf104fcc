"""Safe ranges: per swept hyperparameter, the interval of sampled values where no trial failed,
and what failed outside it. Export writes them into ``safe_configs.yaml``; the report shows them."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from sweeps.results import SweepResults


def safe_ranges(results: SweepResults) -> dict[str, Any]:
    """Per swept hyperparameter: the interval spanned by the safe configs (every seed healthy), the
    failures inside it (caused by other hyperparameters: read them next to the failure map), and
    which failure classes appear outside it, e.g. "learning_rate > 0.0007 -> nan_scale in 2/4 trials"."""
    finished = results.finished + results.repairs  # repairs are configs tried too
    safe_numbers = {t.number for t in results.safe(with_repairs=True)}
    out: dict[str, Any] = {}
    for name, dist in results.spec.dims.items():
        points = [(t.params[name], t.failure_class, t.number in safe_numbers) for t in finished if name in t.params]
        numeric = dist.kind in ("uniform", "loguniform", "int") or (
            dist.kind == "choice" and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in dist.values)
        )
        if numeric and points:
            out[name] = _numeric_range(name, points)
        elif points:
            out[name] = _categorical(points)
        repaired = sum(t.repair_of is not None and name in t.params for t in finished)
        if name in out and repaired:
            out[name]["repairs"] = (
                f"includes {repaired} repair attempt(s): failing configs re-trained with a knob patch"
            )
    return out


def _numeric_range(name: str, points: list[tuple[Any, str | None, bool]]) -> dict[str, Any]:
    safe_values = [v for v, _, ok in points if ok]
    if not safe_values:
        classes = Counter(f for _, f, _ in points if f is not None)
        return {"safe": None, "note": f"no safe config: {_classes(classes, len(points))} over all sampled {name}"}
    lo, hi = min(safe_values), max(safe_values)
    out: dict[str, Any] = {"safe": [lo, hi], "safe_trials": len(safe_values)}
    inside = [f for v, f, _ in points if lo <= v <= hi and f is not None]
    if inside:
        out["inside"] = f"{len(inside)} trials inside failed (other hyperparameters): {_classes(Counter(inside), None)}"
    for side, chosen, sign, edge in (
        ("below", [p for p in points if p[0] < lo], "<", lo),
        ("above", [p for p in points if p[0] > hi], ">", hi),
    ):
        if chosen:
            classes = Counter(f for _, f, _ in chosen if f is not None)
            out[side] = (
                f"{name} {sign} {_fmt(edge)} -> {_classes(classes, len(chosen))}"
                if classes
                else f"{name} {sign} {_fmt(edge)}: {len(chosen)} trials, none failed, none safe"
            )
    return out


def _classes(classes: Counter, total: int | None) -> str:
    return ", ".join(f"{c} in {n}/{total} trials" if total else f"{c} {n}" for c, n in classes.most_common())


def _categorical(points: list[tuple[Any, str | None, bool]]) -> dict[str, Any]:
    """Per value: trials, safe trials, failures by class; and the values some safe config used."""
    table: dict[Any, dict[str, Any]] = {}
    for value, failure, ok in points:
        key = value if isinstance(value, (str, int, float, bool)) or value is None else json.dumps(value)
        row = table.setdefault(key, {"trials": 0, "safe": 0, "failed": Counter()})
        row["trials"] += 1
        row["safe"] += ok
        if failure is not None:
            row["failed"][failure] += 1
    return {
        "values": {k: {**r, "failed": dict(r["failed"])} for k, r in table.items()},
        "safe": [k for k, r in table.items() if r["safe"]],
    }


def _fmt(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
