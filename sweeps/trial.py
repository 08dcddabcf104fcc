"""One (config, seed): build the env and the model, train, evaluate. Runs inside a worker.

Read top to bottom, :func:`run` is the whole life of a trial seed. It talks to the outside
only through ``reporter`` (metrics while training) and its return value (the evaluation).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from sweeps import algos, envs


@dataclass(frozen=True)
class TrialConfig:
    """Everything a worker needs to run one seed of one trial: plain, picklable data."""

    sweep: str
    trial: int
    seed: int
    algo: str
    policy: str
    env: dict[str, Any]
    hyperparams: dict[str, Any]
    total_timesteps: int
    eval_episodes: int = 10
    eval_every: int = 0  # evaluate every N env steps too, reported as PERIODIC_RETURN (0: only at the end)
    eval_seed: int = 1_000_000
    deterministic: bool = True
    torch_threads: int = 1
    device: str = "auto"  # resolved in the worker: see resolve_device
    stability: dict[str, Any] = field(default_factory=dict)  # {enabled, stop_on, thresholds}

    @property
    def key(self) -> tuple[int, int]:
        return (self.trial, self.seed)


@dataclass
class TrialResult:
    mean_return: float
    std_return: float
    episode_returns: list[float]
    timesteps: int
    train_seconds: float
    eval_seconds: float
    verdict: dict[str, Any] | None = None  # stability.Verdict.to_dict()
    stopped_by: str | None = None  # the failure class that ended training early
    context: dict[str, Any] = field(default_factory=dict)
    plot_png: bytes | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # where it ran: {"device", "cuda_visible_devices"}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Reporter(Protocol):
    def metrics(self, step: int, values: dict[str, float]) -> None: ...


def resolve_device(requested: str, gpu_assigned: bool | None = None) -> str:
    """The torch device for a seed. ``auto``: CUDA when this worker was given a GPU (by Ray, or by a
    ``CUDA_VISIBLE_DEVICES`` naming one) and torch can use it; the CPU otherwise."""
    if requested != "auto":
        return requested
    import torch

    if gpu_assigned is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
        gpu_assigned = bool(visible) and not visible.startswith("-")
    return "cuda" if gpu_assigned and torch.cuda.is_available() else "cpu"


def run(config: TrialConfig, reporter: Reporter) -> TrialResult:
    import torch

    from sweeps import knobs

    torch.set_num_threads(config.torch_threads)
    device = resolve_device(config.device)
    if device.startswith("cuda"):  # a reused worker: this seed's peak, not an earlier one's
        torch.cuda.reset_peak_memory_stats()
    algo_class = algos.load_class(config.algo)
    built = knobs.build(algo_class, config.policy, config.hyperparams)
    env = knobs.wrap_train_env(envs.make_vec_env(config.env, config.env.get("n_envs", 1), seed=config.seed), built)
    try:  # the training env is closed however the seed ends: healthy, unstable or crashed
        return _train(config, reporter, built, env, device)
    finally:
        env.close()


def _train(config: TrialConfig, reporter: Reporter, built: Any, env: Any, device: str) -> TrialResult:
    import numpy as np

    from sweeps import knobs

    model = built.algo_class(built.policy, env, seed=config.seed, device=device, verbose=0, **built.algo_kwargs)
    model.set_logger(
        _logger_to(reporter, train_lags=algos.info(config.algo).on_policy, min_gap=config.total_timesteps // MAX_POINTS)
    )
    watch = _stability_callback(config, built.max_grad_norm, built.reward_scale)
    callback: Any = watch
    if config.eval_every > 0:
        from stable_baselines3.common.callbacks import CallbackList

        wrap = lambda venv: knobs.wrap_eval_env(venv, built, env)  # noqa: E731
        callback = CallbackList([watch, _periodic_eval(config, reporter, wrap)])

    started = time.perf_counter()
    try:
        model.learn(total_timesteps=config.total_timesteps, log_interval=1, callback=callback)
    except Exception as exc:
        # A crash the detectors recognise (torch's "Expected parameter scale ...") ends the
        # seed with that verdict instead of as a crash; anything else is a real crash.
        verdict = watch.finish(exc)
        if verdict.verdict == "healthy":
            raise
        return _unstable(config, model, watch, time.perf_counter() - started, device)
    finally:
        watch.finish()  # no-op after a normal end or a crash already recorded
        model.logger.output_formats[0].flush()  # the last update always reaches MLflow
    train_seconds = time.perf_counter() - started
    if watch.stopped_by is not None:  # a doomed trial: evaluating it would only spend time
        return _unstable(config, model, watch, train_seconds, device)

    started = time.perf_counter()
    returns = evaluate(model, config, lambda venv: knobs.wrap_eval_env(venv, built, env))
    eval_seconds = time.perf_counter() - started
    return TrialResult(
        mean_return=float(np.mean(returns)),
        std_return=float(np.std(returns)),
        episode_returns=[float(r) for r in returns],
        timesteps=int(model.num_timesteps),
        train_seconds=train_seconds,
        eval_seconds=eval_seconds,
        verdict=_verdict(watch),
        context=watch.history.context,
        plot_png=_plot(watch, config),
        extra=_placement(device),
    )


# The metric a seed's periodic evaluations are reported as (step: a multiple of eval_every).
PERIODIC_RETURN = "eval/periodic_return"


def _periodic_eval(config: TrialConfig, reporter: Reporter, wrap: Any) -> Any:
    """Every ``eval_every`` env steps, the final evaluation's deterministic episodes on its
    separately seeded env; reported at the multiple of ``eval_every`` just passed, so that every
    seed of a trial reports the same steps whatever its rollout size."""
    import numpy as np
    from stable_baselines3.common.callbacks import BaseCallback

    class PeriodicEval(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next_at = config.eval_every

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_at and self.num_timesteps < config.total_timesteps:
                at = self.num_timesteps - self.num_timesteps % config.eval_every
                returns = evaluate(self.model, config, wrap)
                reporter.metrics(at, {PERIODIC_RETURN: float(np.mean(returns))})
                self.next_at = at + config.eval_every
            return True

    return PeriodicEval()


def _stability_callback(config: TrialConfig, max_grad_norm: float | None, reward_scale: float) -> Any:
    from stability.callback import StabilityCallback
    from stability.thresholds import Thresholds

    settings = config.stability
    thresholds = Thresholds(settings.get("thresholds") or {}, source="spec stability.thresholds")
    stop_on = settings.get("stop_on", ()) if settings.get("enabled", True) else ()
    keys = settings.get("override_keys")
    return StabilityCallback(
        thresholds,
        stop_on=stop_on,
        max_grad_norm=max_grad_norm,
        reference_return=settings.get("reference_return"),
        reward_scale=reward_scale,
        **({"override_keys": keys} if keys else {}),
    )


def _unstable(config: TrialConfig, model: Any, watch: Any, train_seconds: float, device: str) -> TrialResult:
    """A seed ended by its verdict: no evaluation, no score."""
    return TrialResult(
        mean_return=float("nan"),
        std_return=float("nan"),
        episode_returns=[],
        timesteps=int(model.num_timesteps),
        train_seconds=train_seconds,
        eval_seconds=0.0,
        verdict=_verdict(watch),
        stopped_by=watch.stopped_by or watch.verdict.verdict,
        context=watch.history.context,
        plot_png=_plot(watch, config),
        extra=_placement(device),
    )


# Where a CUDA program looks for an MPS daemon; the local backend sets it in its workers (backends/_mps)
MPS_PIPE_VAR = "CUDA_MPS_PIPE_DIRECTORY"


def _placement(device: str) -> dict[str, str]:
    """Where the seed trained: its torch device and the GPUs its worker was allowed to see, and on a
    GPU the most memory torch's allocator held there (MiB): what decides how many jobs share one."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = {"device": device} | ({"cuda_visible_devices": visible} if visible else {})
    if device.startswith("cuda"):
        import torch

        where["gpu_peak_mib"] = f"{torch.cuda.max_memory_reserved() / 2**20:.0f}"
        where["cuda_mps"] = "told" if os.environ.get(MPS_PIPE_VAR) else "no"
    return where


