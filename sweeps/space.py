"""The search space: YAML distributions, checked, turned into Optuna distributions and back.

A ``space`` maps hyperparameter names (nested mappings or dotted keys, e.g.
``policy_kwargs.net_arch``) to one of::

    {type: uniform,    low: 0.9,    high: 0.999}
    {type: loguniform, low: 1.0e-5, high: 1.0e-2}
    {type: loguniform, low: 1.0e-4, high: 0.03, one_minus: true}   # 1 - x, e.g. gamma in [0.97, 0.9999]
    {type: int,        low: 32,     high: 256, step: 32, log: false}
    {type: choice,     values: [64, 128, [64, 64]]}
    {type: fixed,      value: {...}}       # or any plain value
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sweeps.errors import Issue, did_you_mean, one_of

KINDS = ("uniform", "loguniform", "int", "choice", "fixed")
_KEYS = {
    "uniform": {"type", "low", "high", "one_minus"},
    "loguniform": {"type", "low", "high", "one_minus"},
    "int": {"type", "low", "high", "step", "log"},
    "choice": {"type", "values"},
    "fixed": {"type", "value"},
}


@dataclass(frozen=True)
class Dist:
    """One dimension of the space. ``values`` holds choices; ``value`` a fixed value."""

    kind: str
    low: float | int | None = None
    high: float | int | None = None
    step: int = 1
    log: bool = False
    values: tuple = ()
    value: Any = None
    labels: tuple[str | int | float | bool | None, ...] = field(default=(), compare=False)
    # The hyperparameter is 1 - x for x sampled in [low, high]: a discount or GAE lambda whose
    # distance from 1 is sampled log-uniformly, as tuners of RL usually do. Optuna sees x.
    one_minus: bool = False

    @property
    def is_fixed(self) -> bool:
        return self.kind == "fixed"

    def grid_values(self) -> list:
        """The points of this dimension on a grid (choices, or every int step)."""
        if self.kind == "choice":
            return list(self.labels)
        if self.kind == "int" and not self.log:
            return list(range(int(self.low or 0), int(self.high or 0) + 1, self.step))
        raise ValueError(f"a grid needs 'choice' or linear 'int' dimensions, not '{self.kind}'")

    def decode(self, optuna_value: Any) -> Any:
        """The hyperparameter value for what Optuna stored (choices are stored by label)."""
        if self.kind == "choice":
            return self.values[list(self.labels).index(optuna_value)]
        if self.one_minus:
            return 1.0 - optuna_value
        return optuna_value

    def encode(self, value: Any) -> Any:
        """What Optuna stores for a hyperparameter value (the inverse of :meth:`decode`)."""
        if self.kind == "choice":
            return _label(value)
        if self.one_minus and _is_number(value):
            return 1.0 - value
        return value

    @property
    def ends(self) -> list[Any]:
        """The hyperparameter values at the two ends of a range."""
        return [self.decode(self.low), self.decode(self.high)]


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _label(value: Any) -> str | int | float | bool | None:
    """Optuna stores only plain scalars; lists and mappings are stored as their JSON text."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return json.dumps(value, sort_keys=True)


def _parse_dist(raw: Mapping, path: str, issues: list[Issue]) -> Dist | None:
    kind: Any = raw.get("type")
    if kind not in KINDS:
        issues.append(Issue(f"{path}.type", one_of(kind, KINDS)))
        return None
    allowed = _KEYS[kind]
    for key in raw:
        if key not in allowed:
            hint = did_you_mean(key, allowed)
            issues.append(
                Issue(
                    f"{path}.{key}",
                    f"unknown key for a '{kind}' distribution; allowed: {', '.join(sorted(allowed))}{hint}",
                )
            )
    if kind == "fixed":
        if "value" not in raw:
            issues.append(Issue(f"{path}.value", "a 'fixed' distribution needs 'value'"))
            return None
        return Dist("fixed", value=raw["value"])
    if kind == "choice":
        values = raw.get("values")
        if not isinstance(values, list) or not values:
            issues.append(Issue(f"{path}.values", f"expected a non-empty list of choices, got {values!r}"))
            return None
        labels = tuple(_label(v) for v in values)
        if len(set(map(repr, labels))) != len(labels):
            issues.append(Issue(f"{path}.values", f"choices must be distinct, got {values!r}"))
            return None
        return Dist("choice", values=tuple(values), labels=labels)
    return _parse_range(kind, raw, path, issues)


