"""rlsweep: reinforcement-learning hyperparameter sweeps that tell you why trials fail.

``import sweeps`` is light: the spec and CLI load no torch, Optuna or MLflow until a command
needs them.
"""

from stability import __version__ as __version__  # the one place the version is written (pyproject reads it too)

RLSWEEP = True  # tells this package apart from the unrelated PyPI distribution named 'sweeps'
