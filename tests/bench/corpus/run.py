"""Run the labelled failure corpus: every case of ``conf/corpus/cases.yaml`` x its seeds.

    python tests/bench/corpus/run.py [--out results/corpus] [--jobs 2] [--only ID ...]

Each run writes ``OUT/runs/CASE__sSEED/``: ``run.json`` (the StabilityCallback's history, the
crash text, the privileged measurements of ``measure.py``) and ``tb/`` (the run's plain
TensorBoard log, which the ``diagnose`` path reads). Finished runs are skipped, so an
interrupted corpus resumes. Labels and scores come from ``labels.py`` and ``score.py``,
offline, from these files.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path[:0] = [str(REPO), str(HERE)]

import measure  # noqa: E402

from sweeps._yaml import load_yaml  # noqa: E402

CASES = REPO / "conf" / "corpus" / "cases.yaml"
SNAPSHOTS = 20  # policy snapshots per run (plus one before training)
ROLLOUT_STEPS = 3000  # env steps of each fresh critic/return measurement


def load_cases(path: Path = CASES) -> list[dict[str, Any]]:
    data = load_yaml(path.read_text())  # as a sweep file is read: 1e-08 is a number
    envs, cases = data["envs"], []
    # a case's id names its runs' folders: two cases under one id would share (and skip) runs
    ids = [case["id"] for case in data["cases"]]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"{path}: case ids used twice: {', '.join(repeated)}")
    for case in data["cases"]:
        base = envs[case["env"]]
        merged = {
            "seeds": data["seeds"],
            "path": "sb3",
            **case,
            "env_name": case["env"],
            "env": {**base["env"], **case.get("env_overrides", {})},
        }
        cases.append(merged)
    return cases


def run_id(case: dict[str, Any], seed: int) -> str:
    return f"{case['id']}__s{seed}"


# --- SB3 runs ------------------------------------------------------------------------------------
def _probe_obs(env_spec: dict[str, Any], seed: int) -> Any:
    """PROBES states visited by a uniform-random policy on a separately seeded env (raw obs)."""
    from sweeps import envs

    venv = envs.make_vec_env(env_spec, 1, seed=seed + 777_000)
    venv.action_space.seed(seed)
    obs = venv.reset()
    kept: list[Any] = []
    for t in range(measure.PROBES * 4):
        obs, _, _, _ = venv.step(np.array([venv.action_space.sample()]))
        if t % 4 == 0:
            kept.append(obs)
    venv.close()
    if isinstance(kept[0], dict):
        return {k: np.concatenate([o[k] for o in kept]) for k in kept[0]}
    return np.concatenate(kept)


def _recurrent(policy: Any) -> bool:
    return hasattr(policy, "lstm_actor")


def _zero_states(policy: Any, n: int) -> Any:
    import torch as th
    from sb3_contrib.common.recurrent.type_aliases import RNNStates

    def zeros(lstm: Any) -> tuple[Any, Any]:
        shape = (lstm.num_layers, n, lstm.hidden_size)
        return th.zeros(shape), th.zeros(shape)

    critic = policy.lstm_critic if policy.lstm_critic is not None else policy.lstm_actor
    return RNNStates(zeros(policy.lstm_actor), zeros(critic))


class SB3Probe:
    """Snapshots, critic fit and returns for an SB3 model (PPO, A2C, RecurrentPPO, SAC)."""

    def __init__(self, model: Any, case: dict[str, Any], seed: int, built: Any) -> None:
        self.model, self.case, self.seed, self.built = model, case, seed, built
        self.probe = _probe_obs(case["env"], seed)
        from stable_baselines3.common.vec_env import unwrap_vec_normalize

        self.vecnorm = unwrap_vec_normalize(model.get_env())

    def _norm_obs(self, obs: Any) -> Any:
        if self.vecnorm is not None and self.vecnorm.norm_obs:
            return self.vecnorm.normalize_obs(obs)
        return obs

    def _norm_reward(self, reward: np.ndarray) -> np.ndarray:
        if self.vecnorm is not None and self.vecnorm.norm_reward:
            return self.vecnorm.normalize_reward(reward)
        return reward

    def snapshot(self, step: int) -> measure.Snapshot:
        import torch as th
        from torch.distributions import Categorical

        policy = self.model.policy
        params = [p.detach().double() for p in policy.parameters()]
        norm = float(math.sqrt(sum(float((p * p).sum()) for p in params)))
        finite = all(bool(th.isfinite(p).all()) for p in params)
        try:
            dist = self._distribution()
        except ValueError:  # torch refuses NaN/inf distribution parameters: that is the measurement
            return measure.Snapshot(
                step, "categorical", probs=[np.full((1, 2), np.nan)], param_norm=norm, params_finite=False
            )
        if isinstance(dist, list):
            return measure.Snapshot(
                step,
                "categorical",
                probs=[d.probs.numpy().astype(np.float64) for d in dist],
                param_norm=norm,
                params_finite=finite,
            )
        if isinstance(dist, Categorical):
            return measure.Snapshot(
                step,
                "categorical",
                probs=[dist.probs.numpy().astype(np.float64)],
                param_norm=norm,
                params_finite=finite,
            )
        return measure.Snapshot(
            step,
            "normal",
            mean=dist.loc.numpy().astype(np.float64),
            std=dist.scale.expand_as(dist.loc).numpy().astype(np.float64),
            param_norm=norm,
            params_finite=finite,
        )

    def _distribution(self) -> Any:
        import torch as th
        from torch.distributions import Normal

        policy = self.model.policy
        with th.no_grad():
            obs, _ = policy.obs_to_tensor(self._norm_obs(self.probe))
            n = len(next(iter(obs.values()))) if isinstance(obs, dict) else len(obs)
            if _recurrent(policy):
                dist, _ = policy.get_distribution(obs, _zero_states(policy, n).pi, th.ones(n))
                dist = dist.distribution
            elif hasattr(policy, "actor") and hasattr(policy.actor, "get_action_dist_params"):
                mean, log_std, _ = policy.actor.get_action_dist_params(obs)
                dist = Normal(mean, log_std.exp())
            else:
                dist = policy.get_distribution(obs).distribution
        return dist

    def rollout(self) -> dict[str, Any]:
        import torch as th

        from sweeps import envs
        from sweeps.wrappers import ScaleReward

        policy, space = self.model.policy, self.model.action_space
        venv = envs.make_vec_env(self.case["env"], 1, seed=self.seed + 555_000)
        if self.built.reward_scale != 1.0:
            venv = ScaleReward(venv, self.built.reward_scale)
        off_policy = hasattr(policy, "actor") and hasattr(policy.actor, "get_action_dist_params")
        noise = _SdeNoise(self.model, venv)

        def step(obs: Any, state: Any, start: bool) -> tuple[np.ndarray, float, Any]:
            with th.no_grad():
                tensor, _ = policy.obs_to_tensor(obs)
                if off_policy:
                    action, _ = self.model.predict(obs, deterministic=False)
                    return action, math.nan, None
                if _recurrent(policy):
                    state = state if state is not None else _zero_states(policy, 1)
                    action, value, _, state = policy.forward(tensor, state, th.tensor([float(start)]))
                else:
                    action, value, _ = policy.forward(tensor)
            action = action.numpy()
            if hasattr(space, "low") and not getattr(policy, "squash_output", False):
                action = np.clip(action, space.low, space.high)
            return action, float(value.reshape(-1)[0]), state

        try:
            return measure.rollout(step, venv, ROLLOUT_STEPS, self._norm_obs, self._norm_reward, self.model.gamma)
        finally:
            noise.restore()
            venv.close()


class _SdeNoise:
    """gSDE's exploration noise, drawn as training draws it during a measurement rollout.

    A gSDE policy's action noise is a fixed matrix applied to its features, redrawn only when the
    algorithm calls ``reset_noise``: on-policy at the start of each ``n_steps`` rollout (and every
    ``sde_sample_freq`` steps when that is set), off-policy at each ``train_freq`` collection. A
    rollout that never redraws it measures one frozen draw for all its 3000 steps, a behaviour
    training never shows (an untrained MountainCarContinuous RecurrentPPO reaches the goal in
    most training episodes, and in none with one draw). The matrix training was using is put back
    afterwards, so a measurement in the middle of a rollout does not change the rest of it."""

    def __init__(self, model: Any, venv: Any) -> None:
        """Counts ``venv``'s steps (the rollout also asks the policy for the values of cut
        episodes' last observations, which are not steps) and draws before its first."""
        self.policy = model.policy
        holder = getattr(self.policy, "actor", self.policy)
        self.dist = getattr(holder, "action_dist", None)
        self.saved: dict[str, Any] = {}
        if not (getattr(model, "use_sde", False) and hasattr(self.dist, "exploration_mat")):
            return
        freq = int(getattr(model, "sde_sample_freq", -1))
        if freq <= 0:
            train_freq = getattr(model, "train_freq", None)
            freq = int(getattr(model, "n_steps", 0) or getattr(train_freq, "frequency", 1))
        every, taken, env_step = max(1, freq), 0, venv.step
        self.saved = {k: getattr(self.dist, k) for k in _SDE_STATE if hasattr(self.dist, k)}

        def step(actions: Any) -> Any:
            nonlocal taken
            out = env_step(actions)
            taken += 1
            if taken % every == 0:
                self.policy.reset_noise(1)
            return out

        venv.step = step
        self.policy.reset_noise(1)

    def restore(self) -> None:
        for key, value in self.saved.items():
            setattr(self.dist, key, value)


