"""The config a run was trained with, as the facts the detectors read (the run's *context*).

A plain TensorBoard log holds the signals but not the settings that produced them: its gamma,
its reward normalisation, its gradient clip. Without them a detector cannot name a long horizon
as a cause, and its advice may repeat a value the run already had (SB3's ``max_grad_norm`` of
0.5, say). :func:`read_config` reads them from what users keep beside their logs:

* an SB3 model file (``.zip``): its ``data`` entry, JSON, holds every hyperparameter the model
  had, and its action space; nothing in the file is unpickled;
* rl-zoo3's ``config.yml`` (a ``collections.OrderedDict`` of ``[key, value]`` pairs), one entry
  of an rl-zoo3 hyperparameter file (``CartPole-v1: {...}``), or any YAML mapping of SB3
  keyword arguments, with rl-zoo3's spellings (``policy_kwargs`` as a ``"dict(...)"`` string,
  ``normalize`` as a bool, a mapping or a string of one) and rlsweep's (``normalize: {obs,
  reward}``, ``weight_decay``, ``reward_scale``). Where the algorithm is known (an ``algo`` key
  or ``--algo``), the algorithm's own defaults stand for the keys the file leaves out: rl-zoo3
  writes only what differs from them.

Every problem raises :class:`LogReadError` with one paragraph naming the file, the key and what
is allowed.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import math
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from stability import advice, references
from stability._numbers import is_real
from stability._yaml import read_exponents_as_floats
from stability.readers._errors import LogReadError

# SB3 keyword arguments the detectors read, with the type each must have
_NUMBERS = (
    "gamma",
    "gae_lambda",
    "ent_coef",
    "vf_coef",
    "max_grad_norm",
    "target_kl",
    "learning_rate",
    "clip_range_vf",
)
_INTEGERS = ("n_steps",)
_FLAGS = ("normalize_advantage", "use_sde")
# numbers a config may give as a schedule string instead (then no number is read for them)
_SCHEDULABLE = ("learning_rate", "clip_range_vf")
# rl-zoo3's algorithm names (and rlsweep's, SB3's class names in any case) -> SB3's class name
_ALGOS = {
    "a2c": "A2C",
    "ppo": "PPO",
    "ppo_lstm": "RecurrentPPO",
    "recurrentppo": "RecurrentPPO",
    "sac": "SAC",
    "td3": "TD3",
    "ddpg": "DDPG",
    "dqn": "DQN",
    "qrdqn": "QRDQN",
    "tqc": "TQC",
    "trpo": "TRPO",
    "crossq": "CrossQ",
}
_CONTRIB = frozenset({"RecurrentPPO", "QRDQN", "TQC", "TRPO", "CrossQ"})
_ZOO_TAG = "tag:yaml.org,2002:python/object/apply:collections.OrderedDict"


def algo_name(name: str, source: str = "--algo") -> str:
    """SB3's class name for an algorithm named as rl-zoo3, rlsweep or SB3 name it."""
    key = str(name).strip().lower().replace("-", "_")
    if key not in _ALGOS:
        raise LogReadError(
            f"{source}: unknown algorithm {name!r}. Allowed: {', '.join(sorted(set(_ALGOS.values())))} "
            f"(or rl-zoo3's names: {', '.join(sorted(_ALGOS))})",
            source=source,
        )
    return _ALGOS[key]


def read_config(path: str | Path, algo: str | None = None) -> dict[str, Any]:
    """The run's context from an SB3 model ``.zip`` or a YAML config (see the module's text);
    ``algo`` names the algorithm where the file does not (its defaults fill the keys left out)."""
    file = Path(path)
    if algo is not None:
        algo_name(algo)  # a misspelt --algo is refused before the file is read
    if not file.is_file():
        raise LogReadError(
            f"{file}: no such file. Give the run's SB3 model (.zip), rl-zoo3's config.yml or a YAML "
            "mapping of its hyperparameters",
            source=str(file),
        )
    if zipfile.is_zipfile(file):
        return _from_model(file, algo)
    try:
        text = file.read_text(encoding="utf-8")
        loaded = yaml.load(text, Loader=_ZooLoader)  # noqa: S506 (a SafeLoader)
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise LogReadError(
            f"{file}: neither an SB3 model (.zip) nor readable YAML ({exc}). Give the run's SB3 model, "
            "rl-zoo3's config.yml or a YAML mapping of its hyperparameters",
            source=str(file),
        ) from None
    config, env_id = _one_config(loaded, file)
    # an rl-zoo3 hyperparameter file is keyed by the env id: its registered threshold, if any
    return context_from_hyperparams(config, algo, str(file)) | references.named(env_id)


