"""Read the scalars a finished (or running) training run logged, in the form
:meth:`stability.signals.History.from_scalars` takes: ``{key: [(step, value), ...]}``.

* :func:`read_tensorboard` reads TensorBoard event files (a directory, searched recursively,
  or one file) without TensorFlow; needs the ``tensorboard`` package (for its protobufs).
* :func:`read_mlflow_run` reads every metric history and the tags of one MLflow run; needs
  ``mlflow``.
* :func:`read_tensorboard_log` reads the scalars and the text summaries (CleanRL writes its
  arguments there as a table, which :func:`context_from_cleanrl_table` reads as a context).
* :func:`read_config` reads the config a run was trained with (an SB3 model ``.zip``, rl-zoo3's
  ``config.yml`` or a YAML mapping of hyperparameters) as the context the detectors read.

Both raise :class:`LogReadError` when nothing usable can be read; its text is a complete,
one-paragraph explanation naming the file or run. A partial read (a truncated last record, a
corrupt record that was skipped, an empty file next to good ones) returns what was readable and
emits a :class:`LogReadWarning`. Importing this package is cheap: the protobuf, tensorboard and
mlflow imports happen inside the functions.
"""

from __future__ import annotations

from stability.readers._config import algo_name, context_from_cleanrl_table, context_from_hyperparams, read_config
from stability.readers._errors import LogReadError, LogReadWarning
from stability.readers._mlflow import read_mlflow_run
from stability.readers._tensorboard import read_tensorboard, read_tensorboard_log

__all__ = [
    "LogReadError",
    "LogReadWarning",
    "algo_name",
    "context_from_cleanrl_table",
    "context_from_hyperparams",
    "read_config",
    "read_mlflow_run",
    "read_tensorboard",
    "read_tensorboard_log",
]
