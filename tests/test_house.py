"""Contracts of the code base itself."""

from __future__ import annotations

import re

from stability import keys
from tests.helpers import REPO


def test_record_keys_have_one_home():
    """Every Optuna attribute and MLflow tag name is spelled once, in stability/keys.py."""
    names = {v for k, v in vars(keys).items() if k.isupper()}
    assert len(names) == len([k for k in vars(keys) if k.isupper()])  # no name given twice
    literal = re.compile(r"""["'](rlsweep\.[a-z_]+|stability\.(?:verdict|onset_step|stopped_by|context))["']""")
    found = []
    for path in [*(REPO / "sweeps").rglob("*.py"), *(REPO / "stability").rglob("*.py")]:
        if path.name == "keys.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            found += [f"{path.relative_to(REPO)}:{n}: {m}" for m in literal.findall(line)]
    assert found == []