def context_from_hyperparams(config: Mapping[str, Any], algo: str | None = None, source: str = "") -> dict[str, Any]:
    """The context of a mapping of SB3 keyword arguments (rl-zoo3's and rlsweep's spellings
    accepted); an ``algo`` key or the ``algo`` argument adds that algorithm's defaults."""
    where = source or "hyperparams"
    named = algo if algo is not None else config.get("algo")
    ctx: dict[str, Any] = {}
    if named is not None:
        ctx["algo"] = algo_name(named, f"{where}: algo" if algo is None else "--algo")
        ctx.update(_defaults(ctx["algo"]))
    for key in _NUMBERS + _INTEGERS + _FLAGS:
        if key in config and config[key] is not None:
            value = _typed(config[key], key, where)
            if value is not None:
                ctx[key] = value
            else:  # set, but not to a number (a schedule): no default stands for it either
                ctx.pop(key, None)
    if "normalize" in config:
        ctx.update(_normalize(config["normalize"], where))
    kwargs = _policy_kwargs(config.get("policy_kwargs"), where)
    for start in (kwargs.get("log_std_init"), config.get("log_std_init")):  # SB3's place, then rlsweep's knob
        if is_real(start):
            ctx["log_std_init"] = float(start)
    options = kwargs.get("optimizer_kwargs") or {}
    if kwargs.get("optimizer_class") is not None:
        ctx["optimizer"] = str(kwargs["optimizer_class"]).rsplit(".", 1)[-1]
        if not (isinstance(options, Mapping) and "weight_decay" in options):
            # torch's own default for the class: AdamW decays by 0.01, the others not at all
            ctx["weight_decay"] = 0.01 if ctx["optimizer"] == "AdamW" else 0.0
    decay = options.get("weight_decay") if isinstance(options, Mapping) else None
    if is_real(decay):
        ctx["weight_decay"] = float(decay)
    if is_real(config.get("weight_decay")):
        ctx["weight_decay"] = float(config["weight_decay"])  # rlsweep's knob
    if isinstance(config.get("optimizer"), str):
        ctx["optimizer"] = config["optimizer"]  # rlsweep's knob, as written
    momentum = options.get("momentum") if isinstance(options, Mapping) else None
    if is_real(momentum):
        ctx["momentum"] = float(momentum)  # SGD's (and RMSprop's) momentum, as torch takes it
    if config.get("log_std_bounds") is not None:  # rlsweep's knob: the Gaussian's log std clamped inside
        ctx["log_std_bounds"] = _bounds(config["log_std_bounds"], where)
    if config.get("reward_scale") is not None:  # rlsweep's knob: every reward x this before the algorithm
        scale = _typed(config["reward_scale"], "reward_scale", where)
        if not scale > 0:
            raise LogReadError(f"{where}: reward_scale is {scale!r}; it must be a positive number", source=where)
        ctx["reward_scale"] = scale
    return ctx


def _bounds(value: Any, where: str) -> list[float]:
    """``log_std_bounds`` as the sweeps' knob takes it: ``[low, high]``, two numbers, low under high."""
    pair = list(value) if isinstance(value, (list, tuple)) else []
    numbers = [float(v) for v in pair if is_real(v) and math.isfinite(v)]
    if len(pair) != 2 or len(numbers) != 2 or not numbers[0] < numbers[1]:
        raise LogReadError(
            f"{where}: log_std_bounds is {value!r}; it must be [low, high], two numbers with low under high "
            "(the Gaussian's log std is clamped inside them)",
            source=where,
        )
    return numbers


# --- CleanRL's own record -------------------------------------------------------------------
# CleanRL's argument names for what SB3 calls otherwise (the rest are spelt alike)
_CLEANRL_NAMES = {"num_steps": "n_steps", "norm_adv": "normalize_advantage"}


def context_from_cleanrl_table(text: str, source: str = "hyperparameters") -> dict[str, Any]:
    """The context of the ``|param|value|`` table CleanRL's scripts write into their TensorBoard
    log (the text summary ``hyperparameters``); empty when the text is no such table. A learning
    rate annealed to 0 (``anneal_lr``) is a schedule: the log holds the rate of each update."""
    rows: dict[str, Any] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] in ("param", "") or set(cells[0]) <= {"-"}:
            continue
        try:
            rows[cells[0]] = ast.literal_eval(cells[1])
        except (ValueError, SyntaxError):
            rows[cells[0]] = cells[1]
    config = {_CLEANRL_NAMES.get(k, k): v for k, v in rows.items()}
    if config.get("anneal_lr"):
        config.pop("learning_rate", None)
    try:
        context = context_from_hyperparams(
            {k: v for k, v in config.items() if k in (*_NUMBERS, *_INTEGERS, *_FLAGS, "weight_decay")}, source=source
        )
    except LogReadError:
        return {}  # a value of another type than SB3's: the table is someone else's, not CleanRL's
    # CleanRL records its returns by RecordEpisodeStatistics, right over the env
    return context | references.named(rows.get("env_id"))