def _parse_range(kind: str, raw: Mapping, path: str, issues: list[Issue]) -> Dist | None:
    low: Any = raw.get("low")
    high: Any = raw.get("high")
    ok = True
    for key, x in (("low", low), ("high", high)):
        if not _is_number(x):
            extra = " (YAML reads that as text)" if isinstance(x, str) else ""
            issues.append(Issue(f"{path}.{key}", f"expected a finite number, got {x!r}{extra}"))
            ok = False
        elif kind == "int" and not float(x).is_integer():
            issues.append(Issue(f"{path}.{key}", f"expected an integer for an 'int' distribution, got {x!r}"))
            ok = False
    if not ok:
        return None
    log = kind == "loguniform" or bool(raw.get("log", False))
    if not low < high:
        issues.append(Issue(path, f"`low < high` must hold, but got (low={low}, high={high})"))
        return None
    if log and low <= 0:
        issues.append(Issue(f"{path}.low", f"a log range needs low > 0, but got low={low}"))
        return None
    if kind != "int":
        one_minus = raw.get("one_minus", False)
        if not isinstance(one_minus, bool):
            issues.append(Issue(f"{path}.one_minus", f"expected true or false, got {one_minus!r}"))
            return None
        return Dist(kind, low=float(low), high=float(high), log=log, one_minus=one_minus)
    step = raw.get("step", 1)
    if not (isinstance(step, int) and not isinstance(step, bool) and step > 0):
        issues.append(Issue(f"{path}.step", f"expected a positive integer, got {step!r}"))
        return None
    if log and step != 1:
        issues.append(Issue(f"{path}.step", "a log 'int' distribution needs step 1"))
        return None
    if (int(high) - int(low)) % step:
        issues.append(
            Issue(f"{path}.step", f"(high - low) must be a multiple of step, got (low={low}, high={high}, step={step})")
        )
        return None
    return Dist("int", low=int(low), high=int(high), step=step, log=log)


def parse_space(raw: Any, path: str = "space") -> tuple[dict[str, Dist], list[Issue]]:
    """Flatten a raw ``space`` mapping into ``{dotted.name: Dist}``, collecting every issue."""
    issues: list[Issue] = []
    out: dict[str, Dist] = {}
    if raw is None:
        return out, issues
    if not isinstance(raw, Mapping):
        return out, [Issue(path, f"expected a mapping of hyperparameter names, got {type(raw).__name__}")]
    _walk(raw, path, "", out, issues)
    return out, issues


def _walk(raw: Mapping, path: str, prefix: str, out: dict[str, Dist], issues: list[Issue]) -> None:
    for key, value in raw.items():
        if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
            issues.append(Issue(f"{path}.{key}", "hyperparameter names must be non-empty dotted text"))
            continue
        name, where = prefix + key, f"{path}.{key}"
        if isinstance(value, Mapping) and "type" in value:
            dist = _parse_dist(value, where, issues)
            if dist is not None:
                out[name] = dist
        elif isinstance(value, Mapping) and value:
            _walk(value, where, name + ".", out, issues)
        else:
            out[name] = Dist("fixed", value=value)


def to_optuna(space: Mapping[str, Dist]) -> dict:
    """Optuna distributions for the sampled (non-fixed) dimensions."""
    import optuna.distributions as od

    out: dict[str, od.BaseDistribution] = {}
    for name, d in space.items():
        low, high = float(d.low or 0), float(d.high or 0)  # set for every range kind by _parse_range
        if d.kind in ("uniform", "loguniform"):
            out[name] = od.FloatDistribution(low, high, log=d.log)
        elif d.kind == "int":
            out[name] = od.IntDistribution(int(low), int(high), step=d.step, log=d.log)
        elif d.kind == "choice":
            out[name] = od.CategoricalDistribution(list(d.labels))
    return out


def grid_of(space: Mapping[str, Dist]) -> dict[str, list]:
    return {name: d.grid_values() for name, d in space.items() if not d.is_fixed}


def grid_size(space: Mapping[str, Dist]) -> int:
    return math.prod(len(v) for v in grid_of(space).values())


def decode(space: Mapping[str, Dist], optuna_params: Mapping[str, Any]) -> dict[str, Any]:
    """Flat ``{dotted.name: value}`` for one trial: the fixed values plus the sampled ones."""
    out = {}
    for name, d in space.items():
        out[name] = d.value if d.is_fixed else d.decode(optuna_params[name])
    return out


def encode(space: Mapping[str, Dist], params: Mapping[str, Any]) -> dict[str, Any]:
    """Optuna-side values for the sampled dimensions among ``params`` (hyperparameter values);
    names that are not sampled dimensions are left out."""
    return {name: space[name].encode(v) for name, v in params.items() if name in space and not space[name].is_fixed}


def set_nested(target: dict, dotted: str, value: Any) -> None:
    """``set_nested(d, "policy_kwargs.net_arch", [64])`` creates the inner mappings it needs."""
    *parents, leaf = dotted.split(".")
    node = target
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[leaf] = value


def flatten(nested: Mapping, prefix: str = "") -> dict[str, Any]:
    """The inverse of :func:`set_nested` over a whole mapping."""
    out: dict[str, Any] = {}
    for key, value in nested.items():
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def holds(dist: Any, value: Any) -> bool:
    """Whether an Optuna distribution contains ``value`` (an Optuna-side value, as in ``trial.params``)."""
    try:
        return bool(dist._contains(dist.to_internal_repr(value)))
    except (ValueError, TypeError):
        return False
