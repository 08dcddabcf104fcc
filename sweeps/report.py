"""``rlsweep report``: where a sweep's training breaks, in a terminal summary and figures.

Figures go to ``results/NAME/report/`` (PNG) with ``report.html`` bundling them, and to a
``report`` run in the sweep's MLflow experiment:

* ``failure_map.png``: the two hyperparameters that matter most for failure, every trial a point
  coloured by its verdict;
* ``verdicts.png``: trials per verdict;
* ``importance.png``: hyperparameter importance (Optuna's fANOVA) for failing vs for the return;
* ``curves.png``: training curves of the best safe config's seeds against failing trials' seeds.
"""

from __future__ import annotations

import html
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from stability import VERDICTS, keys
from sweeps import results as results_module
from sweeps.ranges import safe_ranges
from sweeps.results import SweepResults, TrialRecord
from sweeps.scoring import SCORE_RULE

# One colour per verdict, in stability.VERDICTS' order (healthy, then the detectors' priority order);
# a class added later gets grey until it is given one here.
_PALETTE = ("#2e7d32", "#c62828", "#ef6c00", "#795548", "#6a1b9a", "#1565c0", "#ad1457")
COLOURS = {v: _PALETTE[i] if i < len(_PALETTE) else "#9e9e9e" for i, v in enumerate(VERDICTS)} | {
    "crashed": "#424242",
    "pruned": "#b0bec5",
}
FIGURES = ("failure_map.png", "verdicts.png", "importance.png", "curves.png")


# --- importance ---------------------------------------------------------------------------------
def importances(res: SweepResults) -> dict[str, dict[str, float]]:
    """fANOVA importance of each swept hyperparameter for failing (any seed not healthy) and
    for the objective (complete trials); {} where there is too little variety to tell."""
    import optuna

    frozen = {t.number: t for t in res.study.get_trials(deepcopy=False)}
    finished = [t for t in res.finished if frozen[t.number].distributions]
    out: dict[str, dict[str, float]] = {}
    targets = {
        "failure": [(t, 1.0 if t.failure_class else 0.0) for t in finished],
        "return": [(t, t.value) for t in finished if t.value is not None and math.isfinite(t.value)],
    }
    for name, pairs in targets.items():
        values = {v for _, v in pairs}
        if len(pairs) < 3 or len(values) < 2:
            continue
        study = optuna.create_study(direction="maximize")
        for t, value in pairs:
            f = frozen[t.number]
            study.add_trial(optuna.trial.create_trial(params=f.params, distributions=f.distributions, value=value))
        try:
            out[name] = optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0)
            )
        except (RuntimeError, ValueError):
            continue
    return out


def failure_prone(res: SweepResults, imp: dict[str, dict[str, float]]) -> list[tuple[str, float]]:
    ranked = imp.get("failure") or {}
    return sorted(ranked.items(), key=lambda kv: -kv[1])


# --- figures ----------------------------------------------------------------------------------
def _figure(width: float = 7.0, height: float = 4.5) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _axis_values(trials: list[TrialRecord], name: str) -> tuple[list[float], list[str] | None]:
    raw = [t.params.get(name) for t in trials]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw):
        return [float(v) for v in raw if v is not None], None
    labels = sorted({json.dumps(v) if not isinstance(v, str) else v for v in raw})
    return [float(labels.index(json.dumps(v) if not isinstance(v, str) else v)) for v in raw], labels


def failure_map(res: SweepResults, imp: dict[str, dict[str, float]], path: Path) -> None:
    trials = res.finished
    dims = [n for n, _ in failure_prone(res, imp)] or list(res.spec.dims)
    dims = [d for d in dims if any(d in t.params for t in trials)][:2]
    fig = _figure()
    ax = fig.add_subplot()
    if not dims or not trials:
        ax.text(0.5, 0.5, "no swept hyperparameters to map", ha="center", va="center", transform=ax.transAxes)
    else:
        xs, xlabels = _axis_values(trials, dims[0])
        if len(dims) > 1:
            ys, ylabels = _axis_values(trials, dims[1])
        else:
            ys = [t.value if t.value is not None else math.nan for t in trials]
            ylabels = None
        jitter = [((t.number * 37) % 11 - 5) * 0.02 for t in trials]  # keep identical points apart
        for verdict in sorted({t.label for t in trials}):
            idx = [i for i, t in enumerate(trials) if t.label == verdict]
            ax.scatter(
                [xs[i] + (jitter[i] if xlabels else 0) for i in idx],
                [ys[i] + (jitter[i] if ylabels else 0) for i in idx],
                c=COLOURS.get(verdict, "#000000"),
                label=f"{verdict} ({len(idx)})",
                s=46,
                alpha=0.85,
                edgecolors="white",
            )
        ax.set_xlabel(dims[0])
        ax.set_ylabel(dims[1] if len(dims) > 1 else "objective")
        for axis, labels, name, values in (
            (ax.xaxis, xlabels, dims[0], xs),
            (ax.yaxis, ylabels, dims[1] if len(dims) > 1 else "", ys),
        ):
            if labels:
                axis.set_ticks(range(len(labels)), labels)
            elif name and _log_scaled(res, name) and all(v > 0 for v in values):
                (ax.set_xscale if axis is ax.xaxis else ax.set_yscale)("log")
        ax.legend(fontsize=8)
    ax.set_title(f"{res.spec.name}: failure map (each point a trial, coloured by verdict)", fontsize=10)
    fig.savefig(path, dpi=90)