_SDE_STATE = ("weights_dist", "exploration_mat", "exploration_matrices")


def _label_callback(probe: SB3Probe, budget: int, record: dict[str, Any]) -> Any:
    from stable_baselines3.common.callbacks import BaseCallback

    marks = [int(budget * (k + 1) / SNAPSHOTS) for k in range(SNAPSHOTS)]
    marks_half = marks[SNAPSHOTS // 2 - 1]

    class Labeller(BaseCallback):
        def _on_training_start(self) -> None:
            record["snapshots"].append(probe.snapshot(0))
            record["rollouts"]["start"] = _safe_rollout(probe)

        def _on_step(self) -> bool:
            while marks and self.num_timesteps >= marks[0]:
                mark = marks.pop(0)
                record["snapshots"].append(probe.snapshot(self.num_timesteps))
                if mark == marks_half:
                    record["rollouts"]["half"] = _safe_rollout(probe)
            return True

    return Labeller()


def _safe_rollout(probe: SB3Probe) -> dict[str, Any]:
    """The probe's rollout on its own copy of torch's random state: the actions it samples and the
    gSDE noise it draws would otherwise shift every draw of the training that goes on after it, so
    that measuring a run would change the run."""
    import torch as th

    try:
        with th.random.fork_rng(devices=[]):
            return probe.rollout()
    except Exception as exc:  # a policy that produces NaN cannot be rolled out: that is a measurement too
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}


