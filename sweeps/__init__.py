"""rlsweep: reinforcement-learning hyperparameter sweeps that tell you why trials fail.

``import sweeps`` is light: the spec and CLI load no torch, Optuna or MLflow until a command
needs them.
"""

__version__ = "0.1.0"
RLSWEEP = True  # tells this package apart from the unrelated PyPI distribution named 'sweeps'