def _log_scaled(res: SweepResults, name: str) -> bool:
    dist = res.spec.dims.get(name)
    if dist is None or getattr(dist, "one_minus", False):  # e.g. gamma: its values crowd next to 1
        return False
    if dist.kind == "loguniform" or getattr(dist, "log", False):
        return True
    values = getattr(dist, "values", None) or []
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0]
    return len(numbers) > 1 and max(numbers) / min(numbers) >= 100


def verdict_bars(res: SweepResults, path: Path) -> None:
    counts = Counter(t.label for t in res.finished)
    fig = _figure(6, 3.5)
    ax = fig.add_subplot()
    names = sorted(counts, key=lambda k: (k != "healthy", -counts[k]))
    ax.bar(names, [counts[n] for n in names], color=[COLOURS.get(n, "#000") for n in names])
    ax.set_ylabel("trials")
    ax.set_title(f"{res.spec.name}: trials by verdict", fontsize=10)
    ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    fig.savefig(path, dpi=90)


def pareto_plot(res: SweepResults, path: Path) -> None:
    """The first two objectives of every complete trial, the safe Pareto front joined up."""
    names = res.spec.objective.names
    done = [t for t in res.finished if t.values and all(math.isfinite(v) for v in t.values)]
    front = res.pareto()
    fig = _figure(6, 4.5)
    ax = fig.add_subplot()
    for verdict in sorted({t.label for t in done}):
        chosen = [t for t in done if t.label == verdict]
        ax.scatter(
            [(t.values or [0, 0])[1] for t in chosen],
            [(t.values or [0, 0])[0] for t in chosen],
            s=28,
            alpha=0.7,
            color=COLOURS.get(verdict, "#000"),
            label=verdict,
        )
    if front:
        line = sorted(((t.values or [0, 0])[1], (t.values or [0, 0])[0]) for t in front)
        ax.plot([x for x, _ in line], [y for _, y in line], "k--", lw=1, label="Pareto front (safe configs)")
        for t in front:
            ax.annotate(str(t.number), ((t.values or [0, 0])[1], (t.values or [0, 0])[0]), fontsize=7)
    ax.set_xlabel(f"{names[1]} ({'max' if res.spec.objective.maximize[1] else 'min'})")
    ax.set_ylabel(f"{names[0]} ({'max' if res.spec.objective.maximize[0] else 'min'})")
    ax.set_title(f"{res.spec.name}: objectives of complete trials", fontsize=10)
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=90)


def figures(res: SweepResults) -> tuple[str, ...]:
    return FIGURES + (("pareto.png",) if res.spec.objective.directions else ())


def importance_bars(imp: dict[str, dict[str, float]], path: Path) -> None:
    fig = _figure(7, 3.8)
    ax = fig.add_subplot()
    names = sorted(set(imp.get("failure", {})) | set(imp.get("return", {})))
    if not names:
        ax.text(
            0.5,
            0.5,
            "too few trials, or no variety in outcome, to rank hyperparameters",
            ha="center",
            va="center",
            transform=ax.transAxes,
            fontsize=9,
        )
    else:
        width = 0.4
        for offset, key, colour in ((-width / 2, "failure", "#c62828"), (width / 2, "return", "#1565c0")):
            ax.barh(
                [i + offset for i in range(len(names))],
                [imp.get(key, {}).get(n, 0.0) for n in names],
                height=width,
                label=f"for {key}",
                color=colour,
            )
        ax.set_yticks(range(len(names)), names, fontsize=8)
        ax.set_xlabel("fANOVA importance")
        ax.legend(fontsize=8)
    ax.set_title("hyperparameter importance: failing vs return", fontsize=10)
    fig.savefig(path, dpi=90)


