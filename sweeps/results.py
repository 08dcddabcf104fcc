"""A finished (or running) sweep read back from its stores, for export and report.

Reads ``results/NAME/sweep.yaml`` (the validated spec) and the Optuna study; never writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stability import keys
from sweeps import spec as spec_module
from sweeps.errors import UsageError
from sweeps.scoring import pareto_front, robust_score

# The robust score that ranks configs: mean minus (population) standard deviation of the
# per-seed evaluation returns. It rewards configs that are good on every seed, not lucky on one;
# with 2 seeds it equals the worse seed's return, with more it is kinder to one outlier than min().
FEW_SEEDS = 3


@dataclass
class TrialRecord:
    number: int
    state: str  # COMPLETE / PRUNED / FAIL / RUNNING
    outcome: str  # one of keys.OUTCOMES, interrupted, warm_start or running
    params: dict[str, Any]  # the sampled values, by dotted name
    returns: dict[int, float] = field(default_factory=dict)
    verdicts: dict[int, str] = field(default_factory=dict)
    verdict: str | None = None
    value: float | None = None  # the objective (a multi-objective sweep's return)
    values: list[float] | None = None  # every objective value, in objective.names' order
    error: str = ""
    repair_of: int | None = None  # a repair attempt: the failing trial it repairs
    patch: dict[str, Any] = field(default_factory=dict)  # the repair's knob patch
    confirm: dict[str, Any] | None = None  # a repair's run on fresh seeds
    patches: list[dict[str, Any]] = field(default_factory=list)  # its findings' knob patches
    env_broke: bool = False  # its findings say its env handed back non-finite values (no knob repairs it)

    @property
    def failed_seeds(self) -> int:
        return sum(v != "healthy" for v in self.verdicts.values()) + (self.outcome == "crashed")

    @property
    def failure_class(self) -> str | None:
        """The trial's failure: its verdict if not healthy, 'crashed' for an unclassified crash."""
        if self.outcome == "crashed":
            return self.verdict if self.verdict not in (None, "healthy") else "crashed"
        return self.verdict if self.verdict not in (None, "healthy") else None

    @property
    def label(self) -> str:
        """Its verdict, for counts and plots; a pruned trial without a failure was stopped behind,
        not found healthy."""
        return self.failure_class or ("pruned" if self.outcome == "pruned" else "healthy")

    def safe(self, n_seeds: int) -> bool:
        """Every seed ran to the end, was evaluated, and was judged healthy."""
        return (
            self.outcome == "complete"
            and len(self.returns) == n_seeds
            and len(self.verdicts) == n_seeds
            and self.failed_seeds == 0
        )

    @property
    def score(self) -> float:
        return robust_score(list(self.returns.values()))


@dataclass
class SweepResults:
    spec: spec_module.SweepSpec
    trials: list[TrialRecord]
    study: Any

    @property
    def finished(self) -> list[TrialRecord]:
        """The sampled trials that finished (repair attempts are not among them: see ``repairs``)."""
        return [t for t in self.trials if t.outcome in keys.OUTCOMES and t.repair_of is None]

    @property
    def repairs(self) -> list[TrialRecord]:
        return [t for t in self.trials if t.repair_of is not None]

    def repaired(self) -> list[TrialRecord]:
        """Repair attempts that are safe on the trial's seeds and, where they were confirmed, on the
        fresh seeds too; best robust score first."""
        n = len(self.spec.seed_list)
        ok = [t for t in self.repairs if t.safe(n) and (t.confirm is None or t.confirm.get("safe"))]
        return sorted(ok, key=lambda t: (-t.score, t.number))

    def pareto(self) -> list[TrialRecord]:
        """A multi-objective sweep's Pareto front among its safe configs (none dominates another
        in every objective.directions metric); [] for a single objective."""
        if self.spec.objective.directions is None:
            return []
        safe = {t.number: t for t in self.safe() if t.values}
        front = pareto_front([(n, t.values or []) for n, t in safe.items()], self.spec.objective.maximize)
        return sorted((safe[n] for n in front), key=lambda t: (-(t.value or 0.0), t.number))

    def safe(self, with_repairs: bool = False) -> list[TrialRecord]:
        """Safe configs, best robust score first; ``with_repairs`` adds the repaired configs."""
        n = len(self.spec.seed_list)
        chosen = [t for t in self.finished if t.safe(n)] + (self.repaired() if with_repairs else [])
        return sorted(chosen, key=lambda t: (-t.score, t.number))


def sweep_folder(name: str) -> Path:
    folder = spec_module.RESULTS_DIR / name
    if not (folder / "optuna.db").is_file():
        known = sorted(p.parent.name for p in spec_module.RESULTS_DIR.glob("*/optuna.db"))
        hint = f"; sweeps here: {', '.join(known)}" if known else "; no sweep has run here yet"
        raise UsageError(f"no sweep named '{name}' under {spec_module.RESULTS_DIR}/{hint}")
    return folder


def load(name: str) -> SweepResults:
    import optuna

    from sweeps._yaml import load_yaml

    folder = sweep_folder(name)
    source = folder / "sweep.yaml"
    if not source.is_file():
        raise UsageError(f"{source} is missing: this sweep was run by an older rlsweep; rerun it to export")
    spec = spec_module.from_dict(load_yaml(source.read_text()), source=str(source))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=spec.name, storage=spec_module.optuna_url(folder))
    records = [record(t) for t in study.get_trials(deepcopy=False)]
    return SweepResults(spec, records, study)


def record(t: Any) -> TrialRecord:
    """The one reader of an Optuna trial's rlsweep attributes (keys in :mod:`stability.keys`):
    export, report, status, the live table, resume and MLflow reconciliation all read trials here."""
    attrs = t.user_attrs
    return TrialRecord(
        number=t.number,
        state=t.state.name,
        outcome=attrs.get(keys.OUTCOME, t.state.name.lower()),
        params=dict(attrs.get(keys.PARAMS, t.params)),
        returns={int(k): float(v) for k, v in attrs.get(keys.RETURNS, {}).items()},
        verdicts={int(k): v for k, v in attrs.get(keys.VERDICTS, {}).items()},
        verdict=attrs.get(keys.VERDICT),
        value=t.values[0] if t.values else None,
        values=list(t.values) if t.values else None,
        error=attrs.get(keys.ERROR, ""),
        repair_of=attrs.get(keys.REPAIR_OF),
        patch=dict(attrs.get(keys.REPAIR_PATCH) or {}),
        confirm=attrs.get(keys.CONFIRM),
        patches=list(attrs.get(keys.PATCHES, [])),
        env_broke=bool(attrs.get(keys.ENV_BROKE, False)),
    )
