"""Repair: from a failing trial's findings to a config that trains healthy, checked on fresh seeds.

A *plan* repairs one failing trial. Each *attempt* re-trains the trial's config with a knob patch
on the trial's seeds; the driver runs attempts as jobs like any trial's, so repairs share the
sweep's worker pool on either backend. Which patch an attempt tries:

1. the first patch the failing trial's findings carry (causes first: the verdict's class, then
   the other findings, in the detectors' order);
2. after an attempt that still fails: that attempt's patch *plus* the first new patch its own
   findings carry (the findings of the patched run, computed from its config, so never a value
   it already has). When the attempt offers nothing new (a crash with no finding, or healthy
   seeds that returned less), its patch is dropped and the next untried candidate is used alone.

An attempt is a repair when every seed is ``healthy`` and its mean return is at least the
failing config's (where the failing config returned anything). It is then confirmed on as many
fresh seeds as the trial had, seeds the sweep never used; only a confirmed attempt counts as
repaired. A failed confirmation uses up no attempt. When a fresh seed failed with findings of its
own (a failure the trial's seeds never showed: a patch that cured the overflow can leave updates
too large on another seed), the next attempt keeps the confirmed-against patch and adds the first
new patch those findings carry, as after a failing attempt; otherwise that line of patches ends.

The ``random`` strategy is the baseline the benchmark compares with: the same attempt loop, with
patches drawn at random from the same menu of knob changes instead of from the findings.
"""

from __future__ import annotations

import copy
import json
import math
import random
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stability import advice
from stability.thresholds import DEFAULTS
from stability.verdict import rank
from sweeps import schedules
from sweeps.scoring import robust_score

STRATEGIES = ("findings", "random")
# Patches whose knob holds a mapping merge into the config's mapping instead of replacing it.
_MERGED = ("normalize", "init_gains")
# What rlsweep's knobs are when a config leaves them out (SB3's orthogonal-init gains, no decay).
_KNOB_DEFAULTS = {"weight_decay": 0.0, "init_gains": {"hidden": math.sqrt(2), "policy": 0.01, "value": 1.0}}
# Verdicts with nothing for a patch to act on: said, never tried.
_NOT_KNOBS = {"healthy": "nothing to repair: rlsweep's verdict is healthy on every seed"}
# A reward that never varies: its run's other findings (a dead gradient, a stuck critic) carry patches
# and are tried, since the verdict may only mean the policy never reached a reward (Acrobot's -1 per
# step); when none works, the message says what knobs cannot do.
_DEGENERATE = (
    "the reward never varies, so no learning rate, clipping or normalisation gives the policy a "
    "signal; fix the env's reward"
)
# A discount from which stuck_value_loss advises SB3's 0.99 (the random menu offers it from there too).
LONG_HORIZON_GAMMA = DEFAULTS["stuck_value_loss"]["long_horizon_gamma"]
# What a crash with no finding gets: the general stabilisers, gentlest first.
_CRASH_MENU = ("clip", "lr/3", "normalize_reward")