def build_sb3(case: dict[str, Any], seed: int) -> tuple[Any, Any, Any]:
    """The case's model on its training env for ``seed``, untrained: (model, env, built knobs)."""
    import torch

    from sweeps import algos, envs, knobs

    torch.set_num_threads(1)
    built = knobs.build(algos.load_class(case["algo"]), case["policy"], case.get("hyperparams", {}))
    env = knobs.wrap_train_env(envs.make_vec_env(case["env"], case["env"].get("n_envs", 1), seed=seed), built)
    model = built.algo_class(built.policy, env, seed=seed, device="cpu", verbose=0, **built.algo_kwargs)
    return model, env, built


def run_sb3(case: dict[str, Any], seed: int, out: Path) -> dict[str, Any]:
    from stable_baselines3.common.logger import configure

    from stability.callback import StabilityCallback

    model, env, built = build_sb3(case, seed)
    model.set_logger(configure(str(out / "tb"), ["tensorboard"]))
    # as a sweep's trial makes it (sweeps/trial.py): the reward_scale knob reaches the callback
    watch = StabilityCallback(
        max_grad_norm=built.max_grad_norm, reward_scale=built.reward_scale, **case.get("callback", {})
    )
    record: dict[str, Any] = {"snapshots": [], "rollouts": {}}
    probe = SB3Probe(model, case, seed, built)
    budget = int(case["total_timesteps"])
    error = None
    started = time.perf_counter()
    try:
        model.learn(total_timesteps=budget, callback=[watch, _label_callback(probe, budget, record)], log_interval=1)
    except Exception as exc:
        error = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        watch.finish(exc)
    finally:
        watch.finish()
        model.logger.close()
    seconds = time.perf_counter() - started
    record["snapshots"].append(probe.snapshot(int(model.num_timesteps)))
    record["rollouts"]["end"] = _safe_rollout(probe)
    env.close()
    history = watch.history
    return {
        "history": {
            "steps": history.steps,
            "series": history.series,
            "context": history.context,
            "total_steps": history.total_steps,
            "error": history.error,
        },
        "error": error,
        "train_seconds": seconds,
        "timesteps": int(model.num_timesteps),
        "callback_verdict": watch.verdict.to_dict(),
        "stopped_by": watch.stopped_by,
        "measurements": _summarise(record, budget),
    }