def curves(res: SweepResults, runs: dict[int, list[tuple[int, list[tuple[int, float]]]]], path: Path) -> None:
    """``runs``: trial -> [(seed, [(step, episode return)])]."""
    fig = _figure(8, 4.5)
    ax = fig.add_subplot()
    safe = res.safe()
    shown = False
    if safe and safe[0].number in runs:
        for seed, points in runs[safe[0].number]:
            if points:
                ax.plot(
                    *zip(*points, strict=False),
                    color=COLOURS["healthy"],
                    linewidth=1.8,
                    label=f"best safe: trial {safe[0].number} seed {seed}",
                )
                shown = True
    failing = [t for t in res.finished if t.failure_class][:3]
    styles = ["--", ":", "-."]
    for style, t in zip(styles, failing, strict=False):
        for seed, points in runs.get(t.number, []):
            if points:
                verdict = t.verdicts.get(seed, t.label)  # each seed with its own verdict
                ax.plot(
                    *zip(*points, strict=False),
                    linestyle=style,
                    color=COLOURS.get(verdict, "#000"),
                    linewidth=1.2,
                    label=f"trial {t.number} seed {seed}: {verdict}",
                )
                shown = True
    if not shown:
        ax.text(0.5, 0.5, "no training curves recorded", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episode return (training)")
    ax.set_title("learning curves: the best safe config against failing ones", fontsize=10)
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=90)


