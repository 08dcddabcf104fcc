"""Contracts of the code base itself."""

from __future__ import annotations

import re

import yaml

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


def test_trial_attributes_have_one_reader():
    """An Optuna trial's rlsweep attributes are read in sweeps.results.record and nowhere else
    (the driver writes them; the study's own fingerprint attribute is not a trial's). The study's
    storage (sweeps.study_storage) stores and caches every attribute, reading none of them."""
    read = re.compile(r"\.user_attrs\b")
    found = []
    for path in (REPO / "sweeps").rglob("*.py"):
        if path.name == "study_storage.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if read.search(line) and "study.user_attrs" not in line:
                found.append(f"{path.relative_to(REPO)}:{n}")
    assert [f for f in found if not f.startswith("sweeps/results.py")] == []
    assert len(found) == 1  # record() itself


def test_verdict_names_come_from_the_detector_registry():
    from stability import VERDICTS
    from stability.detectors import DETECTORS
    from stability.thresholds import DEFAULTS
    from stability.verdict import PRIORITY
    from sweeps.report import COLOURS

    assert PRIORITY == tuple(d.name for d in DETECTORS) and VERDICTS == ("healthy", *PRIORITY)
    assert set(DEFAULTS) == set(PRIORITY)  # every detector has its thresholds, and nothing else does
    assert set(COLOURS) == {*VERDICTS, "crashed", "pruned"} and len(set(COLOURS.values())) == len(COLOURS)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports, at any level (function-level imports included).
    ``from pkg import sub`` counts as importing ``pkg.sub`` alone when ``sub`` is a module."""
    import ast

    paths = {}
    for path in [*(REPO / "sweeps").rglob("*.py"), *(REPO / "stability").rglob("*.py")]:
        parts = path.relative_to(REPO).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in paths]
                targets = subs if len(subs) == len(node.names) else [node.module, *subs]
            graph[name] |= {t for t in targets if t in paths and t != name}
    return graph


def test_no_import_cycles_and_stability_stays_a_leaf():
    graph = _import_graph()
    done: set[str] = set()

    def walk(node: str, path: list[str]) -> None:
        if node in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(node) :], node]))
        if node in done:
            return
        for target in sorted(graph[node]):
            walk(target, [*path, node])
        done.add(node)

    for name in sorted(graph):
        walk(name, [])
    assert not [(m, t) for m, ts in graph.items() if m.startswith("stability") for t in ts if t.startswith("sweeps")]


def test_the_code_loads_no_pickle_and_evaluates_no_text() -> None:
    """Security rules the docs state, kept by a scan of the sources: YAML only through the safe
    loader, no pickle or torch.load of anything, no eval/exec, no shell."""
    banned = {
        r"\bpickle\.loads?\(": "pickle",
        r"\btorch\.load\(": "torch.load",
        r"\beval\(": "eval",
        r"\bexec\(": "exec",
        r"shell=True": "a shell",
        r"yaml\.load\((?![^)]*Loader=_(Zoo)?Loader\b)": "yaml.load",
        r"yaml\.unsafe_load|yaml\.full_load": "unsafe YAML",
        r"cloudpickle\.loads?\(": "cloudpickle",
    }
    found = []
    for path in [*REPO.glob("sweeps/**/*.py"), *REPO.glob("stability/**/*.py")]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for pattern, what in banned.items():
                if re.search(pattern, line) and not re.search(r"^\s*#", line):
                    found.append(f"{path.relative_to(REPO)}:{number}: {what}")
    assert found == []
    from stability.readers._config import _ZooLoader
    from sweeps._yaml import _Loader

    # the two loaders the scan lets through: safe loaders (rl-zoo3's OrderedDict tag read as a dict)
    assert issubclass(_Loader, yaml.SafeLoader) and issubclass(_ZooLoader, yaml.SafeLoader)
