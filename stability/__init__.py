"""Stability signals, detectors and verdicts for RL training runs.

Usable without the rest of rlsweep (it never imports ``sweeps``). The detectors arrive with
the stability capability; this package already reserves the name.
"""
__version__ = "0.1.0"
RLSWEEP = True  # tells this package apart from the unrelated PyPI distribution named 'stability'
VERDICTS = ("healthy", "nan_scale", "dead_policy_gradient", "stuck_value_loss", "entropy_collapse",
            "exploding_updates", "degenerate_reward")
