"""The readers' errors (a leaf: the reader modules and the package both import it)."""

from __future__ import annotations

from stability.errors import RlsweepError


class LogReadError(RlsweepError):
    """A training log could not be read. ``source`` names the file, directory or run."""

    def __init__(self, message: str, source: str | None = None) -> None:
        super().__init__(message)
        self.source = source


class LogReadWarning(UserWarning):
    """Part of a log could not be read; what could be read was returned."""
