"""Repair benchmark: how often ``rlsweep repair`` turns a failing config into a healthy one, against
a baseline that applies random knob changes from the same menu, scored the same way.

    python tests/bench/repair_bench.py [--jobs 2] [--split heldout] [--only CASE ...] [--skip-repros]
                                       [--skip-corpus]

Two sets of failing configs:

* **The corpus's held-out half** (``conf/corpus``, run first by ``make corpus``), or another split
  written after the repair loop (``--split``, e.g. a fresh split whose runs are on disk). The cases
  chosen, by a rule fixed before any repair ran: in that split, trained by SB3, built as a failure, and at least
  one seed *labelled* failing by the corpus's privileged measurements. Each is repaired with the
  same attempt loop as ``rlsweep repair`` (:class:`sweeps.repair.Plan`), at most 2 attempts of 3
  seeds, then 3 fresh seeds. The loop decides from rlsweep's verdicts, as the product does; the
  score uses the independent labels: a config counts as **repaired** only when every attempt
  seed and every fresh seed is labelled healthy and its mean return (fresh rollouts, the label's
  own measurement) is at least the failing config's.
* **The reproductions** (``conf/sweeps/repro_*``) with their failing settings, as one-trial
  sweeps, repaired by the real ``rlsweep repair`` path (stores, backends, Optuna, MLflow); scored
  by rlsweep's verdicts on the trial's seeds and on fresh seeds (no labels exist for them).

Writes ``results/benchmarks/repair.md`` and ``repair.json`` (``repair_SPLIT.*`` for another split);
runs are kept under ``results/repair_bench/`` so an interrupted benchmark resumes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(REPO), str(HERE / "corpus")]

OUT = REPO / "results" / "repair_bench"
BENCH = REPO / "results" / "benchmarks"
CORPUS_RUNS = REPO / "results" / "corpus" / "runs"
SEEDS, FRESH, MAX_ATTEMPTS = [1, 2, 3], [4, 5, 6], 2
STRATEGIES = ("findings", "random")


# --- the corpus part -------------------------------------------------------------------------------
def failing_cases(split: str = "heldout") -> list[dict[str, Any]]:
    """The split's failing SB3 cases, with each seed's label, verdict and return from the corpus."""
    import labels
    import score
    from run import load_cases

    from stability.verdict import judge

    runs = score.load_runs(CORPUS_RUNS)
    refs = score.references(runs)
    by_case: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        by_case[run["case"]].append(run)
    chosen = []
    for case in load_cases():
        if case["split"] != split or case["path"] != "sb3" or case["class"] == "healthy":
            continue
        runs_ = sorted(by_case.get(case["id"], []), key=lambda r: r["seed"])
        if len(runs_) != len(SEEDS):
            continue
        truth = [labels.label(r, refs.get(case["env_name"])) for r in runs_]
        if all(t == "healthy" for t in truth):
            continue
        chosen.append(
            {
                "case": case,
                "labels": truth,
                "reference": refs.get(case["env_name"]),
                # judged again from the recorded history: the findings (and their patches) of the
                # current detectors, also for runs recorded before a change to them
                "verdicts": {r["seed"]: judge(_with_start_context(case, r)).to_dict() for r in runs_},
                "returns": {r["seed"]: labels.mean_return(r["measurements"]["rollouts"].get("end")) for r in runs_},
            }
        )
    return chosen


def _with_start_context(case: dict[str, Any], run: dict[str, Any]) -> Any:
    """The run's recorded history, with the facts the callback records at the start that its
    recording predates (e.g. the policy head's starting scale) filled in from the same config and
    seed, built again without training: the advice then reads what a run recorded today would."""
    import score
    from run import build_sb3
    from stable_baselines3.common.vec_env import unwrap_vec_normalize

    from stability.callback import _context

    history = score.sweep_history(run)
    model, env, _ = build_sb3(case, run["seed"])
    try:
        for key, value in _context(model, unwrap_vec_normalize(env)).items():
            history.context.setdefault(key, value)
    finally:
        env.close()
    return history


def _train(case: dict[str, Any], patch: dict[str, Any], seed: int, folder: Path) -> dict[str, Any]:
    """One seed of the case with ``patch`` applied: rlsweep's verdict, the label, the return. Kept on disk."""
    import labels
    from run import _jsonable, run_sb3

    from sweeps.repair import apply_patch

    done = folder / f"s{seed}.json"
    if done.is_file():
        return json.loads(done.read_text())
    patched = dict(case, hyperparams=apply_patch(case.get("hyperparams", {}), patch))
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        run = run_sb3(patched, seed, folder / f"s{seed}")
    except Exception as exc:  # the runner itself failed: a crash of this attempt
        run = {
            "error": f"{type(exc).__name__}: {exc}",
            "callback_verdict": {"verdict": "healthy", "findings": []},
            "measurements": None,
        }
    out = {
        "verdict": run["callback_verdict"],
        "error": run.get("error"),
        "seconds": round(time.perf_counter() - started, 2),
    }
    if run.get("measurements"):
        out["label"] = labels.label(run, case.get("_reference"))
        out["return"] = labels.mean_return(run["measurements"]["rollouts"].get("end"))
    else:
        out["label"], out["return"] = "crash", math.nan
    done.write_text(json.dumps(out, default=_jsonable))
    return out


def repair_case(job: tuple[dict[str, Any], str]) -> dict[str, Any]:
    """The attempt loop of ``rlsweep repair`` on one corpus case, with one strategy."""
    import torch

    from sweeps import repair as rp

    torch.set_num_threads(1)
    item, strategy = job
    case = dict(item["case"], _reference=item["reference"])
    finite = {s: r for s, r in item["returns"].items() if math.isfinite(r)}
    defaults, continuous, on_policy = rp.menu_facts(case["algo"], case["env"])
    plan = rp.Plan(
        0,
        {},
        _worst(item["verdicts"]),
        finite,
        SEEDS,
        FRESH,
        rp.candidates(item["verdicts"]),
        MAX_ATTEMPTS,
        strategy,
        rp.menu(case.get("hyperparams", {}), defaults, continuous, on_policy),
    )
    plan.rng_seed = sum(map(ord, case["id"]))  # stable across processes (str hash is salted)
    plan.env_broke = rp.env_broke(item["verdicts"])
    raw = {
        "name": "bench",
        "env": case["env"],
        "algo": case["algo"],
        "policy": case["policy"],
        "total_timesteps": case["total_timesteps"],
    }
    plan.check = lambda patch: rp.patch_problem(raw, case.get("hyperparams", {}), patch)
    root = OUT / "corpus" / case["id"] / strategy
    record: dict[str, Any] = {
        "case": case["id"],
        "class": case["class"],
        "mechanism": case["mechanism"],
        "strategy": strategy,
        "labels_before": item["labels"],
        "verdicts_before": {s: v["verdict"] for s, v in item["verdicts"].items()},
        "verdict_before": plan.verdict,  # the seeds' worst: what the plan repairs ("healthy": nothing)
        "return_before": plan.baseline,
        "attempts": [],
        "runs": 0,
        "seconds": 0.0,
    }
    truth_ok = False
    while (attempt := plan.next_attempt()) is not None:
        # kept per attempt and patch: a rerun after the advice changed trains the new patch
        digest = hashlib.sha256(json.dumps(attempt.patch, sort_keys=True).encode()).hexdigest()[:10]
        seeds = [_train(case, attempt.patch, s, root / f"a{attempt.number}-{digest}") for s in SEEDS]
        record["runs"] += len(seeds)
        record["seconds"] += sum(r["seconds"] for r in seeds)
        attempt.verdicts = {s: r["verdict"]["verdict"] for s, r in zip(SEEDS, seeds, strict=False)}
        attempt.crashed = [
            s for s, r in zip(SEEDS, seeds, strict=False) if r["error"] and r["verdict"]["verdict"] == "healthy"
        ]
        attempt.returns = {s: r["return"] for s, r in zip(SEEDS, seeds, strict=False) if math.isfinite(r["return"])}
        judged = {s: r["verdict"] for s, r in zip(SEEDS, seeds, strict=False)}
        attempt.offered, attempt.env_broke = rp.candidates(judged), rp.env_broke(judged)
        ok, attempt.result = plan.passes(attempt)
        row = {
            "attempt": attempt.number,
            "patch": attempt.patch,
            "verdicts": attempt.verdicts,
            "labels": [r["label"] for r in seeds],
            "mean_return": attempt.mean_return,
            "passes": ok,
            "why": attempt.result,
        }
        record["attempts"].append(row)
        if not ok:
            continue
        fresh = [_train(case, attempt.patch, s, root / f"a{attempt.number}-{digest}") for s in FRESH]
        record["runs"] += len(fresh)
        record["seconds"] += sum(r["seconds"] for r in fresh)
        judged = {s: r["verdict"] for s, r in zip(FRESH, fresh, strict=False)}
        confirmed = plan.confirmed(
            attempt,
            {s: v["verdict"] for s, v in judged.items()},
            {s: r["return"] for s, r in zip(FRESH, fresh, strict=False) if math.isfinite(r["return"])},
            judged,  # a fresh seed's own failure is answered by the next attempt
        )
        row["fresh_verdicts"] = [r["verdict"]["verdict"] for r in fresh]
        row["fresh_labels"] = [r["label"] for r in fresh]
        row["confirmed"] = confirmed
        all_labels = row["labels"] + row["fresh_labels"]
        returns = [r["return"] for r in seeds if math.isfinite(r["return"])]
        reaches = plan.baseline is None or (len(returns) == len(SEEDS) and statistics.fmean(returns) >= plan.baseline)
        row["labels_healthy"] = all(lab == "healthy" for lab in all_labels) and reaches
        if confirmed:
            truth_ok = row["labels_healthy"]
            break
    record["status"] = plan.status
    record["message"] = plan.message
    record["fix_env"] = plan.fix_env
    record["repaired_by_verdict"] = plan.status == "repaired"
    record["repaired"] = plan.status == "repaired" and truth_ok  # by the independent labels
    record["attempts_used"] = len(plan.attempts)
    record["not_applicable"] = plan.skipped
    return record


def _worst(verdicts: dict[int, dict[str, Any]]) -> str:
    from stability.verdict import rank

    names = [v["verdict"] for v in verdicts.values() if v["verdict"] != "healthy"]
    return min(names, key=rank) if names else "healthy"


# --- the reproductions -------------------------------------------------------------------------------
REPROS = {
    "a2c_nan_scale": (
        "repro_a2c_nan_scale",
        {"learning_rate": 0.1, "max_grad_norm": "off", "log_std_bounds": [-103, 88], "normalize": {"reward": False}},
    ),
    "recurrent_dead": ("repro_recurrent_dead", {"normalize": {"obs": True, "clip_obs": 10.0, "reward": False}}),
    "recurrent_zero_reward": ("repro_recurrent_zero_reward", {}),
}


def repair_repro(name: str) -> list[dict[str, Any]]:
    """One reproduction as a one-trial sweep, then ``rlsweep repair`` with each strategy."""

    from rich.console import Console

    from sweeps import spec as spec_module
    from sweeps.repair import RepairSettings
    from sweeps.runner import repair_sweep, run_sweep

    conf, overlay = REPROS[name]
    folder = OUT / "repros" / name
    folder.mkdir(parents=True, exist_ok=True)
    os.chdir(folder)  # the sweep's results/ and MLflow store live here
    spec_module.RESULTS_DIR = folder / "results"
    raw = spec_module.load(REPO / "conf" / "sweeps" / f"{conf}.yaml").model_dump(mode="json", exclude_unset=True)
    raw.update(name=name, space={}, trials=1, hyperparams=raw.get("hyperparams", {}) | overlay)
    spec = spec_module.from_dict(raw, source=conf)
    console = Console(file=open(folder / "log.txt", "a"), width=160)
    if not (spec.storage_dir / "optuna.db").is_file():
        run_sweep(spec, console, workers=2)
    out = []
    for strategy in STRATEGIES:
        kept = folder / f"result_{strategy}.json"
        if kept.is_file():  # repaired before: kept, like the corpus's runs
            out += json.loads(kept.read_text())
            continue
        started = time.perf_counter()
        plans = repair_sweep(
            name, console, [0], RepairSettings(max_attempts=MAX_ATTEMPTS, strategy=strategy, rng_seed=7), workers=2
        )
        for plan in plans:
            d = plan.to_dict()
            jobs = sum(len(plan.seeds) + (len(plan.fresh) if a.confirm else 0) for a in plan.attempts)
            out.append(
                {
                    "repro": name,
                    "strategy": strategy,
                    "status": d["status"],
                    "message": d["message"],
                    "verdict_before": d["verdict_before"],
                    "patch": d["patch"],
                    "attempts_used": d["attempts_used"],
                    "mean_return_before": d["mean_return_before"],
                    "mean_return_after": d["mean_return_after"],
                    "runs": jobs,
                    "trial_runs": len(plan.seeds),
                    "seconds": round(time.perf_counter() - started, 1),
                    "attempts": [
                        {"patch": a["patch"], "verdict": a["verdict"], "result": a["result"]} for a in d["attempts"]
                    ],
                }
            )
        kept.write_text(json.dumps([r for r in out if r["strategy"] == strategy], default=str))
    return out


# --- the report ------------------------------------------------------------------------------------
def why_not(row: dict[str, Any]) -> str | None:
    """Why a corpus case was not repaired: ``env`` (the env's own output is at fault, a reward that
    never varies or a non-finite value after ordinary actions: the plan says to fix the env, since no
    knob reaches it), ``missed`` (rlsweep's verdicts called every seed healthy, so nothing was
    tried), ``return`` (its last attempt was labelled healthy on every seed, fresh ones included,
    but returned less than the failing config) or ``failing`` (still labelled failing on some
    seed); None when repaired."""
    if row["repaired"]:
        return None
    if row["fix_env"]:
        return "env"
    if not row["attempts"] and row["verdict_before"] == "healthy":
        return "missed"
    last = row["attempts"][-1] if row["attempts"] else None
    labels = (last["labels"] + (last.get("fresh_labels") or [])) if last else []
    if labels and all(label == "healthy" for label in labels):
        return "return"
    return "failing"


def _why_not(strategy: str, rows: list[dict[str, Any]]) -> str:
    """One line: the unrepaired cases by why, and the rate over the failures a knob can reach."""
    reasons = Counter(why_not(r) for r in rows)
    reachable = len(rows) - reasons["env"]
    fixed = sum(r["repaired"] for r in rows)
    return (
        f"- **{strategy}**, not repaired: {reasons['env']} the env's own fault (a reward that never varies "
        f"or a non-finite value from the env: no knob reaches it), {reasons['missed']} never tried (rlsweep's "
        f"verdicts called every seed healthy), {reasons['return']} labelled healthy on every seed but "
        f"returning less than the failing config, {reasons['failing']} still failing on some seed; of the "
        f"{reachable} failures a knob can reach, {fixed} repaired ({fixed / max(reachable, 1):.0%})"
    )


def markdown(corpus: list[dict[str, Any]], repros: list[dict[str, Any]], split: str = "heldout") -> list[str]:
    lines = [
        "# Repair benchmark",
        "",
        "`python tests/bench/repair_bench.py` (part of `make bench`). Failing configs are re-trained with",
        "knob patches, at most 2 attempts of 3 seeds each, then confirmed on 3 fresh seeds.",
        "**findings**: the patches the verdict's findings carry (what `rlsweep repair` does);",
        "**random**: the same loop with random knob changes from the same menu (the baseline).",
        "",
    ]
    if corpus:
        lines += [
            f"## Failing corpus cases of split `{split}`",
            "",
            "Counted as repaired only when every attempt seed and every fresh seed is *labelled* healthy by",
            "the corpus's privileged measurements (not by rlsweep's verdicts) and the mean return is at",
            "least the failing config's. `by verdict` is what rlsweep itself would report.",
            "",
            "| class (built as) | cases | findings: repaired | findings: by verdict | random: repaired | "
            "random: by verdict |",
            "|---|---|---|---|---|---|",
        ]
        classes = sorted({r["class"] for r in corpus})
        for cls in classes + ["all"]:
            rows = {
                s: [r for r in corpus if r["strategy"] == s and (cls == "all" or r["class"] == cls)] for s in STRATEGIES
            }
            n = len(rows["findings"])
            cells = []
            for s in STRATEGIES:
                cells += [
                    f"{sum(r['repaired'] for r in rows[s])}/{len(rows[s])}",
                    f"{sum(r['repaired_by_verdict'] for r in rows[s])}/{len(rows[s])}",
                ]
            name = f"**{cls}**" if cls == "all" else cls
            lines.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
        lines += [""]
        for s in STRATEGIES:
            rows = [r for r in corpus if r["strategy"] == s]
            fixed = [r for r in rows if r["repaired"]]
            false_fix = [r for r in rows if r["repaired_by_verdict"] and not r["repaired"]]
            runs = sum(r["runs"] for r in rows)
            lines.append(
                f"- **{s}**: {len(fixed)}/{len(rows)} repaired "
                f"({len(fixed) / max(len(rows), 1):.0%}); attempts per repair "
                f"{statistics.fmean([r['attempts_used'] for r in fixed]) if fixed else float('nan'):.2f}; "
                f"{len(false_fix)} called repaired by rlsweep's verdicts that the labels reject; "
                f"compute {runs} seed runs = {runs / (len(rows) * len(SEEDS)):.2f}x re-running these "
                f"configs once as a fresh sweep of the same size ({sum(r['seconds'] for r in rows) / 60:.0f} "
                f"CPU-minutes)"
            )
        for s in STRATEGIES:
            lines.append(_why_not(s, [r for r in corpus if r["strategy"] == s]))
        lines += [
            "",
            "| case | class | labels before | findings: patch | result | random: patch | result |",
            "|---|---|---|---|---|---|---|",
        ]
        by_case: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
        for r in corpus:
            by_case[r["case"]][r["strategy"]] = r
        for case, both in sorted(by_case.items()):
            cells = []
            for s in STRATEGIES:
                r = both.get(s)
                if r is None:
                    cells += ["-", "-"]
                    continue
                last = r["attempts"][-1] if r["attempts"] else None
                patch = json.dumps(last["patch"]) if last else "-"
                verdict = "repaired" if r["repaired"] else ("verdict only" if r["repaired_by_verdict"] else r["status"])
                labels_after = ",".join(last["labels"] + last.get("fresh_labels", [])) if last else ""
                cells += [patch.replace("|", "/"), f"{verdict} ({r['attempts_used']} att.; labels {labels_after})"]
            first = next(iter(both.values()))
            lines.append(
                f"| {case} | {first['class']} | {','.join(first['labels_before'])} | " + " | ".join(cells) + " |"
            )
    if repros:
        lines += [
            "",
            "## Reproductions (the real `rlsweep repair` path, scored by rlsweep's verdicts)",
            "",
            "| reproduction | strategy | before | status | patch | attempts | return before -> after | "
            "seed runs (trial: 2) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in repros:
            lines.append(
                f"| {r['repro']} | {r['strategy']} | {r['verdict_before']} | {r['status']} | "
                f"{json.dumps(r['patch']) if r['patch'] else r['message']} | {r['attempts_used']} | "
                f"{r['mean_return_before']} -> {r['mean_return_after']} | {r['runs']} |"
            )
        lines += [
            "",
            "The CleanRL PPO reproduction (stuck value loss) is a hand-written script, not a config",
            "rlsweep trains: `rlsweep diagnose` prints its patches, and nothing re-trains it.",
        ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--split", default="heldout", help="the corpus split whose failing cases to repair")
    parser.add_argument("--only", nargs="*", default=None, help="corpus case ids")
    parser.add_argument("--skip-repros", action="store_true")
    parser.add_argument("--skip-corpus", action="store_true")
    parser.add_argument("--repro", help=argparse.SUPPRESS)  # one reproduction, in a process of its own
    args = parser.parse_args(argv)
    if args.repro:
        print(json.dumps(repair_repro(args.repro), default=str))
        return 0
    corpus: list[dict[str, Any]] = []
    if not args.skip_corpus:
        if not CORPUS_RUNS.is_dir():
            print(f"no corpus runs in {CORPUS_RUNS}: run `make corpus` first", file=sys.stderr)
            return 1
        items = [i for i in failing_cases(args.split) if not args.only or i["case"]["id"] in args.only]
        jobs = [(item, s) for item in items for s in STRATEGIES]
        print(f"repairing {len(items)} failing cases of {args.split} x {len(STRATEGIES)} strategies", flush=True)
        with mp.get_context("spawn").Pool(args.jobs, maxtasksperchild=1) as pool:
            for record in pool.imap_unordered(repair_case, jobs):
                corpus.append(record)
                print(
                    f"{record['case']} [{record['strategy']}]: {record['status']}"
                    f"{' (labels agree)' if record['repaired'] else ''} in {record['attempts_used']} attempt(s)",
                    flush=True,
                )
    repros: list[dict[str, Any]] = []
    if not args.skip_repros:
        import subprocess

        for name in REPROS:  # each in its own process: its own cwd, results folder and worker pool
            done = subprocess.run(
                [sys.executable, __file__, "--repro", name],
                capture_output=True,
                text=True,
                env=dict(os.environ, PYTHONPATH=str(REPO)),
            )
            if done.returncode != 0:
                raise RuntimeError(f"reproduction {name} failed:\n{done.stderr[-3000:]}")
            repros += json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"reproduction {name}: {[(r['strategy'], r['status']) for r in repros if r['repro'] == name]}",
                flush=True,
            )
    BENCH.mkdir(parents=True, exist_ok=True)
    corpus.sort(key=lambda r: (r["case"], r["strategy"]))
    name = "repair" if args.split == "heldout" else f"repair_{args.split}"  # one file per split repaired
    (BENCH / f"{name}.json").write_text(json.dumps({"corpus": corpus, "repros": repros}, indent=1, default=str))
    (BENCH / f"{name}.md").write_text("\n".join(markdown(corpus, repros, args.split)) + "\n")
    print(f"wrote {BENCH / f'{name}.md'}")
    counts = Counter((r["strategy"], r["repaired"]) for r in corpus)
    print(json.dumps({s: f"{counts[(s, True)]}/{counts[(s, True)] + counts[(s, False)]}" for s in STRATEGIES}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
