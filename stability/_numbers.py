"""One test for "a number a config or a caller gave": an int or a float, never a bool (``True``
is an int in Python, and would read as 1)."""

from __future__ import annotations

from typing import TypeGuard


def is_real(value: object) -> TypeGuard[int | float]:
    """``value`` is an int or a float and not a bool (finite or not: callers bound it)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