# --- patches --------------------------------------------------------------------------------------
def apply_patch(hyperparams: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``hyperparams`` with ``patch`` applied, as a spec would write them (the input is not changed).

    ``learning_rate`` keeps the config's schedule shape: ``lin_X`` becomes ``lin_<new>``, and a
    ``{schedule, initial, final, critic}`` mapping is scaled as a whole. ``normalize`` and
    ``init_gains`` merge into what the config has (``normalize: true`` already normalises rewards).
    """
    out = copy.deepcopy(dict(hyperparams))
    for knob, value in patch.items():
        if knob == "learning_rate":
            out[knob] = _scaled_rate(out.get(knob), float(value))
        elif knob in _MERGED and isinstance(value, Mapping):
            current = out.get(knob)
            if current is True and knob == "normalize":
                current = {"reward": True, "obs": True}
            merged = dict(current) if isinstance(current, Mapping) else {}
            if knob == "normalize" and not isinstance(current, Mapping):
                merged["obs"] = False  # from off: turn on only what the patch names
            merged.update(copy.deepcopy(dict(value)))
            out[knob] = merged
        else:
            out[knob] = copy.deepcopy(value)
    return out


def _scaled_rate(current: Any, new: float) -> Any:
    if schedules.parse(current) is not None:
        return schedules.text(new)
    if isinstance(current, Mapping) and "initial" in current:
        factor = new / float(current["initial"])
        scaled = dict(current, initial=new)
        for key in ("final", "critic"):
            if key in scaled:
                scaled[key] = float(f"{float(scaled[key]) * factor:.4g}")
        return scaled
    return new


def initial_rate(hyperparams: Mapping[str, Any], default: float) -> float:
    value = hyperparams.get("learning_rate", default)
    rate = schedules.parse(value)
    if rate is not None:
        return rate
    if isinstance(value, Mapping):
        return float(value["initial"])
    return float(value)


def merge(*patches: Mapping[str, Any]) -> dict[str, Any]:
    """Later patches win per knob; mapping-valued knobs merge."""
    out: dict[str, Any] = {}
    for patch in patches:
        for knob, value in patch.items():
            if knob in _MERGED and isinstance(value, Mapping) and isinstance(out.get(knob), Mapping):
                out[knob] = {**out[knob], **value}
            else:
                out[knob] = copy.deepcopy(value)
    return out


def describe(patch: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}: {json.dumps(v)}" for k, v in patch.items()) or "(none)"


def candidates(verdicts: Mapping[Any, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The failing trial's patches, in order: certain findings before warnings, causes before
    consequences (the verdict priority), then each finding's own order; duplicates once. None when
    every seed judged ``nan_scale`` broke because its env handed back a non-finite value (a NaN
    sensor): no knob repairs that, and the other findings only describe what it broke."""
    if env_broke(verdicts):
        return []
    findings = [f for v in verdicts.values() for f in v.get("findings", [])]
    findings.sort(key=lambda f: (not f.get("certain", True), rank(str(f.get("kind")))))
    out: list[dict[str, Any]] = []
    for f in findings:
        for p in f.get("patches") or []:
            item = {"patch": p["patch"], "why": p.get("why", ""), "source": f["kind"]}
            if all(c["patch"] != item["patch"] for c in out):
                out.append(item)
    return out


def env_broke(verdicts: Mapping[Any, Mapping[str, Any]]) -> bool:
    """Every ``nan_scale`` seed's finding says the env's own output was non-finite (and one is)."""
    found = [
        any(k.startswith("env_nonfinite_") for k in f.get("evidence", {}))
        for v in verdicts.values()
        if v.get("verdict") == "nan_scale"
        for f in v.get("findings", [])
        if f.get("kind") == "nan_scale" and f.get("certain", True)
    ]
    return bool(found) and all(found)


def menu(
    hyperparams: Mapping[str, Any], defaults: Mapping[str, Any], continuous: bool, on_policy: bool
) -> list[dict[str, Any]]:
    """Every knob change repair may try, for the random baseline (and crashes without findings):
    the same kinds of change the detectors advise, minus those the config already has
    (``defaults``: the algorithm's constructor defaults, for knobs the config leaves out)."""
    default_lr = float(defaults.get("learning_rate", 3e-4))
    lr = initial_rate(hyperparams, default_lr)
    items: list[tuple[str, dict[str, Any]]] = [
        ("lr/3", {"learning_rate": float(f"{lr / 3:.3g}")}),
        ("lr/10", {"learning_rate": float(f"{lr / 10:.3g}")}),
        ("normalize_reward", {"normalize": {"reward": True}}),
        ("weight_decay", {"weight_decay": 0.0}),
    ]
    if on_policy:
        items += [
            ("clip", {"max_grad_norm": 0.5}),
            ("vf_coef", {"vf_coef": 0.5}),
            ("ent_coef_0", {"ent_coef": 0.0}),
            ("ent_coef", {"ent_coef": 0.01}),
            ("value_gain", {"init_gains": {"value": 1.0}}),
            ("policy_gain", {"init_gains": {"policy": 0.01}}),
            ("normalize_advantage", {"normalize_advantage": True}),
            ("target_kl", {"target_kl": None}),  # offered only where the config sets one
            ("clip_range_vf", {"clip_range_vf": None}),  # likewise
        ]
    if continuous:
        items.append(("log_std_bounds", {"log_std_bounds": [-5, 2]}))
    own = advice.own_optimizer(defaults)
    # where the config named another optimizer (the findings advise it for plain SGD at a rate of 1 or more)
    if hyperparams.get("optimizer", own) != own:
        items.append(("own_optimizer", {"optimizer": own, "learning_rate": default_lr}))
    gamma = hyperparams.get("gamma", defaults.get("gamma"))
    if isinstance(gamma, (int, float)) and gamma >= LONG_HORIZON_GAMMA:  # as stuck_value_loss advises
        items.append(("gamma", {"gamma": 0.99}))
    out = []
    for name, patch in items:
        if not _has({**_KNOB_DEFAULTS, **defaults, **hyperparams}, patch):
            out.append({"patch": patch, "why": f"menu: {name}", "source": "menu", "name": name})
    return out


def _has(hyperparams: Mapping[str, Any], patch: Mapping[str, Any]) -> bool:
    """The config already holds every value of ``patch``."""
    applied = apply_patch(hyperparams, patch)
    return all(_same(applied.get(k), hyperparams.get(k)) for k in patch)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    return bool(a == b)


def menu_facts(algo: str, env: Mapping[str, Any]) -> tuple[dict[str, Any], bool, bool]:
    """What the menu depends on: the algorithm's defaults, whether the env's actions are continuous
    and whether the algorithm is on-policy."""
    from sweeps import algos
    from sweeps.envs import env_factory

    one = env_factory(dict(env))()
    continuous = type(one.action_space).__name__ == "Box"
    one.close()
    return constructor_defaults(algos.load_class(algo)), continuous, algos.info(algo).on_policy


def patch_problem(raw_spec: Mapping[str, Any], hyperparams: Mapping[str, Any], patch: Mapping[str, Any]) -> str | None:
    """Why ``hyperparams`` with ``patch`` would not validate as a spec (e.g. a knob the algorithm
    lacks), or None. ``raw_spec``: the sweep's spec as data; its space is dropped."""
    from sweeps.errors import SpecError
    from sweeps.spec import from_dict

    raw = dict(raw_spec, hyperparams=apply_patch(hyperparams, patch), space={}, trials=1)
    try:
        from_dict(raw, source="repair")
    except SpecError as exc:
        return "; ".join(f"{i.path}: {i.message}" for i in exc.issues)
    return None


def constructor_defaults(algo_class: type) -> dict[str, Any]:
    """An algorithm's keyword defaults (``learning_rate``, ``ent_coef``, ``max_grad_norm``, ...)."""
    import inspect

    return {
        name: p.default
        for name, p in inspect.signature(algo_class).parameters.items()
        if p.default is not inspect.Parameter.empty and isinstance(p.default, (int, float, str, bool))
    }


# --- one trial's plan ------------------------------------------------------------------------------
@dataclass
class RepairSettings:
    max_attempts: int = 2
    confirm: bool = True  # confirm a passing attempt on fresh seeds before calling it repaired
    strategy: str = "findings"  # or "random": the benchmark's baseline
    budget: int | None = None  # the most repair seed runs (auto repair: the sweep's own size)
    seeds: list[int] | None = None  # re-train on these instead of the trial's seeds
    rng_seed: int = 0


@dataclass
class Attempt:
    number: int  # 1-based
    patch: dict[str, Any]  # the whole patch over the failing config
    added: dict[str, Any]  # what this attempt added to the previous one
    why: str
    source: str  # the finding class the patch came from, or "random"/"menu"
    verdicts: dict[int, str] = field(default_factory=dict)
    returns: dict[int, float] = field(default_factory=dict)
    crashed: list[int] = field(default_factory=list)
    offered: list[dict[str, Any]] = field(default_factory=list)  # the patches this attempt's findings carry
    confirm_offered: list[dict[str, Any]] = field(default_factory=list)  # ... and its fresh seeds' findings
    env_broke: bool = False  # its findings say the env handed back non-finite values (see env_broke)
    trial: int | None = None  # its Optuna trial, once told
    run_id: str = ""
    verdict: str = ""
    confirm: dict[str, Any] | None = None  # {seeds, verdicts, returns, mean_return, score, safe}
    result: str = ""  # why it passed or not
    state: dict[str, Any] = field(default_factory=dict)  # the driver's record of its seeds

    @property
    def mean_return(self) -> float | None:
        return statistics.fmean(self.returns.values()) if self.returns else None

    def to_dict(self) -> dict[str, Any]:
        out = {
            "attempt": self.number,
            "patch": self.patch,
            "why": self.why,
            "source": self.source,
            "verdict": self.verdict,
            "verdicts": dict(sorted(self.verdicts.items())),
            "returns": {s: round(r, 4) for s, r in sorted(self.returns.items())},
            "mean_return": None if self.mean_return is None else round(self.mean_return, 4),
            "result": self.result,
            "trial": self.trial,
        }
        if self.confirm is not None:
            out["confirm"] = self.confirm
        return out


@dataclass
class Plan:
    """Repairing one failing trial; the driver asks it what to run next and tells it what came back."""

    origin: int
    params: dict[str, Any]  # the failing trial's sampled values, by dotted name
    verdict: str  # its failure class ("crashed" for an unclassified crash)
    returns: dict[int, float]  # its seeds' evaluation returns, where any finished
    seeds: list[int]
    fresh: list[int]  # confirmation seeds, never used by the sweep
    candidates: list[dict[str, Any]]
    max_attempts: int
    strategy: str = "findings"
    menu: list[dict[str, Any]] = field(default_factory=list)
    rng_seed: int = 0
    attempts: list[Attempt] = field(default_factory=list)
    status: str = "pending"  # pending | repaired | failed | budget | interrupted
    message: str = ""
    check: Callable[[dict[str, Any]], str | None] | None = None  # why a patch cannot be applied, or None
    context: dict[str, Any] = field(default_factory=dict)  # the driver's: Optuna params, MLflow run
    accepted: Attempt | None = None
    skipped: list[str] = field(default_factory=list)  # patches refused by ``check``, and why
    env_broke: bool = False  # the failing trial's findings say its env handed back non-finite values
    # it ended saying the env's own output is at fault (a reward that never varies, non-finite values
    # after ordinary actions), which no knob reaches: "fix the env"
    fix_env: bool = False
    _tried: list[dict[str, Any]] = field(default_factory=list)

    @property
    def baseline(self) -> float | None:
        """The failing config's mean return, which a repair must reach; None when no seed returned."""
        return statistics.fmean(self.returns.values()) if self.returns else None

    @property
    def repaired(self) -> Attempt | None:
        return self.accepted

    def accept(self, attempt: Attempt) -> None:
        """A passing attempt without confirmation (``confirm: false``)."""
        self.accepted = attempt
        self.finish(
            "repaired",
            f"attempt {attempt.number} ({describe(attempt.patch)}) is healthy on seeds "
            f"{self.seeds} (not confirmed on fresh seeds)",
        )

    def _usable(self, patch: dict[str, Any]) -> bool:
        problem = self.check(patch) if self.check else None
        if problem and f"{describe(patch)}: {problem}" not in self.skipped:
            self.skipped.append(f"{describe(patch)}: {problem}")
        return problem is None

    def next_attempt(self) -> Attempt | None:
        """The next attempt to run, or None (and ``status``/``message`` say why) when there is none."""
        if self.verdict in _NOT_KNOBS and not self.attempts:
            self.finish("failed", _NOT_KNOBS[self.verdict])
            return None
        if len(self.attempts) >= self.max_attempts:
            self.finish("failed", *self._exhausted())
            return None
        last = self.attempts[-1] if self.attempts else None
        if last is not None and last.env_broke:
            self.finish(
                "failed",
                f"not repaired: attempt {last.number} ({describe(last.patch)}) showed the env itself hands back "
                "non-finite values after ordinary actions; no knob repairs that: fix the env",
                fix_env=True,
            )
            return None
        chosen = self._extend(last) if last is not None else None
        if chosen is None:
            chosen = self._fresh_candidate()
        if chosen is None:
            self.finish("failed", *self._nothing_left())
            return None
        patch, added, why, source = chosen
        self._tried.append(patch)
        attempt = Attempt(len(self.attempts) + 1, patch, added, why, source)
        self.attempts.append(attempt)
        return attempt

    def _nothing_left(self) -> tuple[str, bool]:
        """Why no candidate is left, and whether that says to fix the env."""
        if self.verdict == "degenerate_reward":
            lead = "not repaired: every patch was tried; " if self.attempts else "not repairable with knobs: "
            return lead + _DEGENERATE, True
        if self.attempts or self.strategy != "findings" or self.candidates:
            return "no patch left to try: every candidate was tried", False
        return f"not repairable with knobs: the {self.verdict} findings carry no knob patch" + (
            " (the env handed back non-finite values after ordinary actions: fix the env)" if self.env_broke else ""
        ), self.env_broke

    def _extend(self, last: Attempt) -> tuple[dict, dict, str, str] | None:
        """After a failing attempt (or a failed confirmation): keep its patch and add one more, from
        the findings of the seeds that failed (or at random)."""
        if last.confirm is not None:
            if last.confirm["safe"] or all(v == "healthy" for v in last.confirm["verdicts"].values()):
                return None  # fresh seeds that were not evaluated: nothing says what to add
            offered = last.confirm_offered
        elif not last.verdicts or all(v == "healthy" for v in last.verdicts.values()):
            return None  # healthy seeds that returned too little: the patch goes
        else:
            offered = last.offered
        if self.strategy == "random":
            options = [
                m
                for m in self.menu
                if not any(k in last.patch for k in m["patch"]) and self._usable(merge(last.patch, m["patch"]))
            ]
            pick = self._rng(len(self.attempts)).choice(options) if options else None
        else:
            pick = next(
                (
                    p
                    for p in offered
                    if not any(k in last.patch for k in p["patch"])
                    and merge(last.patch, p["patch"]) not in self._tried
                    and self._usable(merge(last.patch, p["patch"]))
                ),
                None,
            )
        if pick is None:
            return None
        patch = merge(last.patch, pick["patch"])
        return patch, pick["patch"], pick["why"], pick.get("source", "random")

    def _fresh_candidate(self) -> tuple[dict, dict, str, str] | None:
        if self.strategy == "random":
            options = [m for m in self.menu if m["patch"] not in self._tried and self._usable(m["patch"])]
            if not options:
                return None
            pick = self._rng(len(self.attempts)).choice(options)
            return pick["patch"], pick["patch"], pick["why"], "random"
        pool = self.candidates or (
            [m for m in self.menu if m.get("name") in _CRASH_MENU] if self.verdict == "crashed" else []
        )
        found: dict[str, Any] | None = next(
            (c for c in pool if c["patch"] not in self._tried and self._usable(c["patch"])), None
        )
        if found is None:
            return None
        return found["patch"], found["patch"], found["why"], found.get("source", "menu")

    def _rng(self, salt: int) -> random.Random:
        # reproducible draws for a baseline, not secrets
        return random.Random(self.rng_seed * 1000 + self.origin * 31 + salt)  # noqa: S311

    def passes(self, attempt: Attempt) -> tuple[bool, str]:
        """Whether an attempt's seeds make it a repair (before confirmation), and why not."""
        if attempt.crashed:
            return False, f"seed(s) {attempt.crashed} crashed"
        bad = {s: v for s, v in attempt.verdicts.items() if v != "healthy"}
        if bad:
            return False, "still " + ", ".join(sorted(set(bad.values()))) + f" on seed(s) {sorted(bad)}"
        if len(attempt.returns) < len(self.seeds):
            return False, "not every seed was evaluated"
        base, mean = self.baseline, attempt.mean_return
        if base is not None and mean is not None and mean < base - 1e-9 * max(1.0, abs(base)):
            return False, f"healthy but returns {mean:.4g} < the failing config's {base:.4g}"
        return True, "healthy on every seed"

    def _exhausted(self) -> tuple[str, bool]:
        """Why no attempt is left, and whether that says to fix the env: a last attempt healthy on
        the trial's seeds but not on fresh ones is said as such (the patch worked there; the failing
        verdict's own limits do not apply)."""
        text = f"no repair within {self.max_attempts} attempt(s)"
        last = self.attempts[-1]
        if last.confirm is not None and not last.confirm["safe"]:
            failed = sorted({v for v in last.confirm["verdicts"].values() if v != "healthy"}) or ["not evaluated"]
            return (
                f"{text}; attempt {last.number} ({describe(last.patch)}) was healthy on seeds {self.seeds} "
                f"but not on fresh seeds {self.fresh} ({', '.join(failed)})"
            ), False
        if self.verdict == "degenerate_reward":
            return f"{text}; {_DEGENERATE}", True
        return text, False

    def confirmed(
        self,
        attempt: Attempt,
        verdicts: dict[int, str],
        returns: dict[int, float],
        judged: Mapping[Any, Mapping[str, Any]] | None = None,
    ) -> bool:
        """Record ``attempt``'s run on the fresh seeds: their verdict names, returns and (``judged``)
        whole verdicts, whose findings' patches the next attempt may add (see ``_extend``)."""
        attempt.confirm_offered = candidates(judged or {})
        attempt.env_broke = attempt.env_broke or env_broke(judged or {})
        ok = (
            all(v == "healthy" for v in verdicts.values())
            and len(returns) == len(self.fresh)
            and len(verdicts) == len(self.fresh)
        )
        attempt.confirm = {
            "seeds": list(self.fresh),
            "verdicts": dict(sorted(verdicts.items())),
            "returns": {s: round(r, 4) for s, r in sorted(returns.items())},
            "mean_return": round(statistics.fmean(returns.values()), 4) if returns else None,
            "score": _score(list(returns.values())),
            "safe": ok,
        }
        if ok:
            self.accepted = attempt
            self.finish(
                "repaired",
                f"attempt {attempt.number} ({describe(attempt.patch)}) is healthy on "
                f"seeds {self.seeds} and on fresh seeds {self.fresh}",
            )
        return ok

    def finish(self, status: str, message: str, fix_env: bool = False) -> None:
        if self.status == "pending":
            self.status, self.message, self.fix_env = status, message, fix_env

    def to_dict(self) -> dict[str, Any]:
        fixed = self.repaired
        return {
            "trial": self.origin,
            "status": self.status,
            "message": self.message,
            "fix_env": self.fix_env,
            "strategy": self.strategy,
            "verdict_before": self.verdict,
            "returns_before": {s: round(r, 4) for s, r in sorted(self.returns.items())},
            "mean_return_before": None if self.baseline is None else round(self.baseline, 4),
            "verdict_after": fixed.verdict if fixed else (self.attempts[-1].verdict if self.attempts else None),
            "patch": fixed.patch if fixed else None,
            "mean_return_after": round(fixed.mean_return, 4) if fixed and fixed.mean_return is not None else None,
            "repaired_trial": fixed.trial if fixed else None,
            "confirm": fixed.confirm if fixed else None,
            "attempts_used": len(self.attempts),
            "attempts": [a.to_dict() for a in self.attempts],
            **({"not_applicable": self.skipped} if self.skipped else {}),
        }


def _score(values: list[float]) -> float | None:
    return round(robust_score(values), 4) if values else None


def fresh_seeds(used: list[int], n: int) -> list[int]:
    """``n`` seeds above every seed the sweep used (the confirmation seeds of export and repair)."""
    top = max(used) if used else 0
    return list(range(top + 1, top + 1 + n))


def finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


# --- the summary ---------------------------------------------------------------------------------
def write_summary(path: Path, plans: list[Plan]) -> dict[str, Any]:
    """Write ``repairs.yaml``: this run's plans replace earlier entries for the same trial and
    strategy; the others are kept. Returns the document written."""
    from sweeps._yaml import dump_yaml, load_yaml

    entries: dict[tuple[int, str], dict[str, Any]] = {}
    if path.is_file():
        for item in (load_yaml(path.read_text()) or {}).get("repairs", []):
            entries[(int(item["trial"]), item.get("strategy", "findings"))] = item
    for plan in plans:
        entries[(plan.origin, plan.strategy)] = plan.to_dict()
    items = [entries[k] for k in sorted(entries)]
    totals: dict[str, int] = {}
    for item in items:
        totals[item["status"]] = totals.get(item["status"], 0) + 1
    doc = {
        "rule": "repaired: every seed healthy, mean return at least the failing config's, then every fresh "
        "seed healthy",
        "totals": totals,
        "repairs": items,
    }
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(dump_yaml(doc))
    tmp.replace(path)
    return doc


def render(plans: list[Plan]) -> list[str]:
    """One line per repaired or failed trial, then its attempts."""
    lines = []
    for plan in plans:
        before = "-" if plan.baseline is None else f"{plan.baseline:.4g}"
        head = f"trial {plan.origin} ({plan.verdict}, return {before}): {plan.status}"
        fixed = plan.repaired
        if fixed is not None:
            after = "-" if fixed.mean_return is None else f"{fixed.mean_return:.4g}"
            confirm = fixed.confirm
            fresh = f"; fresh seeds {confirm['seeds']}: score {confirm['score']}" if confirm else ""
            head += f" by {describe(fixed.patch)} -> healthy, return {after}{fresh} (trial {fixed.trial})"
        else:
            head += f": {plan.message}"
        lines.append(head)
        for a in plan.attempts:
            lines.append(
                f"  attempt {a.number}: {describe(a.patch)} -> {a.verdict or '-'}; {a.result}"
                + (
                    ""
                    if a.confirm is None
                    else f"; fresh seeds {'healthy' if a.confirm['safe'] else a.confirm['verdicts']}"
                )
            )
    return lines
