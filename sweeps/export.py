"""``rlsweep export``: the configs a sweep showed to be safe, ready to use in SB3 or rl-zoo3.

A config is *safe* when every one of its seeds trained to the end, was evaluated, and was judged
``healthy``; safe configs are ranked by :data:`sweeps.results.SCORE_RULE`. Configs evaluated on
fewer than 3 seeds are flagged. ``--confirm-seeds N`` re-trains the top configs on N seeds the
sweep never used and reports both scores. The file also gives *safe ranges*: per swept
hyperparameter, the interval of sampled values where no trial failed, and what failed outside it.

Loading an exported config (``--format sb3``)::

    from sweeps.export import load_sb3
    algo_class, kwargs, wrap = load_sb3("results/NAME/safe_configs.yaml", rank=1)
    model = algo_class(env=wrap(make_vec_env("Pendulum-v1", n_envs=4)), **kwargs)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sweeps import algos, backends, knobs, schedules
from sweeps.configs import stability_settings, trial_configs
from sweeps.errors import UsageError
from sweeps.ranges import safe_ranges
from sweeps.repair import fresh_seeds
from sweeps.results import FEW_SEEDS, SweepResults, TrialRecord
from sweeps.scoring import SCORE_RULE, robust_score
from sweeps.spec import BackendSpec
from sweeps.trial import TrialResult

FORMATS = ("sb3", "zoo")


# --- the configs ----------------------------------------------------------------------------
def config_of(results: SweepResults, trial: TrialRecord) -> tuple[dict[str, Any], dict[str, Any]]:
    """The trial's full hyperparameters and env, as a spec would write them."""

    _, configs = trial_configs(results.spec, trial.number, trial.params, [0], {}, patch=trial.patch)
    return configs[0].hyperparams, configs[0].env


def entry(results: SweepResults, rank: int, trial: TrialRecord, fmt: str) -> dict[str, Any]:
    hyperparams, env = config_of(results, trial)
    seeds = sorted(trial.returns)
    out: dict[str, Any] = {
        "rank": rank,
        "trial": trial.number,
        "score": round(trial.score, 4),
        "seeds": seeds,
        "returns": {s: round(trial.returns[s], 4) for s in seeds},
        "failure_rate": 0.0,
        "few_seeds": len(seeds) < FEW_SEEDS,
        "params": trial.params,
        "hyperparams": hyperparams,
        "env": env,
    }
    if trial.repair_of is not None:  # a failing trial's config with a knob patch, found by rlsweep repair
        out["repaired"] = {"from_trial": trial.repair_of, "patch": trial.patch, "confirm": trial.confirm}
    if fmt == "sb3":
        out["sb3"] = sb3_section(results.spec.algo, results.spec.policy, hyperparams, env)
    return out


