"""Set detector thresholds on in-sample splits of the corpus: the calibration half unless told.

    python tests/bench/corpus/calibrate.py [--runs results/corpus/runs] [--splits calib ...] [--only DETECTOR.KEY ...]

``--splits`` fits on other splits that are already in-sample (never the one that will be scored);
``--only`` fits a few keys, e.g. a threshold added later, leaving the others as documented.

Coordinate descent over a few thresholds per detector, each on a small grid, both paths pooled:
the cost of a setting is its wrong verdicts plus, again, every failure verdict given to a run
labelled healthy (precision first: such a verdict can stop a good trial). Ties keep the current
value. Only the splits named are read; the split a change will be scored on is never named.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2]), str(HERE)]

import labels  # noqa: E402
import score  # noqa: E402
from run import load_cases  # noqa: E402

from stability.thresholds import DEFAULTS, Thresholds  # noqa: E402
from stability.verdict import judge  # noqa: E402

GRID: dict[tuple[str, str], list[Any]] = {
    ("stuck_value_loss", "relative_floor"): [0.03, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4],
    ("stuck_value_loss", "relative_floor_episode"): [0.005, 0.01, 0.02, 0.05, 0.1],
    ("stuck_value_loss", "pinned_share"): [0.4, 0.5, 0.6, 0.8],
    ("stuck_value_loss", "ev_pinned"): [1e-3, 3e-3, 1e-2],
    ("stuck_value_loss", "fall_ratio"): [0.6, 0.7, 0.8, 0.9],
    ("stuck_value_loss", "ev_max"): [0.05, 0.1, 0.2, 0.3],
    ("entropy_collapse", "min_gain"): [0.0, 0.05, 0.1, 0.2, 0.3],
    ("entropy_collapse", "entropy_fraction"): [0.05, 0.1, 0.2],
    ("entropy_collapse", "stay_factor"): [1.0, 2.0, 4.0],
    ("entropy_collapse", "std_max"): [0.02, 0.05, 0.1],
    ("dead_policy_gradient", "kl_max"): [3e-5, 1e-4, 3e-4, 1e-3],
    ("dead_policy_gradient", "min_progress"): [0.3, 0.5, 0.7],
    ("dead_policy_gradient", "min_updates"): [6, 10, 20],
    ("exploding_updates", "kl_max"): [1.0, 3.0, 10.0, 30.0],
    ("exploding_updates", "grad_ratio"): [100.0, 300.0, 1000.0, 3000.0],
    ("exploding_updates", "update_ratio_max"): [0.2, 0.3, 0.5, 1.0, 2.0],
    ("exploding_updates", "min_hits"): [2, 3, 5],
    ("nan_scale", "log_std_high"): [20.0, 30.0, 44.0],
}


def labelled_histories(root: Path) -> list[dict[str, Any]]:
    """Every scored run's label with each path's history (crashes left out), and its case's
    mechanism and split."""
    runs = score.load_runs(root)
    refs = score.references(runs)
    cases = {c["id"]: c for c in load_cases()}
    items = []
    for run in runs:
        truth = labels.label(run, refs.get(run["env"]))
        if truth in score.UNSCORED or run["case"] not in cases:
            continue
        for path, history in (("sweep", score.sweep_history(run)), ("diagnose", score.plain_log_history(run))):
            if history is not None and len(history):
                items.append(
                    {
                        "truth": truth,
                        "mechanism": f"{run['class']}/{run['mechanism']}",
                        "path": path,
                        "case": run["case"],
                        "split": cases[run["case"]]["split"],
                        "history": history,
                    }
                )
    return items


def calibration_set(root: Path, splits: tuple[str, ...] = ("calib",)) -> list[tuple[str, Any]]:
    """(label, history) for every path of every run of ``splits`` (the calibration half unless told)."""
    return [(i["truth"], i["history"]) for i in labelled_histories(root) if i["split"] in splits]


def cost(data: list[tuple[str, Any]], values: dict[str, dict[str, Any]]) -> int:
    thresholds = Thresholds(values)
    total = 0
    for truth, history in data:
        verdict = judge(history, thresholds).verdict
        total += (verdict != truth) + (truth == "healthy" and verdict != "healthy")
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", default=str(score.REPO / "results" / "corpus" / "runs"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--splits", nargs="*", default=["calib"])
    parser.add_argument("--only", nargs="*", default=None, help="DETECTOR.KEY of the grid to fit")
    args = parser.parse_args(argv)
    data = calibration_set(Path(args.runs), tuple(args.splits))
    grid = {k: v for k, v in GRID.items() if args.only is None or ".".join(k) in args.only}
    print(f"{len(data)} calibration histories; cost with the documented defaults: {cost(data, DEFAULTS)}")
    values = fit(data, grid=grid, rounds=args.rounds, log=True)
    print(f"cost after calibration: {cost(data, values)}")
    print("chosen:")
    for detector, section in values.items():
        for key, value in section.items():
            if value != DEFAULTS[detector][key]:
                print(f"  {detector}.{key}: {DEFAULTS[detector][key]} -> {value}")
    return 0


def fit(
    data: list[tuple[str, Any]],
    grid: dict[tuple[str, str], list[Any]] | None = None,
    rounds: int = 2,
    log: bool = False,
) -> dict[str, dict[str, Any]]:
    """Coordinate descent from the documented defaults; returns the chosen thresholds."""
    grid = GRID if grid is None else grid
    values = copy.deepcopy(DEFAULTS)
    best = cost(data, values)
    for _ in range(rounds):
        changed = False
        for (detector, key), options in grid.items():
            for candidate in options:
                trial = copy.deepcopy(values)
                trial[detector][key] = candidate
                c = cost(data, trial)
                if c < best:
                    best, values, changed = c, trial, True
                    if log:
                        print(f"  {detector}.{key} = {candidate}: cost {c}")
        if not changed:
            break
    return values


def leave_one_mechanism_out(root: Path) -> dict[str, dict[str, Any]]:
    """Per failure mechanism (as the cases were built): recalibrate on the calibration half without
    any of its cases, then score its runs labelled as failures (both halves, both paths) with those
    thresholds. Its recall there is what a mechanism never seen in calibration gets."""
    items = labelled_histories(root)
    out = {}
    for mech in sorted({i["mechanism"] for i in items if not i["mechanism"].startswith("healthy/")}):
        mech_cases = {i["case"] for i in items if i["mechanism"] == mech}
        train = [(i["truth"], i["history"]) for i in items if i["split"] == "calib" and i["case"] not in mech_cases]
        thresholds = Thresholds(fit(train, rounds=1))
        scored = [i for i in items if i["mechanism"] == mech and i["truth"] != "healthy"]
        if not scored:  # every run of the mechanism was labelled healthy: nothing to recall
            continue
        hits = [judge(i["history"], thresholds).verdict == i["truth"] for i in scored]
        out[mech] = {"runs": len(scored), "recall": sum(hits) / len(hits), "cases": sorted(mech_cases)}
        print(f"  {mech}: recall {out[mech]['recall']:.2f} over {len(scored)} runs x paths", flush=True)
    return out


if __name__ == "__main__":
    sys.exit(main())