def _verdict(watch: Any) -> dict[str, Any]:
    """The verdict, with when it was reached (``detected_step``) next to when the failure began."""
    return watch.verdict.to_dict() | {"detected_step": watch.detected_step, "first_certain": watch.first_certain}


def _plot(watch: Any, config: TrialConfig) -> bytes | None:
    """The signals PNG with the onset marked, for a seed whose verdict is a failure (rendering
    costs ~0.5 s, and importing matplotlib ~32 MiB that the worker keeps for good: drawn for every
    seed with a finding, the warnings of healthy seeds put the worker 1.15x over a plain training
    loop's memory). A healthy seed's curves are in MLflow's charts, its warnings in
    ``verdict.json``, and ``rlsweep diagnose RUN --plot`` draws any run. Rendered here: the worker
    has the history; the driver only stores the bytes."""
    if watch.verdict.verdict == "healthy":
        return None
    import tempfile
    from pathlib import Path

    from stability.plot import plot_signals

    with tempfile.TemporaryDirectory() as folder:
        path = plot_signals(
            watch.history,
            watch.verdict,
            Path(folder) / "signals.png",
            title=f"{config.sweep} trial {config.trial} seed {config.seed}",
        )
        return path.read_bytes()


def evaluate(model: Any, config: TrialConfig, wrap: Any = None) -> list[float]:
    """Deterministic returns on a single env seeded apart from every training seed.

    ``wrap`` adds the training env's normalisation (frozen statistics) to the eval env.
    """
    from stable_baselines3.common.evaluation import evaluate_policy

    eval_env = envs.make_vec_env(config.env, 1, seed=config.eval_seed)
    if wrap is not None:
        eval_env = wrap(eval_env)
    try:
        returns, _ = evaluate_policy(
            model,
            eval_env,
            n_eval_episodes=config.eval_episodes,
            deterministic=config.deterministic,
            return_episode_rewards=True,
        )
    finally:
        eval_env.close()
    return list(returns) if isinstance(returns, list) else [float(returns)]