# --- SB3 model files ---------------------------------------------------------------------
def _from_model(file: Path, algo: str | None) -> dict[str, Any]:
    try:
        with zipfile.ZipFile(file) as archive:
            data = json.loads(archive.read("data"))
    except (KeyError, zipfile.BadZipFile, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LogReadError(
            f"{file}: a zip file, but not an SB3 model (no readable 'data' entry: {exc}). Give the file "
            "model.save() wrote, rl-zoo3's config.yml or a YAML mapping of the run's hyperparameters",
            source=str(file),
        ) from None
    if not isinstance(data, dict):
        raise LogReadError(f"{file}: its 'data' entry is not a mapping; not an SB3 model", source=str(file))
    # the model's own values, not defaults: every hyperparameter an SB3 model has is saved
    ctx: dict[str, Any] = {}
    named = algo_name(algo) if algo is not None else _model_algo(data)
    if named is not None:
        ctx["algo"] = named
    for key in _NUMBERS + _INTEGERS + _FLAGS:
        try:
            value = _typed(data.get(key), key, str(file))
        except LogReadError:
            continue  # saved pickled (a schedule, SAC's "auto" coefficient): not a value to read
        if value is not None:
            ctx[key] = value
    ctx.update(_action_space(data.get("action_space")))
    return ctx


def _model_algo(data: dict[str, Any]) -> str | None:
    """The algorithm, from the attributes only it saves (the file does not name its class)."""
    policy = data.get("policy_class")
    module = str(policy.get("__module__", "")) if isinstance(policy, dict) else ""
    if "clip_range" in data:
        return "RecurrentPPO" if "recurrent" in module else "PPO"
    if "n_steps" in data:
        return "A2C"
    if "target_entropy" in data:
        return "SAC"
    if "policy_delay" in data:
        return "TD3"
    if "exploration_fraction" in data:
        return "DQN"
    return None


def _action_space(space: Any) -> dict[str, Any]:
    """The action space's kind, and the uniform policy's entropy where it is discrete, from the
    JSON attributes SB3 saves beside the pickled space."""
    if not isinstance(space, dict):
        return {}
    kind = str(space.get(":type:", "")).rsplit(".", 1)[-1].rstrip("'>")
    if not kind:
        return {}
    out: dict[str, Any] = {"action_space": kind, "continuous": kind == "Box"}
    try:
        if kind == "Discrete":
            out["entropy_max"] = math.log(int(space["n"]))
        elif kind == "MultiDiscrete":
            out["entropy_max"] = float(sum(math.log(int(n)) for n in re.findall(r"\d+", str(space["nvec"]))))
        elif kind == "MultiBinary":
            out["entropy_max"] = float(math.prod(space["_shape"]) * math.log(2))
    except (KeyError, ValueError, TypeError):
        pass  # an attribute SB3 did not save as JSON: the kind alone
    return out


# --- YAML configs -----------------------------------------------------------------------
class _ZooLoader(yaml.SafeLoader):
    """A safe loader that also reads rl-zoo3's ``config.yml``: PyYAML writes its OrderedDict as a
    Python-object tag over ``[key, value]`` pairs, which the plain safe loader refuses."""


def _ordered_dict(loader: yaml.SafeLoader, node: yaml.Node) -> dict[str, Any]:
    items = loader.construct_sequence(node, deep=True)
    pairs = items[0] if len(items) == 1 and isinstance(items[0], list) else items
    return {str(k): v for k, v in pairs}


_ZooLoader.add_constructor(_ZOO_TAG, _ordered_dict)
read_exponents_as_floats(_ZooLoader)  # a gradient clip of 1e-8 is a number, not the string '1e-8'


def _one_config(loaded: Any, file: Path) -> tuple[Mapping[str, Any], str | None]:
    """The mapping of hyperparameters and the env id it is keyed by: the file's own (no env id),
    or the one entry of an rl-zoo3 hyperparameter file keyed by env id."""
    if not isinstance(loaded, Mapping) or not loaded:
        raise LogReadError(
            f"{file}: expected a mapping of the run's hyperparameters (gamma, n_steps, ...), got "
            f"{type(loaded).__name__}",
            source=str(file),
        )
    known = set(_NUMBERS + _INTEGERS + _FLAGS) | {"normalize", "policy_kwargs", "algo", "n_envs", "policy"}
    if known & set(loaded):
        return loaded, None
    entries = [k for k, v in loaded.items() if isinstance(v, Mapping)]
    if len(entries) == 1:
        return loaded[entries[0]], str(entries[0])
    raise LogReadError(
        f"{file}: no hyperparameter at the top level, and "
        + (
            f"{len(entries)} env entries ({', '.join(map(str, entries[:5]))}): keep the run's one"
            if entries
            else "no env entry"
        )
        + ". Expected rl-zoo3's config.yml, one env's entry of an rl-zoo3 hyperparameter file, or a "
        "mapping of SB3 keyword arguments",
        source=str(file),
    )


def _typed(value: Any, key: str, where: str) -> Any:
    if key in _SCHEDULABLE and isinstance(value, str):
        return None  # a schedule (rl-zoo3's lin_X): the log holds the rate; the advice reads numbers only
    if key == "max_grad_norm" and value == "off":
        return math.inf  # rlsweep's spelling of no clipping (SB3 then clips at an infinite norm)
    if key in _FLAGS:
        if isinstance(value, bool):
            return value
        kind = "true or false"
    elif is_real(value) and math.isfinite(value):
        return int(value) if key in _INTEGERS else float(value)
    elif key == "ent_coef" and isinstance(value, str) and value.startswith("auto"):
        return None  # SAC's learnt coefficient
    else:
        kind = "an integer" if key in _INTEGERS else "a finite number"
    raise LogReadError(f"{where}: {key} is {value!r}; it must be {kind}", source=where)


def _normalize(value: Any, where: str) -> dict[str, bool]:
    """rl-zoo3's ``normalize`` (true: VecNormalize's defaults, observations and rewards; a mapping
    or its string of VecNormalize's arguments) or rlsweep's (``{obs, reward}``)."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise LogReadError(
                f"{where}: normalize is {value!r}; expected true, false, or a mapping such as "
                "{'norm_obs': True, 'norm_reward': False}",
                source=where,
            ) from None
    if isinstance(value, bool) or value is None:
        return {"norm_obs": bool(value), "norm_reward": bool(value)}
    if isinstance(value, Mapping):
        obs = value.get("norm_obs", value.get("obs", True))
        reward = value.get("norm_reward", value.get("reward", "obs" not in value))
        return {"norm_obs": bool(obs), "norm_reward": bool(reward)}
    raise LogReadError(f"{where}: normalize is {value!r}; expected true, false or a mapping", source=where)


def _policy_kwargs(value: Any, where: str) -> dict[str, Any]:
    """``policy_kwargs`` as a mapping; rl-zoo3 writes it as the text of a ``dict(...)`` call,
    read here without evaluating it (a name such as ``nn.ReLU`` stays its dotted text)."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        try:
            parsed = _literal(ast.parse(value.strip(), mode="eval").body)
        except (SyntaxError, ValueError):
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    raise LogReadError(
        f"{where}: policy_kwargs is {value!r}; expected a mapping or rl-zoo3's text of one, such as "
        '"dict(log_std_init=-2, net_arch=[64, 64])"',
        source=where,
    )


def _literal(node: ast.expr) -> Any:
    """A literal, a dotted name (as its text), or a ``dict(...)`` call of keyword arguments."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        return {k.arg: _literal(k.value) for k in node.keywords if k.arg is not None}
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Attribute):
        return f"{_literal(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return ast.literal_eval(node)


def _defaults(algo: str) -> dict[str, Any]:
    """The algorithm's defaults for the keys the detectors read (its constructor's signature);
    empty where the algorithm's package is not installed."""
    try:  # heavy (torch): only when a config names an algorithm
        package = importlib.import_module("sb3_contrib" if algo in _CONTRIB else "stable_baselines3")
    except ImportError:
        return {}
    cls = getattr(package, algo, None)
    if cls is None:
        return {}
    out: dict[str, Any] = {}
    defaults = {name: param.default for name, param in inspect.signature(cls.__init__).parameters.items()}
    for name, default in defaults.items():
        if name in _NUMBERS and is_real(default):
            out[name] = float(default)
        elif name in _INTEGERS and isinstance(default, int) and not isinstance(default, bool):
            out[name] = default
        elif name in _FLAGS and isinstance(default, bool):
            out[name] = default
    if "learning_rate" in out:  # read from the signature above: what the callback records as the default
        out["default_learning_rate"] = out["learning_rate"]
    # every SB3 optimizer starts without weight decay (A2C's RMSprop included); a file that sets
    # policy_kwargs.optimizer_class or optimizer_kwargs says otherwise
    out["weight_decay"] = 0.0
    out["default_optimizer"] = advice.own_optimizer(defaults)  # as the callback records it
    out["optimizer"] = {"rmsprop": "RMSprop", "adam": "Adam"}[out["default_optimizer"]]
    # and nothing normalised: SB3 does not wrap the env itself, and rl-zoo3 writes normalize when set
    out["norm_reward"], out["norm_obs"] = False, False
    return out