def _summarise(record: dict[str, Any], budget: int) -> dict[str, Any]:
    """The privileged numbers the label rules read (``labels.py``)."""
    snaps: list[measure.Snapshot] = record["snapshots"]
    first = snaps[0]
    out: dict[str, Any] = {
        "snapshot_steps": [s.step for s in snaps],
        "kl_from_start": [measure.kl(first, s) for s in snaps],
        "kl_consecutive": [measure.kl(a, b) for a, b in zip(snaps, snaps[1:], strict=False)],
        "determinism": [measure.determinism(s) for s in snaps],
        "param_norm": [s.param_norm for s in snaps],
        "finite": [s.finite() for s in snaps],
        "kind": first.kind,
        "budget": budget,
        "std_max": [
            float(np.max(s.std)) if s.kind == "normal" and s.std is not None and s.std.size else None for s in snaps
        ],
        "std_min": [
            float(np.min(s.std)) if s.kind == "normal" and s.std is not None and s.std.size else None for s in snaps
        ],
    }
    out["rollouts"] = record["rollouts"]
    return out


# --- CleanRL-style script ------------------------------------------------------------------------
def run_cleanrl(case: dict[str, Any], seed: int, out: Path) -> dict[str, Any]:
    import cleanrl_probe

    return cleanrl_probe.run(case, seed, out, SNAPSHOTS, ROLLOUT_STEPS)


# --- driver --------------------------------------------------------------------------------------
def run_one(job: tuple[dict[str, Any], int, str]) -> str:
    case, seed, root = job
    out = Path(root) / "runs" / run_id(case, seed)
    if (out / "run.json").exists():
        return f"{run_id(case, seed)}: kept"
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        result = (run_cleanrl if case["path"] == "cleanrl" else run_sb3)(case, seed, out)
    except Exception:
        result = {"runner_error": traceback.format_exc()}
    result |= {
        "case": case["id"],
        "seed": seed,
        "class": case["class"],
        "mechanism": case["mechanism"],
        "env": case["env_name"],
        "algo": case.get("algo", "cleanrl-ppo"),
        "path": case["path"],
        "wall_seconds": time.perf_counter() - started,
    }
    (out / "run.json").write_text(json.dumps(result, default=_jsonable))
    return f"{run_id(case, seed)}: {time.perf_counter() - started:.0f}s" + (
        " RUNNER ERROR" if "runner_error" in result else ""
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(type(value).__name__)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "results" / "corpus"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=None, help="case ids")
    parser.add_argument("--split", nargs="*", default=None, help="only the cases of these splits")
    args = parser.parse_args(argv)
    cases = [
        c
        for c in load_cases()
        if (not args.only or c["id"] in args.only) and (not args.split or c["split"] in args.split)
    ]
    jobs = [(case, seed, args.out) for case in cases for seed in case["seeds"]]
    # long jobs first, so the pool does not end on one straggler
    jobs.sort(key=lambda j: -(j[0].get("total_timesteps", 0) * (20 if j[0].get("algo") in ("SAC", "TD3") else 1)))
    ctx = mp.get_context("spawn")
    with ctx.Pool(args.jobs, maxtasksperchild=4) as pool:
        for line in pool.imap_unordered(run_one, jobs):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
