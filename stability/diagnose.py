"""Diagnose a run trained anywhere: a TensorBoard log directory or an MLflow run id.

``diagnose(source)`` reads the run's scalars (SB3 ``train/*`` and ``rollout/*`` keys, CleanRL's
``losses/*`` and ``charts/*`` keys, and the ``stability/*`` keys the callback writes), maps them
onto canonical signals and runs every detector over the whole run. A crash text (a traceback)
can be passed as ``error``; for rlsweep's own MLflow runs the recorded error is used.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from stability import keys
from stability.readers import LogReadError, context_from_cleanrl_table, read_mlflow_run, read_tensorboard_log
from stability.signals import History, group_steps
from stability.thresholds import Thresholds
from stability.verdict import Verdict, judge

_RUN_ID = re.compile(r"^[0-9a-f]{32}$")
LOGGED_CONFIG = "config_from_log"  # context key: the settings read from the log's own record of its config


def history_from_scalars(scalars: dict, context: dict | None = None, error: str | None = None) -> History:
    """A log's scalars as the history the StabilityCallback would have recorded: every update of a
    plain log, grouped the way the callback groups small updates (A2C's 5-step updates, off-policy
    training steps), so the detectors see the same records on both paths."""
    history = History.from_scalars(scalars, context=context, error=error)
    on_policy = not any(k in scalars for k in ("train/actor_loss", "train/critic_loss", "train/ent_coef"))
    return history.regroup(group_steps(history.last_step, on_policy))


def tensorboard_history(
    path: Path, error: str | None = None, context: dict | None = None, without: tuple[str, ...] = ()
) -> History:
    """The history of a TensorBoard log, less the tags that start with one of ``without``. CleanRL
    records its arguments in the log itself (a text table): they are the run's context, and a
    ``context`` the user gives stands over them."""
    scalars, texts = read_tensorboard_log(path)
    if without:
        scalars = {k: v for k, v in scalars.items() if not k.startswith(without)}
    logged = context_from_cleanrl_table(texts["hyperparameters"], str(path)) if "hyperparameters" in texts else {}
    if logged:  # the keys the note names: those the user's own config does not stand over
        logged[LOGGED_CONFIG] = sorted(k for k in logged if k not in (context or {}))
    return history_from_scalars(scalars, context=logged | (context or {}), error=error)


def load_history(
    source: str | Path, error: str | None = None, tracking_uri: str | None = None, context: dict | None = None
) -> History:
    """The signal history of a TensorBoard directory/file or an MLflow run id; ``context`` (the
    run's config, see :func:`stability.readers.read_config`) stands over what the source records."""
    path = Path(source)
    if path.exists():
        return tensorboard_history(path, error, context)
    text = str(source)
    if not _RUN_ID.match(text):
        raise LogReadError(
            f"{text}: no such file or directory, and not an MLflow run id (32 hex digits). "
            "Give a TensorBoard log directory, an event file, or a run id.",
            source=text,
        )
    scalars, tags = read_mlflow_run(text, tracking_uri)
    recorded = {}
    if tags.get(keys.STABILITY_CONTEXT):
        try:
            recorded = json.loads(tags[keys.STABILITY_CONTEXT])
        except json.JSONDecodeError:
            recorded = {}
    return history_from_scalars(scalars, context=recorded | (context or {}), error=error or tags.get(keys.ERROR))


def diagnose(
    source: str | Path,
    error: str | None = None,
    tracking_uri: str | None = None,
    thresholds: Thresholds | None = None,
    plot: str | Path | None = None,
    context: dict | None = None,
) -> Verdict:
    """Verdict for a run trained anywhere (what ``rlsweep diagnose`` prints); with ``plot``, also
    a PNG of its key signals; with ``context``, the run's config (its causes and advice then
    read the run's own values). Raises :class:`LogReadError` when the source is unreadable or
    holds no training signal (and no crash text)."""
    history = load_history(source, error, tracking_uri, context)
    if not len(history) and not history.error:
        raise LogReadError(
            f"{source}: the log holds no training signals rlsweep knows (SB3 'train/*' and "
            "'rollout/*', CleanRL 'losses/*' and 'charts/*', or 'stability/*' keys)",
            source=str(source),
        )
    verdict = judge(history, thresholds)
    read = history.context.get(LOGGED_CONFIG)
    if read:
        shown = ", ".join(f"{k} {history.context[k]}" for k in read if k in history.context)
        verdict.notes.append(f"config read from the log's hyperparameters table (CleanRL's): {shown}")
    if plot:
        from stability.plot import plot_signals

        plot_signals(history, verdict, plot, title=str(source))
    return verdict