def curve_points(res: SweepResults, numbers: list[int]) -> dict[int, list[tuple[int, list[tuple[int, float]]]]]:
    """Episode-return curves of the given trials' seed runs, from MLflow (empty if unreachable)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(res.spec.mlflow_uri)
    experiment = client.get_experiment_by_name(res.spec.experiment)
    if experiment is None or not numbers:
        return {}
    out: dict[int, list[tuple[int, list[tuple[int, float]]]]] = {}
    found = client.search_runs([experiment.experiment_id], filter_string="tags.`rlsweep.seed` != ''", max_results=5000)
    for run in found:
        number = int(run.data.tags.get(keys.TRIAL, -1))
        if number not in numbers:
            continue
        key = "stability/ep_return" if "stability/ep_return" in run.data.metrics else "rollout/ep_rew_mean"
        history = client.get_metric_history(run.info.run_id, key)
        points = sorted((m.step, m.value) for m in history if math.isfinite(m.value))
        out.setdefault(number, []).append((int(run.data.tags[keys.SEED]), points))
    for items in out.values():
        items.sort()
    return out


# --- the report ---------------------------------------------------------------------------------
def build(name: str, console: Console) -> Path:
    res = results_module.load(name)
    folder = res.spec.storage_dir / "report"
    folder.mkdir(parents=True, exist_ok=True)
    imp = importances(res)
    ranges = safe_ranges(res)
    summary(res, imp, ranges, console)
    failure_map(res, imp, folder / "failure_map.png")
    verdict_bars(res, folder / "verdicts.png")
    importance_bars(imp, folder / "importance.png")
    wanted = ([res.safe()[0].number] if res.safe() else []) + [t.number for t in res.finished if t.failure_class][:3]
    curves(res, curve_points(res, wanted), folder / "curves.png")
    if res.spec.objective.directions:
        pareto_plot(res, folder / "pareto.png")
    page = folder / "report.html"
    page.write_text(html_page(res, imp, ranges))
    log_to_mlflow(res, folder)
    console.print(
        f"wrote {page} and {', '.join(figures(res))}; logged to MLflow run 'report' of experiment "
        f"'{res.spec.experiment}'",
        highlight=False,
    )
    return page


def summary(res: SweepResults, imp: dict[str, dict[str, float]], ranges: dict[str, Any], console: Console) -> None:
    counts = Counter(t.label for t in res.finished)
    table = Table(title=f"trials by verdict ({res.spec.name}, {len(res.finished)} finished)", title_justify="left")
    table.add_column("verdict")
    table.add_column("trials", justify="right")
    for verdict, n in sorted(counts.items(), key=lambda kv: (kv[0] != "healthy", -kv[1])):
        table.add_row(verdict, str(n))
    console.print(table)
    best = Table(title=f"best safe configs ({SCORE_RULE})", title_justify="left")
    for column in ("trial", "score", "returns per seed", "params"):
        best.add_column(column, overflow="fold")
    for t in res.safe()[:5]:
        best.add_row(
            str(t.number),
            f"{t.score:.2f}",
            ", ".join(f"{r:.1f}" for r in t.returns.values()),
            ", ".join(f"{k}={v}" for k, v in t.params.items()) or "-",
        )
    console.print(best if res.safe() else "no safe config: every finished trial failed on a seed")
    repairs = repair_rows(res)
    if repairs:
        table = Table(title="repairs (rlsweep repair; results/NAME/repairs.yaml)", title_justify="left")
        for column in REPAIR_COLUMNS:
            table.add_column(column, overflow="fold")
        for row in repairs:
            table.add_row(*row)
        console.print(table)
    prone = failure_prone(res, imp)
    if prone:
        console.print(
            "most failure-prone hyperparameters (fANOVA importance for failing): "
            + ", ".join(f"{n} {v:.2f}" for n, v in prone[:5]),
            highlight=False,
        )
    for name, info in ranges.items():
        text = "; ".join(info[k] for k in ("below", "above", "inside", "note") if k in info)
        if text:
            console.print(f"  {name}: safe {info.get('safe')}; {text}", highlight=False)


REPAIR_COLUMNS = (
    "trial",
    "verdict before -> after",
    "patch that worked",
    "return before -> after",
    "fresh seeds",
    "attempts",
)


def repair_rows(res: SweepResults) -> list[tuple[str, ...]]:
    """Per repaired (or not) trial, from ``repairs.yaml``: what it was, what fixed it, at what cost."""
    from sweeps._yaml import load_yaml
    from sweeps.repair import describe

    path = res.spec.storage_dir / "repairs.yaml"
    if not path.is_file():
        return []
    rows: list[tuple[str, ...]] = []
    for item in (load_yaml(path.read_text()) or {}).get("repairs", []):
        confirm = item.get("confirm") or {}
        before, after = item.get("mean_return_before"), item.get("mean_return_after")
        rows.append(
            (
                str(item["trial"])
                + ("" if item.get("strategy", "findings") == "findings" else f" ({item['strategy']})"),
                f"{item['verdict_before']} -> {item.get('verdict_after') or '-'}",
                describe(item["patch"]) if item.get("patch") else f"{item['status']}: {item.get('message', '')}",
                f"{'-' if before is None else f'{before:.4g}'} -> {'-' if after is None else f'{after:.4g}'}",
                f"score {confirm['score']} on {confirm['seeds']}" if confirm else "-",
                str(item.get("attempts_used", 0)),
            )
        )
    return rows


def html_page(res: SweepResults, imp: dict[str, dict[str, float]], ranges: dict[str, Any]) -> str:
    counts = Counter(t.label for t in res.finished)
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{v}</td></tr>" for k, v in counts.most_common())
    best = (
        "".join(
            f"<tr><td>{t.number}</td><td>{t.score:.2f}</td><td>{html.escape(json.dumps(t.params))}</td></tr>"
            for t in res.safe()[:5]
        )
        or "<tr><td colspan=3>no safe config</td></tr>"
    )
    range_rows = "".join(
        f"<tr><td>{html.escape(n)}</td><td>{html.escape(json.dumps(i.get('safe')))}</td>"
        f"<td>{html.escape('; '.join(i[k] for k in ('below', 'above', 'inside', 'note') if k in i))}</td></tr>"
        for n, i in ranges.items()
    )
    repairs = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in repair_rows(res))
    repair_table = (
        (
            "<h2>Repairs</h2><table><tr>"
            + "".join(f"<th>{c}</th>" for c in REPAIR_COLUMNS)
            + "</tr>"
            + repairs
            + "</table>"
        )
        if repairs
        else ""
    )
    images = "".join(f'<figure><img src="{f}" alt="{f}"><figcaption>{f}</figcaption></figure>' for f in figures(res))
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>rlsweep report: {html.escape(res.spec.name)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px}}img{{max-width:100%}}</style></head>
<body><h1>rlsweep report: {html.escape(res.spec.name)}</h1>
<p>{html.escape(res.spec.algo)} on {html.escape(res.spec.env.id)}, {len(res.finished)} finished trials x
{len(res.spec.seed_list)} seeds, {res.spec.total_timesteps} steps each.</p>
<h2>Trials by verdict</h2><table><tr><th>verdict</th><th>trials</th></tr>{rows}</table>
<h2>Best safe configs</h2><p>{html.escape(SCORE_RULE)}</p>
<table><tr><th>trial</th><th>score</th><th>params</th></tr>{best}</table>
<h2>Safe ranges</h2><table><tr><th>hyperparameter</th><th>safe</th><th>outside</th></tr>{range_rows}</table>
{repair_table}
<h2>Figures</h2>{images}
</body></html>
"""


def log_to_mlflow(res: SweepResults, folder: Path) -> None:
    """The figures and page as artifacts of one 'report' run in the sweep's experiment (reused)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(res.spec.mlflow_uri)
    experiment = client.get_experiment_by_name(res.spec.experiment)
    if experiment is None:
        return
    found = client.search_runs(
        [experiment.experiment_id], filter_string="tags.`rlsweep.kind` = 'report'", max_results=1
    )
    if found:
        run_id = found[0].info.run_id
    else:
        run_id = client.create_run(
            experiment.experiment_id, run_name="report", tags={keys.KIND: "report", keys.SWEEP: res.spec.name}
        ).info.run_id
    for name in (*figures(res), "report.html"):
        client.log_artifact(run_id, str(folder / name), artifact_path="report")
    client.set_terminated(run_id, "FINISHED")
