"""Label every corpus run, classify it on both paths, and score the verdicts.

    python tests/bench/corpus/score.py [--runs results/corpus/runs] [--split calib|heldout|all]
                                       [--thresholds FILE] [--json OUT] [--md OUT]

Paths:
* ``sweep``: the StabilityCallback's own history (every signal it adds), judged as in a sweep;
* ``diagnose``: the run's plain TensorBoard log (SB3 ``train/*``/``rollout/*`` keys, or
  CleanRL's), with everything the callback adds removed: what ``rlsweep diagnose`` gets from
  a run trained without rlsweep;
* ``diagnose_config``: the same log with the case's config beside it, read as ``rlsweep
  diagnose --hyperparams`` reads a YAML mapping of it with the algorithm named, and the env's
  Gymnasium id as ``--env`` (its registered reward_threshold is the reference return).

The sweep path's reference return is the one the callback records (the training env's registered
reward_threshold); the plain diagnose path has one only where the log names its env (CleanRL's
table of arguments does; an SB3 log does not).

Each path also counts the knob patches its verdicts advise, and how many of them set a value
the run already had (the callback's record of the live model decides that).

A run can repeat another: a case that follows an earlier split's by a written rule trains the same
policy when the changed values do not reach it (a reward scaled by 2.6e-8 makes every CartPole
variant's A2C one run). Such a run is not held out from the detectors that were changed with its
twin in view, so each score is also given over the ``distinct`` runs: those whose training
trajectory (:func:`trajectory`) no run of an earlier split, or an earlier run of the same split,
already had.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter, defaultdict
from pathlib import Path
from statistics import fmean
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path[:0] = [str(REPO), str(HERE)]

import labels  # noqa: E402
from run import CASES, load_cases  # noqa: E402

from stability.signals import History  # noqa: E402
from stability.thresholds import Thresholds  # noqa: E402
from stability.verdict import Judge, checkpoints, judge  # noqa: E402

# What each --split scores: "seen" is every run whose scores have been read while changing the
# detectors; "fresh6" to "fresh40" were each fixed before any of their cases ran and scored once (see
# cases.yaml for the order in which the splits were written, run and read).
_WRITTEN = (  # every split, in the order it was written
    "calib",
    "heldout",
    "fresh",
    "fresh2",
    "fresh3",
    "fresh4",
    "fresh5",
    "fresh6",
    "fresh7",
    "fresh8",
    "fresh9",
    "fresh10",
    "fresh11",
    "fresh12",
    "fresh13",
    "fresh14",
    "fresh15",
    "fresh16",
    "fresh17",
    "fresh18",
    "fresh19",
    "fresh20",
    "fresh21",
    "fresh22",
    "fresh23",
    "fresh24",
    "fresh25",
    "fresh26",
    "fresh27",
    "fresh28",
    "fresh29",
    "fresh30",
    "fresh31",
    "fresh32",
    "fresh33",
    "fresh34",
    "fresh35",
    "fresh36",
    "fresh37",
    "fresh38",
    "fresh39",
    "fresh40",
    "fresh41",
    "fresh42",
    "fresh43",
    "fresh44",
    "fresh45",
    "fresh46",
    "fresh47",
    "fresh48",
    "fresh49",
    "fresh50",
    "fresh51",
    "fresh52",
    "fresh53",
    "fresh54",
    "fresh55",
    "fresh56",
    "fresh57",
    "fresh58",
    "fresh59",
    "fresh60",
    "fresh61",
    "fresh62",
    "fresh63",
    "fresh64",
    "fresh65",
    "fresh66",
    "fresh67",
    "fresh68",
    "fresh69",
    "fresh70",
    "fresh71",
    "fresh72",
    "fresh73",
    "fresh74",
    "fresh75",
    "fresh76",
)
# the held-out figure: the splits no detector change was made with in view (where one
# barely exercised the last change); "seen" is every split written before them, the ones after
# them are kept for the next changes
_UNSEEN = ("fresh71", "fresh72", "fresh73", "fresh74", "fresh75")
SPLITS = {split: (split,) for split in _WRITTEN} | {
    "unseen": _UNSEEN,
    "seen": _WRITTEN[: _WRITTEN.index(_UNSEEN[0])],
    "all": _WRITTEN,
}
PATHS = ("sweep", "diagnose", "diagnose_config")  # see the module's text
UNSCORED = ("crash", "unmeasured")  # labels that are not a verdict class (see labels.label)
TARGETS = ("nan_scale", "dead_policy_gradient", "stuck_value_loss", "entropy_collapse", "exploding_updates")
_ADDED = ("stability/", "train/grad_norm", "train/grad_clipped_fraction")


def load_runs(root: Path) -> list[dict[str, Any]]:
    runs = []
    for path in sorted(root.glob("*/run.json")):
        run = json.loads(path.read_text())
        if "runner_error" in run:
            print(f"skipped {path.parent.name}: the runner failed", file=sys.stderr)
            continue
        run["dir"] = path.parent
        runs.append(run)
    return runs


TRAJECTORY_MIN_SNAPSHOTS = 3  # finite KL values past the start, for a trajectory to tell runs apart
TRAJECTORY_MIN_KL = 1e-3  # nats: a policy that never got this far from its start looks like any other


def trajectory(run: dict[str, Any]) -> tuple[Any, ...] | None:
    """What a run's training did, from its privileged measurements alone: the algorithm, the seed,
    and the policy's KL from its start and the weights' norm at every snapshot, each to 3
    significant digits. Two runs with the same are the same training, whatever their cases say.
    None where the trajectory cannot tell runs apart: a run that blew up before its third
    snapshot, or a policy that never moved (two frozen policies of one seed have the same
    trajectory whatever their learning rates, and their logs differ)."""
    m = run["measurements"]
    kl = [v for v in m["kl_from_start"][1:] if v is not None and math.isfinite(v)]
    if len(kl) < TRAJECTORY_MIN_SNAPSHOTS or max(kl) < TRAJECTORY_MIN_KL:
        return None

    def digits(values: list[float | None]) -> tuple[str, ...]:
        return tuple(f"{v:.3g}" if v is not None and math.isfinite(v) else "nan" for v in values)

    return (run["algo"], run["seed"], digits(m["kl_from_start"]), digits(m["param_norm"]))


def repeats(runs: list[dict[str, Any]], cases: dict[str, dict[str, Any]]) -> dict[str, str]:
    """``CASE__sN`` of each run whose :func:`trajectory` an earlier run already had -> that run's
    name; earlier is an earlier split in the order they were written, then by case and seed
    (``cases``: the corpus's cases by id)."""
    splits = {case: c["split"] for case, c in cases.items()}
    order = sorted(
        (
            (_WRITTEN.index(splits[r["case"]]), r["case"], r["seed"], r)
            for r in runs
            if splits.get(r["case"]) in _WRITTEN
        ),
        key=lambda item: item[:3],
    )
    first: dict[tuple[Any, ...], str] = {}
    out = {}
    for _, case, seed, run in order:
        name, seen = f"{case}__s{seed}", trajectory(run)
        twin = name if seen is None else first.setdefault(seen, name)
        if twin != name:
            out[name] = twin
    return out


def sweep_history(run: dict[str, Any]) -> History | None:
    h = run.get("history")
    if not h:
        return None
    context = dict(h["context"])
    if "entropy_max" not in context and not context.get("continuous", True):
        context["entropy_max"] = _entropy_max(run["case"])  # runs recorded before the callback noted it
    for key, value in _recorded_env(run["case"]).items():  # likewise: the env's registered threshold and
        context.setdefault(key, value)  # time limit, as the callback reads them
    return History(
        steps=h["steps"],
        series={k: (v[0], v[1]) for k, v in h["series"].items()},
        context=context,
        error=h["error"],
        total_steps=h["total_steps"],
    )


_ENTROPY_MAX: dict[str, float | None] = {}


def _entropy_max(case_id: str) -> float | None:
    """The uniform policy's entropy for a case's action space (what the callback records)."""
    if case_id not in _ENTROPY_MAX:
        import numpy as np

        from sweeps.envs import env_factory

        case = next(c for c in load_cases() if c["id"] == case_id)
        space = env_factory(case["env"])().action_space
        n = getattr(space, "nvec", None)
        _ENTROPY_MAX[case_id] = (
            float(np.sum(np.log(n))) if n is not None else math.log(space.n) if hasattr(space, "n") else None
        )
    return _ENTROPY_MAX[case_id]


_RECORDED_ENV: dict[str, dict[str, Any]] = {}


def _recorded_env(case_id: str) -> dict[str, Any]:
    """What the callback records of a case's training env: its registered reward_threshold, where no
    wrapper under the episode recorder may change the reward, and its time limit."""
    if case_id not in _RECORDED_ENV:
        from stability import references
        from sweeps.envs import env_factory

        case = next(c for c in load_cases() if c["id"] == case_id)
        env = env_factory(case["env"])()
        _RECORDED_ENV[case_id] = references.context(references.registered(env.spec)) | references.time_limit(env)
        env.close()
    return _RECORDED_ENV[case_id]


def plain_log_history(run: dict[str, Any]) -> History | None:
    """What ``rlsweep diagnose`` reads from the run's log, less every signal the callback adds (a
    CleanRL-style run's own table of its arguments included, as diagnose reads it)."""
    from stability.diagnose import tensorboard_history
    from stability.readers import LogReadError

    try:
        return tensorboard_history(run["dir"] / "tb", run.get("error"), without=_ADDED)
    except LogReadError:
        return None


def config_log_history(run: dict[str, Any], case: dict[str, Any]) -> History | None:
    """The plain log with the config the case was trained with, read as ``rlsweep diagnose
    --hyperparams`` reads a YAML mapping of it (the algorithm named, its defaults filling the rest).
    A CleanRL-style script's arguments are not SB3's keyword arguments: its case adds nothing to
    the table of them its own log holds (which both diagnose paths read)."""
    from stability import references
    from stability.readers import context_from_hyperparams

    history = plain_log_history(run)
    if history is not None and "algo" in case:
        history.context.update(context_from_hyperparams(case.get("hyperparams") or {}, case["algo"], case["id"]))
        # and --env with the id the case's env is made from, where it is a registered one
        history.context.update(references.named(case["env"]["id"]))
    return history


def repeated_patches(findings: list[Any], had: dict[str, Any]) -> tuple[int, int]:
    """(patches advised, patches that change nothing: every knob they set already had that value),
    against the context the callback recorded from the live model (what the run really had). "Had"
    is the detectors' own test (``advice.make`` makes no patch for a value the run has)."""
    from stability import advice

    patches = [p["patch"] for f in findings for p in f.patches]
    return len(patches), sum(all(advice.make(had, k, v, "") is None for k, v in p.items()) for p in patches)


def reached_at(history: History, thresholds: Thresholds, kind: str) -> int:
    """The env step at which a live run (the callback's checks) first held ``kind`` in its verdict."""
    live = Judge(thresholds)
    for n in checkpoints(len(history)):
        if live.check(history.prefix(n)).verdict == kind:
            return history.step_of(n - 1)
    return history.last_step


def references(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Each env's reference return: the mean final return of its designated healthy case."""
    import yaml

    envs = yaml.safe_load(CASES.read_text())["envs"]
    out = {}
    for env, spec in envs.items():
        values = [
            labels.mean_return(r["measurements"]["rollouts"].get("end")) for r in runs if r["case"] == spec["reference"]
        ]
        values = [v for v in values if math.isfinite(v)]
        out[env] = fmean(values) if values else math.nan
    return out


def score(
    runs: list[dict[str, Any]], thresholds: Thresholds, split: str, exclude_envs: tuple[str, ...] = ()
) -> dict[str, Any]:
    cases = {c["id"]: c for c in load_cases()}
    refs = references(runs)
    twins = repeats(runs, cases)
    rows = []
    for run in runs:
        case = cases.get(run["case"])
        if case is None or case["split"] not in SPLITS[split] or run["env"] in exclude_envs:
            continue
        ref = refs.get(run["env"])
        truth = labels.label(run, ref)
        # a privileged fact, never a detector input: the run's fresh rollouts got at least half way
        # from the untrained policy's return to the env's reference (the entropy_collapse rule's bar)
        learned = ref is not None and labels.learned(run["measurements"]["rollouts"], ref)
        row = {
            "case": run["case"],
            "seed": run["seed"],
            "mechanism": run["mechanism"],
            "intended": run["class"],
            "label": truth,
            "algo": run["algo"],
            "env": run["env"],
            "split": case["split"],
            "learned": learned,
            "repeats": twins.get(f"{run['case']}__s{run['seed']}"),
        }
        had = (run.get("history") or {}).get("context") or {}
        for path, history in (
            ("sweep", sweep_history(run)),
            ("diagnose", plain_log_history(run)),
            ("diagnose_config", config_log_history(run, case)),
        ):
            if history is None or not len(history):
                continue
            verdict = judge(history, thresholds)
            row[path] = verdict.verdict
            row[f"{path}_advised"], row[f"{path}_repeated"] = repeated_patches(verdict.findings, had)
            row[f"{path}_onset"] = verdict.onset_step
            row[f"{path}_certain"] = sorted({f.kind for f in verdict.findings if f.certain})
            if path == "sweep" and verdict.verdict != "healthy":
                row["sweep_reached"] = reached_at(history, thresholds, verdict.verdict)
                row["budget"] = history.total_steps
        rows.append(row)
    # an env whose reference case has no run: rules 5 and 6 cannot be decided on its runs
    unreferenced = sorted({r["env"] for r in rows if not math.isfinite(refs.get(r["env"], math.nan))})
    return {
        "rows": rows,
        "references": refs,
        "unreferenced": unreferenced,
        "paths": {p: _metrics(rows, p) for p in PATHS},
        "distinct": {p: _metrics([r for r in rows if not r["repeats"]], p) for p in PATHS},
    }


def _metrics(rows: list[dict[str, Any]], path: str) -> dict[str, Any]:
    scored = [r for r in rows if path in r and r["label"] not in UNSCORED]
    confusion = Counter((r["label"], r[path]) for r in scored)
    classes = sorted({r["label"] for r in scored} | {r[path] for r in scored})
    per_class = {}
    for c in classes:
        tp = confusion[(c, c)]
        predicted = sum(v for (t, p), v in confusion.items() if p == c)
        actual = sum(v for (t, p), v in confusion.items() if t == c)
        per_class[c] = {
            "precision": tp / predicted if predicted else math.nan,
            "recall": tp / actual if actual else math.nan,
            "support": actual,
            "predicted": predicted,
        }
    mech: dict[str, list[bool]] = defaultdict(list)
    for r in scored:
        if r["label"] != "healthy":
            mech[f"{r['label']}/{r['mechanism']}"].append(r[path] == r["label"])
    healthy = [r for r in scored if r["label"] == "healthy"]
    delays = [
        (r["sweep_reached"] - r["sweep_onset"]) / r["budget"]
        for r in scored
        if path == "sweep"
        and r[path] == r["label"] != "healthy"
        and r.get("budget")
        and r.get("sweep_onset") is not None
    ]
    reached = [
        r["sweep_reached"] / r["budget"]
        for r in scored
        if path == "sweep" and r[path] == r["label"] != "healthy" and r.get("budget")
    ]
    return {
        "onset_to_verdict_budget_fraction": _quantiles(delays),
        "verdict_at_budget_fraction": _quantiles(reached),
        "runs": len(scored),
        "accuracy": fmean([r[path] == r["label"] for r in scored]) if scored else math.nan,
        "per_class": per_class,
        "confusion": {f"{t} -> {p}": v for (t, p), v in sorted(confusion.items())},
        "mechanism_recall": {k: fmean(v) for k, v in sorted(mech.items())},
        # patches that change nothing: every knob already at that value (the callback's record of the live model)
        "patches_advised": sum(r.get(f"{path}_advised", 0) for r in scored),
        "patches_repeating_the_config": sum(r.get(f"{path}_repeated", 0) for r in scored),
        "healthy_flagged": sum(r[path] != "healthy" for r in healthy),
        "healthy_runs": len(healthy),
        # the false stops that cost most: healthy-labelled runs that also learned (see score())
        "learned_flagged": sum(r[path] != "healthy" for r in healthy if r.get("learned")),
        "learned_runs": sum(bool(r.get("learned")) for r in healthy),
        # what stop_on [KIND] would have stopped among runs labelled healthy: any certain finding counts
        "false_stop_rate": {
            k: sum(k in r.get(f"{path}_certain", []) for r in healthy) / max(len(healthy), 1) for k in TARGETS
        },
    }


def _quantiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"median": round(pick(0.5), 3), "p90": round(pick(0.9), 3), "n": len(values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", default=str(REPO / "results" / "corpus" / "runs"))
    parser.add_argument("--split", default="calib", choices=tuple(SPLITS))
    parser.add_argument("--thresholds", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--rows", action="store_true", help="print every run")
    parser.add_argument("--exclude-env", nargs="*", default=[], help="corpus env names to leave out")
    args = parser.parse_args(argv)
    thresholds = Thresholds.load(args.thresholds) if args.thresholds else Thresholds()
    result = score(load_runs(Path(args.runs)), thresholds, args.split, tuple(args.exclude_env))
    if args.rows:
        for r in result["rows"]:
            mark = "" if all(r.get(p, r["label"]) == r["label"] for p in PATHS) else "  <-- "
            print(
                f"{r['case']:36s} s{r['seed']} {r['intended']:22s} label={r['label']:22s} "
                f"sweep={r.get('sweep', '-'):22s} diag={r.get('diagnose', '-'):22s} "
                f"diag+config={r.get('diagnose_config', '-')}{mark}"
            )
    for path, m in result["paths"].items():
        print(
            f"\n[{args.split}] {path}: {m['runs']} runs, accuracy {m['accuracy']:.3f}, "
            f"healthy flagged {m['healthy_flagged']}/{m['healthy_runs']}, "
            f"of which learned {m['learned_flagged']}/{m['learned_runs']}; "
            f"patches advised {m['patches_advised']}, repeating the config {m['patches_repeating_the_config']}"
        )
        for c, v in m["per_class"].items():
            print(
                f"  {c:22s} P={v['precision']:.2f} R={v['recall']:.2f} (n={v['support']}, predicted {v['predicted']})"
            )
    repeated = sorted(f"{r['case']}__s{r['seed']} = {r['repeats']}" for r in result["rows"] if r["repeats"])
    if repeated:
        print(f"\n{len(repeated)} runs repeat an earlier run's training (see trajectory()):")
        for line in repeated:
            print(f"  {line}")
    for path, m in result["distinct"].items():
        print(f"[{args.split}] {path}, distinct runs only: {m['runs']} runs, accuracy {m['accuracy']:.3f}")
    if result["unreferenced"]:
        print(
            f"\nno run of the reference case of {', '.join(result['unreferenced'])}: their runs that a "
            "critic or collapse rule would label are unmeasured (train it: run.py --only CASE)"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