def sb3_section(algo: str, policy: str, hyperparams: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    """What constructs the model: class, policy (importable path when rlsweep's policy is needed),
    keyword arguments in YAML form, and the env wrappers the knobs add."""
    built = knobs.build(algos.load_class(algo), policy, hyperparams)
    info = algos.info(algo)
    policy_ref = built.policy if isinstance(built.policy, str) else _dotted(built.policy)
    section: dict[str, Any] = {
        "class": f"{info.module}.{info.class_name}",
        "policy": policy_ref,
        "kwargs": _yaml_form(built.algo_kwargs),
    }
    if built.algo_class is not algos.load_class(algo):
        section["class_note"] = (
            "learning_rate.critic needs rlsweep's algorithm variant: load with sweeps.export.load_sb3"
        )
    section["env"] = {
        "id": env["id"],
        "n_envs": env.get("n_envs", 1),
        "kwargs": env.get("kwargs", {}),
        "VecNormalize": built.normalize,
        "reward_scale": built.reward_scale,
    }
    return section


def load_sb3(path: str | Path, rank: int = 1) -> tuple[type, dict[str, Any], Callable[[Any], Any]]:
    """``(algo_class, kwargs, wrap)`` for an exported config: ``algo_class(env=wrap(venv), **kwargs)``.

    ``kwargs`` includes ``policy`` (the class when rlsweep's bounded policy is needed); ``wrap``
    adds the reward scaling and VecNormalize the config trained with.
    """
    from sweeps._yaml import load_yaml

    doc = load_yaml(Path(path).read_text())
    configs = doc.get("configs") or doc.get("rlsweep", {}).get("configs") or []
    chosen = next((c for c in configs if c["rank"] == rank), None)
    if chosen is None:
        raise UsageError(f"{path}: no config of rank {rank} (ranks: {[c['rank'] for c in configs]})")
    algo = doc.get("algo") or doc["rlsweep"]["algo"]
    policy = doc.get("policy") or doc.get("rlsweep", {}).get("policy", "MlpPolicy")
    built = knobs.build(algos.load_class(algo), policy, chosen["hyperparams"])
    return (
        built.algo_class,
        {"policy": built.policy, **built.algo_kwargs},
        lambda venv: knobs.wrap_train_env(venv, built),
    )


def _dotted(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _yaml_form(value: Any) -> Any:
    """SB3 kwargs with live objects written as YAML can hold them."""
    if isinstance(value, schedules.LinearSchedule):
        return (
            schedules.text(value.initial)
            if value.final == 0
            else {"schedule": "linear", "initial": value.initial, "final": value.final}
        )
    if isinstance(value, type):
        return _dotted(value)
    if isinstance(value, dict):
        return {k: _yaml_form(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_yaml_form(v) for v in value]
    return value


# --- confirmation on fresh seeds --------------------------------------------------------------
def confirm(results: SweepResults, trials: list[TrialRecord], n_seeds: int, workers: int) -> dict[int, dict]:
    """Re-train ``trials`` on ``n_seeds`` seeds the sweep never used; per trial its returns,
    verdicts and score. Runs on local worker processes; writes to no store."""
    fresh = fresh_seeds(results.spec.seed_list, n_seeds)
    jobs = []
    for t in trials:
        jobs += trial_configs(results.spec, t.number, t.params, fresh, stability_settings(results.spec), patch=t.patch)[
            1
        ]
    out: dict[int, dict] = {t.number: {"seeds": fresh, "returns": {}, "verdicts": {}} for t in trials}
    with backends.make(
        BackendSpec(kind="local"), max(1, min(workers, len(jobs))), warm_imports=(algos.info(results.spec.algo).module,)
    ) as be:
        pool = backends.Pool(be, results.spec.backend.max_failures)  # the driver's scheduling and retries
        pool.add(jobs)
        while pool.busy:
            pool.fill()
            for event in pool.poll(timeout=0.5):
                if isinstance(event, backends.Retried):
                    continue
                number, seed = event.key
                if isinstance(event.payload, backends.Failure):
                    out[number]["verdicts"][seed] = "crashed"
                elif isinstance(event.payload, TrialResult):
                    result = event.payload
                    out[number]["verdicts"][seed] = (result.verdict or {}).get("verdict", "healthy")
                    if not result.stopped_by:
                        out[number]["returns"][seed] = round(result.mean_return, 4)
    for data in out.values():
        data["returns"] = dict(sorted(data["returns"].items()))
        data["verdicts"] = dict(sorted(data["verdicts"].items()))
        values = list(data["returns"].values())
        ok = len(values) == len(fresh) and all(v == "healthy" for v in data["verdicts"].values())
        data["safe"] = ok
        data["score"] = round(robust_score(values), 4) if values else None
    return out


# --- writing ------------------------------------------------------------------------------------
def export(
    name: str, output: str | None = None, top: int = 5, fmt: str = "sb3", confirm_seeds: int = 0, workers: int = 2
) -> tuple[Path, dict[str, Any]]:
    """Write the export file; returns its path and the document written."""
    from sweeps import results as results_module
    from sweeps._yaml import dump_yaml

    if fmt not in FORMATS:
        raise UsageError(f"--format: '{fmt}' is not one of {', '.join(FORMATS)}")
    res = results_module.load(name)
    if fmt == "zoo" and ":" in res.spec.env.id:
        raise UsageError(
            f"--format zoo: rl-zoo3 trains registered Gymnasium ids only; sweep '{name}' uses the entry "
            f"point '{res.spec.env.id}'. Use --format sb3, or register the env and sweep that id."
        )
    safe = res.safe(with_repairs=True)
    counts = Counter(t.label for t in res.finished)
    doc: dict[str, Any] = {
        "sweep": name,
        "algo": res.spec.algo,
        "policy": res.spec.policy,
        "env_id": res.spec.env.id,
        "total_timesteps": res.spec.total_timesteps,
        "format": fmt,
        "score_rule": SCORE_RULE,
        "safe_rule": "every seed trained to the end, was evaluated, and was judged healthy",
        "trials": {
            "finished": len(res.finished),
            "safe": len(safe) - len(res.repaired()),
            "by_verdict": dict(counts),
            "repaired": len({t.repair_of for t in res.repaired()}),
        },
        "configs": [entry(res, rank, t, fmt) for rank, t in enumerate(safe[:top], 1)],
        "safe_ranges": safe_ranges(res),
    }
    if res.spec.objective.directions:
        doc["pareto_front"] = {
            "objectives": {
                n: "maximize" if up else "minimize"
                for n, up in zip(res.spec.objective.names, res.spec.objective.maximize, strict=True)
            },
            "configs": [
                {
                    "trial": t.number,
                    "values": dict(zip(res.spec.objective.names, t.values or [], strict=True)),
                    "params": t.params,
                }
                for t in res.pareto()
            ],
        }
    if confirm_seeds and safe:
        checked = confirm(res, [t for t in safe[:top] if t.confirm is None], confirm_seeds, workers)
        checked |= {t.number: t.confirm for t in safe[:top] if t.confirm is not None}  # a repair's own check
        for item in doc["configs"]:
            item["confirm"] = checked[item["trial"]]
    path = Path(output) if output else res.spec.storage_dir / "safe_configs.yaml"
    text = dump_yaml(doc) if fmt == "sb3" else zoo_text(res, doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path, doc


def zoo_text(res: SweepResults, doc: dict[str, Any]) -> str:
    """rl-zoo3's hyperparams layout: ``ENV_ID: {...}`` for the best safe config (what
    ``python -m rl_zoo3.train --algo ALGO --env ENV_ID -conf FILE`` reads), the full export under
    ``rlsweep:`` (rl-zoo3 ignores other top-level keys), and comments for knobs rl-zoo3 lacks."""
    from sweeps._yaml import dump_yaml

    env_id = res.spec.env.id
    head = [
        f"# rl-zoo3 hyperparameters exported by rlsweep from sweep '{res.spec.name}'",
        f"# train: python -m rl_zoo3.train --algo {res.spec.algo.lower()} --env {env_id} -conf THIS_FILE",
    ]
    body: dict[str, Any] = {}
    if doc["configs"]:
        from sweeps._yaml import yaml_block

        best = doc["configs"][0]
        zoo, notes = zoo_hyperparams(
            res.spec.algo, res.spec.policy, best["hyperparams"], best["env"], res.spec.total_timesteps
        )
        head.append(f"# best safe config: trial {best['trial']}, score {best['score']} ({SCORE_RULE})")
        head += [f"# {note}" for note in notes]
        head.append(yaml_block({env_id: zoo}).rstrip())
        for item in doc["configs"]:
            item["zoo"], item["zoo_notes"] = zoo_hyperparams(
                res.spec.algo, res.spec.policy, item["hyperparams"], item["env"], res.spec.total_timesteps
            )
    else:
        head.append("# no safe config: every finished trial failed on at least one seed (see rlsweep.trials)")
    body["rlsweep"] = doc
    return "\n".join(head) + "\n" + dump_yaml(body)


_ZOO_POLICY_KW = (
    "net_arch",
    "activation_fn",
    "ortho_init",
    "log_std_init",
    "optimizer_class",
    "optimizer_kwargs",
    "log_std_bounds",
    "init_gains",
    "lstm_hidden_size",
    "n_lstm_layers",
    "shared_lstm",
    "enable_critic_lstm",
    "full_std",
    "squash_output",
    "use_expln",
    "share_features_extractor",
)


def zoo_hyperparams(
    algo: str, policy: str, hyperparams: dict[str, Any], env: dict[str, Any], total_timesteps: int
) -> tuple[dict[str, Any], list[str]]:
    """One config in rl-zoo3's layout, and notes on what rl-zoo3 cannot express."""
    built = knobs.build(algos.load_class(algo), policy, hyperparams)
    notes: list[str] = []
    out: dict[str, Any] = {"n_timesteps": float(total_timesteps), "n_envs": int(env.get("n_envs", 1))}
    if isinstance(built.policy, str):
        out["policy"] = built.policy
    elif "<locals>" not in built.policy.__qualname__:  # importable by its dotted path
        out["policy"] = _dotted(built.policy)
        notes.append(
            f"policy {out['policy']}: rlsweep's policy (log_std bounds / init gains); rlsweep must be importable"
        )
    else:
        out["policy"] = policy
        notes.append(
            f"log_std_bounds for {algo}: no rl-zoo3 equivalent (rlsweep builds its policy class at run time); "
            "trained here with SB3's own log_std clamp"
        )
    if env.get("kwargs"):
        out["env_kwargs"] = env["kwargs"]
    if built.normalize:
        out["normalize"] = "dict(" + ", ".join(f"{k}={v!r}" for k, v in built.normalize.items() if k != "gamma") + ")"
        notes.append("normalize: rl-zoo3 sets VecNormalize's gamma to the algorithm's gamma")
    if built.reward_scale != 1.0:
        notes.append(f"reward_scale: {built.reward_scale:g} has no rl-zoo3 equivalent (not applied by rl-zoo3)")
    if built.algo_class is not algos.load_class(algo):
        notes.append("learning_rate.critic: no rl-zoo3 equivalent; the critic trains at the actor's rate there")
    for key, value in built.algo_kwargs.items():
        if key == "policy_kwargs":
            parts = [f"{k}={_python(v)}" for k, v in value.items() if k in _ZOO_POLICY_KW]
            out["policy_kwargs"] = "dict(" + ", ".join(parts) + ")"
        elif key == "critic_learning_rate":
            continue
        elif isinstance(value, schedules.LinearSchedule):
            out[key] = schedules.text(value.initial)
            if value.final != 0:
                notes.append(
                    f"{key}: linear {value.initial:g} -> {value.final:g} in rlsweep; rl-zoo3's lin_ schedules "
                    f"end at 0, so this file uses lin_{value.initial:g}"
                )
        elif isinstance(value, float) and math.isinf(value):
            out[key] = value
        else:
            out[key] = _yaml_form(value)
    return out, notes


def _python(value: Any) -> str:
    """A policy_kwargs value as the Python rl-zoo3 evaluates (it has ``th`` and ``nn`` in scope)."""
    if isinstance(value, type):
        path = _dotted(value)
        for prefix, alias in (("torch.nn.modules.activation.", "nn."), ("torch.optim.", "th.optim.")):
            if path.startswith(prefix):
                return alias + value.__name__
        return path
    if isinstance(value, dict):
        return "dict(" + ", ".join(f"{k}={_python(v)}" for k, v in value.items()) + ")"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_python(v) for v in value) + "]"
    return repr(value)
