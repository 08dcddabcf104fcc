"""``StabilityCallback``: per-update stability signals and a running verdict for any SB3 run.

Usable in a plain SB3 script::

    from stability import StabilityCallback
    cb = StabilityCallback(stop_on=["nan_scale"])
    try:
        model.learn(100_000, callback=cb)
    except Exception as error:          # e.g. torch's "Expected parameter scale ..." ValueError
        cb.finish(error)
    print(cb.verdict.render())

After every update it reads what the algorithm recorded (``train/*``), adds what SB3 never
logs (log_std range, parameter finiteness, pre-clip gradient norm by role, advantage and
return spread, the critic's error against the discounted returns of the episodes its rollouts
finished, raw and normalised reward statistics, action overrides), writes those to the
SB3 logger as ``stability/NAME`` (so TensorBoard/CSV logs carry them) and appends the update
to :attr:`history`. SB3 records ``train/*`` after its log dump and never dumps the last
update; the callback captures every update as it is recorded, and dumps the last one itself.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.preprocessing import get_obs_shape

from stability import advice, references
from stability._numbers import is_real
from stability.gradients import GradNormMonitor
from stability.signals import PREFIX, SB3_KEYS, History, group_steps
from stability.thresholds import Thresholds
from stability.verdict import Judge, Verdict

# info keys by which common envs and wrappers say they replaced the agent's action.
OVERRIDE_KEYS = ("action_overridden", "overridden", "intervened", "intervention", "forced", "is_overridden")

# The ``train/*`` keys SB3 logs that carry a signal: their values are kept as the logger records them.
_TRAIN_KEYS = frozenset(key for key in SB3_KEYS if key.startswith("train/"))

# Signals the callback computes itself (everything else comes from ``train/*``).
OWN = (
    "ep_return",
    "ep_return_recent",
    "ep_length",
    "log_std_min",
    "log_std_max",
    "loc_abs_max",
    "params_finite",
    "update_ratio",
    "param_norm",
    "adv_std",
    "return_std",
    "return_rms",
    "critic_error",
    "critic_r2",
    "reward_mean",
    "reward_std",
    "reward_norm_std",
    "reward_distinct",
    "override_fraction",
)


class StabilityCallback(BaseCallback):
    """Collect stability signals after every update; classify; optionally stop doomed runs.

    :param thresholds: detector thresholds (default: the documented defaults).
    :param stop_on: failure classes that end training as soon as they are certain
        (``stuck_value_loss`` is certain only once training has ended: it never stops a run).
    :param on_update: called after each update with ``(step, signals, verdict)``.
    :param check_every: run the detectors at least every N updates. Each check reads the whole
        history, so checks thin out as it grows (every 2% of the updates so far at most), except
        that a non-finite value or a log_std past the warning range triggers one at once.
    :param min_update_steps: updates are grouped so that one recorded update spans at least this
        many env steps (default 256 on-policy, 1000 off-policy, at most 1% of the budget so a
        short run still gets ~100 records): A2C updates every 5-40 steps and
        off-policy algorithms every few, and per-update bookkeeping would cost more than 3% of their
        training. A group's ``train/*`` values are averaged (gradient-norm maxima kept); groups of
        PPO's usual 2048-step rollouts are single updates.
    :param grad_norms: record the pre-clip gradient norm (installs a :class:`GradNormMonitor`).
    :param override_keys: ``info`` keys by which an env says it replaced the agent's action (any
        truthy value counts); envs name this in their own ways.
    :param reference_return: the episode return at which the env counts as learnt (see
        :mod:`stability.references`); default: the training env's registered ``reward_threshold``
        where it has one and no wrapper over it may change the reward.
    :param reward_scale: what every reward was multiplied by after the episode recorder and before
        the algorithm (rlsweep's ``reward_scale`` knob; None or 1: not scaled, and not recorded): the
        critic's targets are the logged returns times this, and a tiny one is named as the policy's
        missing signal.
    """

    def __init__(
        self,
        thresholds: Thresholds | None = None,
        stop_on: Iterable[str] = (),
        on_update: Callable[[int, dict[str, float], Verdict], None] | None = None,
        check_every: int = 1,
        min_update_steps: int | None = None,
        grad_norms: bool = True,
        max_grad_norm: float | None = None,
        override_keys: Iterable[str] = OVERRIDE_KEYS,
        reference_return: float | None = None,
        reward_scale: float | None = None,
        verbose: int = 0,
    ) -> None:
        super().__init__(verbose)
        if check_every < 1:
            raise ValueError(f"check_every >= 1 must hold, but got check_every={check_every}")
        self.thresholds = thresholds or Thresholds()
        self.stop_on = frozenset(stop_on)
        unknown = self.stop_on - set(self.thresholds.known_verdicts())
        if unknown:
            raise ValueError(
                f"stop_on names unknown failure classes {sorted(unknown)}; "
                f"allowed: {', '.join(self.thresholds.known_verdicts())}"
            )
        self.on_update = on_update
        self.check_every = check_every
        self.min_update_steps = min_update_steps
        self.want_grad_norms = grad_norms
        self.max_grad_norm = max_grad_norm
        self.override_keys = tuple(override_keys)
        self._override_set = frozenset(self.override_keys)
        if reference_return is not None and not (
            isinstance(reference_return, (int, float)) and math.isfinite(reference_return)
        ):
            raise ValueError(f"reference_return must be a finite number, but got {reference_return!r}")
        self.reference_return = reference_return
        # what every reward was multiplied by before the algorithm and after the episode recorder
        # (rlsweep's reward_scale knob): the detectors read the logged returns in the critic's units
        if reward_scale is not None and not (
            is_real(reward_scale) and math.isfinite(reward_scale) and reward_scale > 0
        ):
            raise ValueError(f"reward_scale must be a positive finite number, but got {reward_scale!r}")
        self.reward_scale = reward_scale
        self.history = History()
        self.verdict = Verdict.empty()
        self._judge = Judge(self.thresholds)
        self.stopped_by: str | None = None
        self.first_certain: dict[str, int] = {}  # failure class -> env step at which it was first certain
        self._train: dict[str, list[float]] = {}  # this group's recorded train/* values
        self._rollout: dict[str, float] = {}
        self._update_step = 0
        self._last_commit = -1
        self._next_check = 0
        self._rollout_size = 0
        self._raw: list[np.ndarray] = []
        self._seen: list[np.ndarray] = []
        self._overrides = 0
        self._override_total = 0
        self._monitor: GradNormMonitor | None = None
        self._vecnorm: Any = None
        self._stop = False
        self._finished = False
        self._original_record: Any = None
        self._probe_obs: Any = None
        self._weights: _Weights | None = None  # the policy's parameters at the last commit
        self._episodes: EpisodeReturns | None = None  # on-policy: the critic against finished episodes
        self._recent_returns: list[float] = []  # returns of the episodes ended since the last commit

    # Parameter finiteness and the action mean are probed every PROBE_EVERY updates (and on any
    # non-finite loss): each probe costs a forward pass, which matters for A2C's tiny updates.
    PROBE_EVERY = 10

    # --- set-up -------------------------------------------------------------------------
    def _init_callback(self) -> None:
        from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
        from stable_baselines3.common.vec_env import unwrap_vec_normalize

        self._on_policy = isinstance(self.model, OnPolicyAlgorithm)
        if self._on_policy and self._episodes is None:
            self._episodes = EpisodeReturns(float(getattr(self.model, "gamma", 0.99)))
        if self.min_update_steps is None:  # coarse enough to be cheap, fine enough for ~100 records a run
            self.min_update_steps = group_steps(getattr(self.model, "_total_timesteps", 0) or 0, self._on_policy)
        env = self.model.get_env()
        self._vecnorm = unwrap_vec_normalize(env) if env is not None else None
        logger = self.model.logger
        self._original_record = logger.record

        def record(key: str, value: Any, exclude: Any = None) -> None:
            if key in _TRAIN_KEYS:
                number = _number(value)
                if number is not None:
                    self._train.setdefault(key, []).append(number)
            self._original_record(key, value, exclude)

        logger.record = record  # type: ignore[method-assign]  # intercepted for the run, restored at the end
        if self.want_grad_norms and self._monitor is None:
            clip = self.max_grad_norm if self.max_grad_norm is not None else getattr(self.model, "max_grad_norm", None)
            self._monitor = GradNormMonitor(self.model.policy, max_grad_norm=clip)
        self.history.context.update(_context(self.model, self._vecnorm))
        self.history.context.update(_reference(env, self.reference_return))
        if self.reward_scale is not None and self.reward_scale != 1:
            self.history.context["reward_scale"] = float(self.reward_scale)
        self._weights = _Weights(self.model.policy)
        self.history.context["param_norm_start"] = self._weights.norm
        self.history.context["param_norm_unit"] = _unit_norm(self._weights.params)
        self.history.total_steps = getattr(self.model, "_total_timesteps", None)

    # --- per step: rewards as the env gave them and as the algorithm saw them -------------
    def _on_step(self) -> bool:
        seen = self.locals.get("rewards")
        if seen is not None:
            if self._vecnorm is not None:
                self._seen.append(np.array(seen, dtype=np.float64))
                self._raw.append(np.array(self._vecnorm.get_original_reward(), dtype=np.float64))
            else:
                self._raw.append(np.array(seen, dtype=np.float64))
        infos = self.locals.get("infos") or ()
        self._override_total += len(infos)
        keys = self._override_set
        for info in infos:
            if not info:
                continue
            if not keys.isdisjoint(info) and any(info.get(key) for key in keys):
                self._overrides += 1
            episode = info.get("episode")  # the Monitor's record of an episode that ended at this step
            if isinstance(episode, dict) and "r" in episode:
                self._recent_returns.append(float(episode["r"]))
        return not self._stop

    def _note_env_nonfinite(self, what: str, step: int, actions: Any) -> None:
        """Record the first step at which the env handed back a non-finite observation or reward,
        with the largest action the policy had been sending: an env that breaks after ordinary
        finite actions is broken itself (a sensor that reads NaN), which no training knob repairs.
        Checked where it costs nothing per step: the group's rewards when they are summed, the last
        observation when training crashed on it."""
        if "env_nonfinite" in self.history.context:
            return
        sent = np.abs(np.asarray(actions, dtype=np.float64)) if actions is not None else np.zeros(0)
        self.history.context["env_nonfinite"] = {
            "what": what,
            "step": int(step),
            # None: no action seen, or a non-finite one (the context is written out as JSON)
            "action_abs_max": float(np.max(sent)) if sent.size and np.all(np.isfinite(sent)) else None,
        }

    def _sent_actions(self) -> Any:
        """The actions of the last rollout (on-policy: the buffer's, before clipping, which show a
        Gaussian's spread), else those of the last step."""
        buffer = getattr(self.model, "rollout_buffer", None)
        if self._on_policy and buffer is not None and getattr(buffer, "pos", 0) > 0:
            return buffer.actions[: buffer.pos]
        return self._step_actions()

    def _step_actions(self) -> Any:
        """The actions the env was given at the last step (on-policy: after clipping to its bounds)."""
        return self.locals.get("clipped_actions", self.locals.get("actions"))

    def _on_rollout_end(self) -> None:
        self._update_step = self.model.num_timesteps
        buffer = getattr(self.model, "rollout_buffer", None)
        if self._episodes is not None and buffer is not None and getattr(buffer, "full", False):
            # every rollout, grouped or not: an episode spans many of A2C's 5-step rollouts
            ends = getattr(self.model, "_last_episode_starts", None)
            self._episodes.add(buffer.values, buffer.rewards, buffer.episode_starts, ends)
        self._rollout_size = max(self._rollout_size, sum(len(r) for r in self._raw))
        if self._group_done():  # the buffer holds this rollout only until the next one starts
            self._rollout_stats()

    def _group_done(self) -> bool:
        return self._update_step - self._last_commit >= (self.min_update_steps or 0)

    def _rollout_stats(self) -> None:
        """Reward statistics of the group's rollouts, and the spread of the last rollout's
        advantages and returns (on-policy)."""
        stats: dict[str, float] = {}
        if self._raw:
            raw = np.concatenate(self._raw)
            finite = np.isfinite(raw)
            if not finite.all():  # the first non-finite reward: its step, counting back from now
                first = int(np.argmin(finite.reshape(len(self._raw), -1).all(axis=1)))  # one row per step
                step = self.model.num_timesteps - (len(self._raw) - 1 - first) * self.model.n_envs
                self._note_env_nonfinite("reward", step, self._sent_actions())
            stats["reward_mean"], stats["reward_std"], _ = _moments(raw)
            stats["reward_distinct"] = float(_distinct(raw))
            stats["reward_norm_std"] = (
                _moments(np.concatenate(self._seen))[1] if self._vecnorm is not None else stats["reward_std"]
            )
        if self._override_total:
            stats["override_fraction"] = self._overrides / self._override_total
        buffer = getattr(self.model, "rollout_buffer", None)
        if self._on_policy and buffer is not None and getattr(buffer, "full", False):
            stats["adv_std"] = _moments(buffer.advantages)[1]
            _, stats["return_std"], stats["return_rms"] = _moments(buffer.returns)
            self._probe_obs = buffer.observations
        if self._episodes is not None:
            stats.update(self._episodes.pop())
        self._rollout.update(stats)
        self._raw, self._seen = [], []
        self._overrides = self._override_total = 0

    # --- per update ---------------------------------------------------------------------
    def _on_rollout_start(self) -> None:
        if self._group_done():
            self._commit()

    def _on_training_end(self) -> None:
        self._close()

    def finish(self, error: BaseException | str | None = None) -> Verdict:
        """Record the last update (and the crash, if any) and return the final verdict.

        Call it when ``learn`` raised; after a normal end it has already run.
        """
        if self._finished and error is None:
            return self.verdict
        if error is not None:
            self.history.error = (
                error
                if isinstance(error, str)
                else "".join(traceback.format_exception(type(error), error, error.__traceback__))
            )
            last = getattr(self.model, "_last_obs", None)
            parts = last.values() if isinstance(last, dict) else () if last is None else (last,)
            if any(not np.isfinite(np.asarray(p, dtype=np.float64)).all() for p in parts):
                # training crashed on an observation the env handed back non-finite
                self._note_env_nonfinite("observation", self.model.num_timesteps, self._step_actions())
        if self._finished:  # the crash came after training ended (e.g. in evaluation): judge again
            self.verdict = self._judge.check(self.history, final=True)
            self._note_certain()
        self._close()
        return self.verdict

    def _close(self) -> None:
        if self._finished:
            return
        self._finished = True
        if self._train or self._monitor is not None and self._monitor.steps:
            if not self._on_policy:
                self._update_step = self.model.num_timesteps
            if self._raw:  # a partial group (training ended or crashed mid-group)
                self._rollout_stats()
            self._commit()
        if self._monitor is not None:
            self._monitor.close()
        logger = self.model.logger
        if self._original_record is not None:
            logger.record = self._original_record  # type: ignore[method-assign]
        if logger.name_to_value:  # SB3 never dumps the last update; keep the one-rollout lag
            logger.dump(step=self.model.num_timesteps + (self._rollout_size if self._on_policy else 0))
        self.verdict = self._judge.check(self.history, final=True)
        self._note_certain()

    def _commit(self) -> None:
        """Close one update: gather its signals, write them to the logger, classify."""
        grads = self._monitor.pop() if self._monitor is not None else {}
        if not self._train and not grads:
            return  # nothing trained since the last commit (e.g. before learning_starts)
        signals: dict[str, float] = {}
        train = {key: sum(values) / len(values) for key, values in self._train.items()}
        for key, value in (train | grads).items():
            if key in SB3_KEYS:
                name, sign = SB3_KEYS[key]
                signals[name] = sign * value
        if grads:
            for key, value in grads.items():
                self._original_record(key, value, None)
        signals.update(self._rollout)
        episodes = getattr(self.model, "ep_info_buffer", None)
        if episodes:  # what SB3 logs as rollout/ep_rew_mean, but for this very update
            signals["ep_return"] = float(sum(e["r"] for e in episodes)) / len(episodes)
            signals["ep_length"] = float(sum(e["l"] for e in episodes)) / len(episodes)
        if self._recent_returns:  # ep_return is over the last 100 episodes: it lags the policy by as many
            signals["ep_return_recent"] = sum(self._recent_returns) / len(self._recent_returns)
            self._recent_returns = []
        probe = len(self.history) % self.PROBE_EVERY == 0 or not all(math.isfinite(v) for v in signals.values())
        signals.update(_policy_signals(self.model.policy, check_params=probe))
        ratio = self._weights.moved(recheck=probe) if self._weights is not None else None
        if ratio is not None:
            signals["update_ratio"] = ratio
        if self._weights is not None and not math.isnan(self._weights.norm):
            signals["param_norm"] = self._weights.norm  # inf counts: the weights blew up
        if probe and self._on_policy and self._probe_obs is not None:
            loc = _loc_abs_max(self.model.policy, self._probe_obs)
            if loc is not None:
                signals["loc_abs_max"] = loc
        for name in OWN:
            if name in signals:
                self._original_record(PREFIX + name, signals[name], None)
        self.history.add(self._update_step, signals)
        self._train, self._rollout = {}, {}
        self._last_commit = self._update_step
        n = len(self.history)
        scheduled = n >= self._next_check
        if scheduled or self._urgent(signals):
            if scheduled:  # the checkpoints of stability.verdict.checkpoints (with check_every=1)
                self._next_check = n + max(self.check_every, n // 20)
            self.verdict = self._judge.check(self.history)
            self._note_certain()
            # stop_on decides whether to stop, never what the verdict is: any certain finding of a
            # listed class stops the run; the verdict stays the highest-ranked certain finding
            doomed = [f.kind for f in self.verdict.findings if f.certain and f.kind in self.stop_on]
            if doomed and not self._stop:
                self._stop = True
                self.stopped_by = doomed[0]
        if self.on_update is not None:
            self.on_update(self._update_step, signals, self.verdict)

    @property
    def detected_step(self) -> int | None:
        """The env step at which the final verdict's class was first certain (None if healthy)."""
        return self.first_certain.get(self.verdict.verdict) if self.verdict.certain else None

    def _note_certain(self) -> None:
        certain = {f.kind for f in self.verdict.findings if f.certain}
        for kind in self.first_certain.keys() - certain:  # withdrawn (see Detector.whole_run_claim)
            del self.first_certain[kind]
        for kind in certain:
            self.first_certain.setdefault(kind, self.model.num_timesteps)

    def _urgent(self, signals: dict[str, float]) -> bool:
        t = self.thresholds.of("nan_scale")
        return (
            not all(math.isfinite(v) for v in signals.values())
            or signals.get("params_finite", 1.0) < 1.0
            or signals.get("log_std_max", 0.0) > t["log_std_warn_high"]
            or signals.get("log_std_min", 0.0) < t["log_std_warn_low"]
        )


class EpisodeReturns:
    """The critic's predictions against the discounted returns of the episodes the rollouts finish.

    SB3's value loss and explained variance compare the critic with its own bootstrapped targets:
    with A2C's 5-step rollouts a critic that predicts ~0 everywhere fits ``r + gamma * V(s')`` well
    and looks fine while it is far from what the episodes return. Here each env's steps (the
    critic's value when the step was taken, and the reward as the algorithm saw it: normalised,
    and with SB3's ``gamma * V(s_T)`` already added where a time limit cut the episode, the one
    place the critic's own estimate enters) are kept until the episode ends, across rollouts; the
    finished episode's discounted returns are then compared with those values. :meth:`pop` gives
    ``critic_error`` (the RMS of the error over the RMS of the returns) and ``critic_r2`` (the
    share of the returns' variance the critic explains) over the episodes finished since the last
    pop, once ``min_pairs`` steps have gathered (until then they carry over), and nothing while the
    returns are all ~0 (a constant zero reward, a sparse one not yet found: no scale to measure
    against). Pooled sums only (the variance merged per pop, so a large mean loses no
    precision): memory is the rows since the oldest unfinished episode began; past ``cap`` steps an
    episode's oldest steps are dropped, and only its last ``cap`` are measured. The rollouts are kept
    as blocks of rows shared by every env, each env holding where its open episode began: a flush
    works on the envs whose episodes ended in it only (A2C records an update every 5 steps).
    """

    def __init__(self, gamma: float, min_pairs: int = 32, cap: int = 10_000) -> None:
        self.gamma, self.min_pairs, self.cap = gamma, min_pairs, cap
        # rows not yet measured, as (index of the first row, values, rewards) blocks of shape (rows, envs)
        self._blocks: list[tuple[int, np.ndarray, np.ndarray]] = []
        self._rows = 0  # rows flushed so far: the index the next block starts at
        self._start: np.ndarray | None = None  # per env, the row its unfinished episode began at
        self._staged: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # rollouts added since the last pop
        self._staged_ends: np.ndarray | None = None
        self._done: list[tuple[np.ndarray, np.ndarray]] = []  # finished episodes' values and returns, this flush
        self._reset()

    def _reset(self) -> None:
        # pairs, squared error summed, returns' mean, their squared deviations summed, squares summed
        self._n, self._err, self._mean, self._dev, self._square = 0, 0.0, 0.0, 0.0, 0.0

    def add(self, values: np.ndarray, rewards: np.ndarray, starts: np.ndarray, last_ends: Any) -> None:
        """One rollout, arrays of shape (steps, envs); ``starts[t]`` marks step t as the first of an
        episode, ``last_ends`` (per env) whether the rollout's last step ended one. Copied and kept
        until :meth:`pop`, which reads the rollouts since the last pop as one: A2C's rollouts are
        5 steps, and per-rollout work would cost more than the rollout."""
        values = np.array(values, dtype=np.float64).reshape(len(values), -1)
        self._staged.append(
            (values, np.array(rewards, dtype=np.float64).reshape(values.shape), np.array(starts).reshape(values.shape))
        )
        self._staged_ends = last_ends if last_ends is None else np.array(last_ends).reshape(-1)

    def _flush(self) -> None:
        """Append the staged rollouts as one block; measure the episodes that finished in it."""
        if not self._staged:
            return
        staged, self._staged = self._staged, []
        if len(staged) == 1:
            values, rewards, starts = staged[0]
        else:  # consecutive rollouts: a rollout's first step follows the last one's last step
            values, rewards, starts = (np.concatenate(part) for part in zip(*staged, strict=True))
        base, rows = self._rows, len(values)
        if self._start is None or len(self._start) != values.shape[1]:
            self._start = np.full(values.shape[1], base, dtype=np.int64)
        self._blocks.append((base, values, rewards))
        self._rows += rows
        ends = np.zeros(values.shape[1], dtype=bool)
        if self._staged_ends is not None and len(self._staged_ends) == len(ends):
            ends = self._staged_ends.astype(bool)
        starts = starts.astype(bool)
        for env in np.flatnonzero(starts.any(axis=0) | ends).tolist():
            # an episode starting at row r ended at r - 1; one that ended on the last row, at base + rows
            bounds = (np.flatnonzero(starts[:, env]) + base).tolist() + ([base + rows] if ends[env] else [])
            for bound in bounds:
                if bound > self._start[env]:
                    self._finish(env, int(self._start[env]), bound)
                self._start[env] = bound
        np.maximum(self._start, self._rows - self.cap, out=self._start)  # an episode past cap: its last cap steps
        oldest = int(self._start.min())
        while self._blocks and self._blocks[0][0] + len(self._blocks[0][1]) <= oldest:
            self._blocks.pop(0)
        self._absorb()

    def _finish(self, env: int, first: int, end: int) -> None:
        """Measure one env's episode, rows ``first`` to ``end`` (exclusive; its last ``cap`` rows)."""
        first = max(first, end - self.cap)
        values, rewards = [], []
        for at, block_values, block_rewards in self._blocks:
            lo, hi = max(first, at) - at, min(end, at + len(block_values)) - at
            if lo < hi:
                values.append(block_values[lo:hi, env])
                rewards.append(block_rewards[lo:hi, env])
        if values:
            self._done.append((np.concatenate(values), discounted_returns(np.concatenate(rewards), self.gamma)))

    def _absorb(self) -> None:
        """Pool the episodes finished by one flush into the sums (one merge for all of them)."""
        if not self._done:
            return
        done, self._done = self._done, []
        v, g = (np.concatenate(part) for part in zip(*done, strict=True))
        ok = np.isfinite(v) & np.isfinite(g)
        if not ok.all():
            if not ok.any():
                return
            v, g = v[ok], g[ok]
        n = len(g)
        mean = float(g.sum()) / n
        total = self._n + n
        delta = mean - self._mean
        spread, error = g - mean, v - g
        self._dev += float(np.dot(spread, spread)) + delta * delta * self._n * n / total
        self._mean += delta * n / total
        self._n = total
        self._err += float(np.dot(error, error))
        self._square += float(np.dot(g, g))

    def pop(self) -> dict[str, float]:
        self._flush()
        if self._n < self.min_pairs:
            return {}
        n = self._n
        mse, mean_sq, var = self._err / n, self._square / n, self._dev / n
        self._reset()
        if not math.isfinite(mse) or mean_sq <= 1e-16:  # returns all ~0: nothing to measure against
            return {}
        out = {"critic_error": math.sqrt(mse) / math.sqrt(mean_sq)}
        if var > 1e-12 * mean_sq:
            out["critic_r2"] = 1.0 - mse / var
        return out


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """The discounted return from each step of one episode, ``G_t = r_t + gamma * G_{t+1}``.

    Short episodes are summed backwards on a Python list (numpy's per-call cost would exceed the
    sum). Longer ones as scaled cumulative sums: within a block of steps, ``G_t * gamma^t`` is the
    reversed cumulative sum of ``r_k * gamma^k``; blocks are short enough that ``gamma^k`` stays
    far above float64's smallest number (one block for any usual gamma and episode), each carrying
    the next block's first return."""
    rewards = np.asarray(rewards, dtype=np.float64)
    if len(rewards) <= _SHORT_EPISODE or not 0.0 < gamma <= 1.0:
        running, backwards = 0.0, []
        for r in reversed(rewards.tolist()):
            running = r + gamma * running
            backwards.append(running)
        return np.array(backwards[::-1], dtype=np.float64)
    out = np.empty_like(rewards)
    block = len(rewards) if gamma == 1.0 else max(1, int(250.0 / -math.log10(gamma)))
    carry, end = 0.0, len(rewards)
    while end > 0:
        start = max(0, end - block)
        scale = gamma ** np.arange(end - start + 1, dtype=np.float64)
        part = np.cumsum((rewards[start:end] * scale[:-1])[::-1])[::-1]
        out[start:end] = (part + carry * scale[-1]) / scale[:-1]
        carry, end = float(out[start]), start
    return out


_SHORT_EPISODE = 64  # steps up to which the Python sum is the faster (measured: even at ~70)


def _moments(values: np.ndarray) -> tuple[float, float, float]:
    """Mean, (population) standard deviation and root mean square of an array's elements, in
    float64: what ``mean()``, ``std()`` and ``sqrt(mean(x * x))`` give, at a third of their cost on
    the few hundred numbers of a rollout (this runs once per recorded update)."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    if not flat.size:
        return math.nan, math.nan, math.nan
    mean = float(flat.sum()) / flat.size
    deviation = flat - mean
    return (
        mean,
        math.sqrt(float(np.dot(deviation, deviation)) / flat.size),
        math.sqrt(float(np.dot(flat, flat)) / flat.size),
    )


def _distinct(values: np.ndarray) -> int:
    """How many distinct values an array holds, NaN counted once (as ``np.unique`` counts): one
    sort, without ``np.unique``'s bookkeeping."""
    ordered = np.sort(np.asarray(values).reshape(-1))
    if not ordered.size:
        return 0
    distinct = 1 + int(np.count_nonzero(ordered[1:] != ordered[:-1]))
    nans = int(np.count_nonzero(np.isnan(ordered)))  # sorted last, each unequal to the one before
    return distinct - max(nans - 1, 0)


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _policy_signals(policy: th.nn.Module, check_params: bool) -> dict[str, float]:
    """log_std range (state-independent Gaussian heads) and whether every parameter is finite."""
    out: dict[str, float] = {}
    if check_params:
        params = [p.detach() for p in policy.parameters()]
        # the max-abs of each tensor in one fused call: inf or NaN anywhere makes it non-finite
        finite = bool(th.isfinite(th.stack(th._foreach_norm(params, float("inf")))).all()) if params else True
        out["params_finite"] = 1.0 if finite else 0.0
    log_std = getattr(policy, "log_std", None)
    if isinstance(log_std, th.Tensor) and log_std.numel():
        values = log_std.detach().float()
        out["log_std_min"] = float(values.min())
        out["log_std_max"] = float(values.max())
    return out


class _Weights:
    """The policy's parameters at the last recorded update, and how far each update moved them.

    Read once per recorded update, which for A2C is every few hundred env steps: the parameter
    list is taken once (walking the module tree costs more than the copy), and float32 CPU
    parameters are read through numpy views of their storage into one of two flat buffers, in a
    single copy. A parameter whose storage was replaced (loaded by assignment, moved) is noticed by
    its data pointer and the views are taken again; a parameter replaced by another object, when
    asked to ``recheck`` (the callback does at its periodic probes), and that update gives no ratio.
    ``norm`` is the weights' norm at the last read (NaN where a weight is NaN, inf where one is or
    the sum overflows): each update's ratio takes it as the size of the weights before."""

    def __init__(self, policy: th.nn.Module) -> None:
        self._policy = policy
        self.params = list(policy.parameters())
        self._pointers: list[int] = []
        self._views: list[np.ndarray] | None = None
        self._buffers: tuple[np.ndarray, np.ndarray] | None = None
        self._at = 0  # which buffer holds the last read
        self._last: np.ndarray | th.Tensor = self._read()
        self.norm = _norm(self._last)

    def _fast(self) -> bool:
        """Whether the numpy views are (still) those of the parameters' storage."""
        if self._views is not None and self._pointers == [p.data_ptr() for p in self.params]:
            return True
        self._views = None
        if not all(p.device.type == "cpu" and p.dtype == th.float32 and p.is_contiguous() for p in self.params):
            return False
        self._pointers = [p.data_ptr() for p in self.params]
        self._views = [p.detach().numpy().reshape(-1) for p in self.params]
        size = sum(v.size for v in self._views)
        if self._buffers is None or self._buffers[0].size != size:
            self._buffers = (np.empty(size, dtype=np.float32), np.empty(size, dtype=np.float32))
        return True

    def _read(self) -> np.ndarray | th.Tensor:
        if self._fast() and self._views is not None and self._buffers is not None:
            self._at = 1 - self._at
            out = self._buffers[self._at]
            if self._views:
                np.concatenate(self._views, out=out)
            return out
        with th.no_grad():  # GPU or other dtypes: one flat float32 copy
            flat = [p.detach().reshape(-1).float() for p in self.params]
            return th.cat(flat) if flat else th.zeros(0)

    def moved(self, recheck: bool = False) -> float | None:
        """How far the weights moved since the last call, relative to their size then; None when
        either is not finite, the weights are all 0, or their number changed."""
        if recheck:
            params = list(self._policy.parameters())
            if len(params) != len(self.params) or any(a is not b for a, b in zip(params, self.params, strict=False)):
                self.params, self._views = params, None
                self._last = self._read()
                self.norm = _norm(self._last)
                return None
        before, after = self._last, self._read()  # the buffer read into is not the one before holds
        self._last, scale = after, self.norm
        self.norm = _norm(after)
        if type(before) is not type(after) or len(before) != len(after):
            return None
        if isinstance(before, th.Tensor) and isinstance(after, th.Tensor):
            moved = float(th.linalg.vector_norm(after - before))
        else:
            with np.errstate(over="ignore", invalid="ignore"):  # weights that blew up: inf or NaN, read as such
                d = after - before  # float32, as the torch path's norms
                moved = math.sqrt(float(np.dot(d, d)))
        if not (math.isfinite(scale) and math.isfinite(moved)) or scale <= 0.0:
            return None
        return moved / scale


def _unit_norm(params: Iterable[th.Tensor]) -> float:
    """The norm the weight matrices (every parameter of 2 or more dimensions) would have at an
    orthogonal gain of 1: each such matrix has norm sqrt(min(rows, columns)). Biases and log_std
    start at 0 and add nothing."""
    return math.sqrt(sum(min(p.shape[0], p[0].numel()) for p in params if p.dim() >= 2))


def _norm(flat: np.ndarray | th.Tensor) -> float:
    """The Euclidean norm of the flat weights (float32, as they are held)."""
    if isinstance(flat, th.Tensor):
        return float(th.linalg.vector_norm(flat))
    with np.errstate(over="ignore", invalid="ignore"):  # a sum past float32's range is inf: blown up
        return math.sqrt(float(np.dot(flat, flat)))


def _loc_abs_max(policy: Any, observations: Any, sample: int = 64) -> float | None:
    """Largest |mean action| the Gaussian policy gives on a few rollout observations."""
    if not hasattr(policy, "log_std") or not hasattr(policy, "action_net") or hasattr(policy, "lstm_actor"):
        return None
    if not isinstance(observations, np.ndarray):
        return None
    # (n_steps, n_envs, *obs) while the rollout is fresh; (n_steps * n_envs, *obs) once the
    # algorithm's train() has read the buffer, which is how a run that ends mid-group leaves it.
    # The buffer's own per-observation shape reads both.
    flat = observations.reshape(-1, *get_obs_shape(policy.observation_space))
    idx = np.linspace(0, len(flat) - 1, num=min(sample, len(flat))).astype(int)
    with th.no_grad():
        obs, _ = policy.obs_to_tensor(flat[idx])
        features = policy.extract_features(obs)
        latent_pi = policy.mlp_extractor.forward_actor(features if not isinstance(features, tuple) else features[0])
        loc = policy.action_net(latent_pi)
    value = float(loc.abs().max())
    return value


def _reference(env: Any, given: float | None) -> dict[str, Any]:
    """The run's reference return and where it came from: the one given, else the training env's
    registered reward_threshold (read from its first env's spec), else nothing; and that env's time
    limit, where it has one (what a reward paid per step survived can reach). The env itself is
    read only in this process (a DummyVecEnv under any VecEnv wrappers): asking a SubprocVecEnv's
    workers for it pickles it back, and a spec holding a lambda kills the worker; give those
    runs their reference. Their time limit is asked for as the number it is (the outermost
    ``TimeLimit``'s, where the first worker's env has one)."""
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    inner = env
    while inner is not None and not isinstance(inner, (DummyVecEnv, SubprocVecEnv)):
        inner = getattr(inner, "venv", None)  # VecEnv wrappers (VecNormalize, VecFrameStack, ...)
    given_found = (float(given), references.GIVEN) if given is not None else None
    if isinstance(inner, SubprocVecEnv):
        limit = references.LIMIT_ATTR
        steps = inner.get_attr(limit, indices=[0])[0] if inner.has_attr(limit) else None
        return references.context(given_found) | references.limit_context(steps)
    first = (getattr(inner, "envs", None) or [None])[0]
    found = given_found if given_found is not None else references.registered(getattr(first, "spec", None))
    return references.context(found) | references.time_limit(first)


def _context(model: Any, vecnorm: Any) -> dict[str, Any]:
    """Facts the detectors use to name likely causes."""
    ctx: dict[str, Any] = {"algo": type(model).__name__}
    default_lr = advice.default_learning_rate(type(model))
    if default_lr is not None:
        ctx["default_learning_rate"] = default_lr
    ctx["default_optimizer"] = advice.default_optimizer(type(model))
    optimizer = getattr(model.policy, "optimizer", None)
    if optimizer is not None:
        ctx["optimizer"] = type(optimizer).__name__
        ctx["weight_decay"] = float(optimizer.param_groups[0].get("weight_decay", 0.0))
        momentum = optimizer.param_groups[0].get("momentum")  # SGD's and RMSprop's; Adam has betas
        if is_real(momentum):
            ctx["momentum"] = float(momentum)
    for name in (
        "normalize_advantage",
        "use_sde",
        "max_grad_norm",
        "n_steps",
        "gamma",
        "gae_lambda",
        "ent_coef",
        "vf_coef",
        "target_kl",
    ):
        value = getattr(model, name, None)
        if isinstance(value, (bool, int, float)):
            ctx[name] = value
    clip_vf = getattr(model, "clip_range_vf", None)  # PPO keeps it as a schedule: its value at the start
    clip_vf = clip_vf(1.0) if callable(clip_vf) else clip_vf
    if is_real(clip_vf):
        ctx["clip_range_vf"] = float(clip_vf)
    ctx["norm_reward"] = bool(vecnorm is not None and vecnorm.norm_reward)
    ctx["norm_obs"] = bool(vecnorm is not None and vecnorm.norm_obs)
    space = model.action_space
    ctx["action_space"] = type(space).__name__
    ctx["continuous"] = type(space).__name__ == "Box"
    if type(space).__name__ == "Discrete":
        ctx["entropy_max"] = math.log(int(space.n))
    elif type(space).__name__ == "MultiDiscrete":
        ctx["entropy_max"] = float(sum(math.log(int(n)) for n in space.nvec))
    elif type(space).__name__ == "MultiBinary":
        ctx["entropy_max"] = float(np.prod(space.shape) * math.log(2))
    policy = model.policy
    if "log_std" in getattr(policy, "_parameters", {}):  # a Gaussian head with a learnt log std
        start = getattr(policy, "log_std_init", None)  # SB3 keeps it; the advice reads where it began
        if isinstance(start, (int, float)):
            ctx["log_std_init"] = float(start)
        bounds = getattr(policy, "log_std_bounds", None)  # rlsweep's bounded policies (sweeps.policies)
        if bounds is not None:
            ctx["log_std_bounds"] = [float(b) for b in bounds]
    # the heads' scale at the start (a head started large saturates its outputs)
    for head, key in (("value_net", "value_head_weight_std"), ("action_net", "policy_head_weight_std")):
        layer = getattr(policy, head, None)
        if isinstance(layer, th.nn.Linear):
            weight = layer.weight.detach()
            ctx[key] = float(weight.std()) if weight.numel() > 1 else float(weight.abs().mean())
    return ctx
