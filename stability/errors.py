"""The root of the errors a user can act on (a bad spec, an unreadable log, a wrong command).

Every such error's text is a complete paragraph naming the file, run or key path and what is
allowed; ``rlsweep`` prints it and exits with code 2. It lives in the leaf library so that its
errors (thresholds, log readers) and the engine's (``sweeps.errors``) share one root.
"""

from __future__ import annotations


class RlsweepError(Exception):
    """An error the user can act on; never a bug in rlsweep."""