# Curves sent to MLflow per seed, at most: A2C dumps every 5 steps, and storing 40 keys x 4000
# dumps costs the driver more than the worker spends training. The detectors in the worker
# still see every update; MLflow gets a dump every total_timesteps / MAX_POINTS steps, and the last.
MAX_POINTS = 500


def _logger_to(reporter: Reporter, train_lags: bool = True, min_gap: int = 0) -> Any:
    from stable_baselines3.common.logger import KVWriter, Logger

    class ReporterWriter(KVWriter):
        """Receives every SB3 dump. On-policy, ``train/*`` and ``stability/*`` values in a dump belong
        to the update that ran right after the previous dump (SB3 dumps before ``train()``), so they get that dump's
        step. Off-policy, the latest ``train()`` ran just before the dump: they get its own step."""

        def __init__(self) -> None:
            self.previous_step = 0
            self.sent_step: int | None = None
            self.held: list[tuple[int, dict[str, float]]] = []

        def write(self, key_values: dict, key_excluded: dict, step: int = 0) -> None:
            now: dict[str, float] = {}
            update: dict[str, float] = {}
            for key, value in key_values.items():
                if key in _REDUNDANT:
                    continue
                number = _as_number(value)
                if number is not None:
                    (update if key.startswith(("train/", "stability/")) else now)[key] = number
            items = [(self.previous_step if train_lags else step, update), (step, now)]
            self.previous_step = step
            if self.sent_step is not None and step - self.sent_step < min_gap:
                self.held = items  # thinned out, unless it turns out to be the last dump
                return
            self.held = items
            self.flush()
            self.sent_step = step

        def flush(self) -> None:
            for at, values in self.held:
                if values:
                    reporter.metrics(at, values)
            self.held = []

        def close(self) -> None:
            self.flush()

    return Logger(folder=None, output_formats=[ReporterWriter()])


# Restate the step or the clock: not worth MLflow's ~0.1 ms per stored point.
_REDUNDANT = frozenset({"time/iterations", "time/total_timesteps", "time/time_elapsed"})


def _as_number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
