"""Errors a user can act on: every one names the file, the key path and what is allowed."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from stability.errors import RlsweepError


@dataclass(frozen=True)
class Issue:
    """One problem at one key path of a spec (``algo``, ``space.learning_rate.low``...)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '<top level>'}: {self.message}"


class SpecError(RlsweepError):
    """A sweep spec that cannot be run. Carries every issue found, not just the first."""

    def __init__(self, source: str, issues: Iterable[Issue]):
        self.source = source
        self.issues = list(issues)
        super().__init__(self.render())

    def render(self) -> str:
        n = len(self.issues)
        head = f"{self.source}: {n} error{'s' if n != 1 else ''}"
        return "\n".join([head] + [f"  {issue}" for issue in self.issues])


class UsageError(RlsweepError):
    """A command-line request that cannot be served (unknown sweep, missing store...)."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'tpe'?"`` when a close match exists, else ``""``."""
    matches = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f"; did you mean '{matches[0]}'?" if matches else ""


def one_of(word: str, choices: Iterable[str]) -> str:
    """``"'tpee' is not one of grid, random, tpe; did you mean 'tpe'?"``"""
    choices = list(choices)
    return f"'{word}' is not one of {', '.join(choices)}{did_you_mean(word, choices)}"
