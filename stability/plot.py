"""A one-page PNG of the key signals of a run, with the verdict's onset marked."""

from __future__ import annotations

import math
from pathlib import Path

from stability.signals import History
from stability.verdict import Verdict

PANELS = (
    ("policy", ("pg_loss", "approx_kl", "clip_fraction")),
    ("critic", ("value_loss", "explained_variance")),
    ("exploration", ("entropy", "std", "log_std_min", "log_std_max")),
    ("gradients", ("grad_norm", "grad_norm_actor", "grad_norm_critic", "grad_norm_log_std")),
    ("rewards", ("reward_mean", "reward_std", "adv_std")),
    ("returns", ("ep_return",)),
)
_LOG_SCALE = {"value_loss", "grad_norm", "grad_norm_actor", "grad_norm_critic", "grad_norm_log_std", "approx_kl"}


def plot_signals(history: History, verdict: Verdict, path: str | Path, title: str = "") -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # no pyplot: no global state, a third of the import time

    fig = Figure(figsize=(13, 6.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 3)
    for ax, (label, names) in zip(axes.flat, PANELS, strict=False):
        drawn, positive, wants_log = False, True, False
        for name in names:
            points = [(s, v) for s, v in history.points(name) if math.isfinite(v)]
            if not points:
                continue
            xs, ys = zip(*points, strict=False)
            ax.plot(xs, ys, label=name, linewidth=1.2)
            drawn = True
            positive = positive and all(y > 0 for y in ys)
            wants_log = wants_log or name in _LOG_SCALE
        if drawn and wants_log and positive:  # log only where every line can be drawn on it
            ax.set_yscale("log")
        ax.set_title(label, fontsize=10)
        if drawn:
            ax.legend(fontsize=7, loc="best")
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="grey")
        if verdict.onset_step is not None:
            ax.axvline(verdict.onset_step, color="red", linestyle="--", linewidth=1)
        ax.tick_params(labelsize=7)
    head = f"{title}  " if title else ""
    onset = f" (onset at step {verdict.onset_step})" if verdict.onset_step is not None else ""
    fig.suptitle(
        f"{head}verdict: {verdict.verdict}{onset}",
        fontsize=11,
        color="black" if verdict.verdict == "healthy" else "darkred",
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    return path
