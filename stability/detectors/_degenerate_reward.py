"""``degenerate_reward``: the rollouts carry no reward signal to learn from.

A warning when, for the last ``min_updates`` rollouts, every raw per-step reward was the same
value *and* every episode returned the same total: then no advantage can favour any action
(the critic's bootstrapped targets may still vary; that is its own noise, not a signal); certain
when that has held since the first rollout, so the env never paid a signal (a cause, which outranks
the dead gradient it makes), for as long as it holds: a rollout that pays a signal later
withdraws it (the env pays one; the untrained policy had not reached it). A
constant per-step reward alone is not enough: CartPole pays +1 every step, and its signal is
when episodes end, which shows in the episodes' returns.
"""

from __future__ import annotations

from typing import Any

from stability import references
from stability.detectors._base import Detector, streak_start
from stability.findings import Finding
from stability.signals import History


class DegenerateReward(Detector):
    name = "degenerate_reward"
    # "constant since the first rollout": one rollout that pays different rewards, or one episode
    # that returns a different total, later in the run shows the env does pay a signal (a sparse
    # goal the untrained policy had not reached yet, as on Acrobot)
    whole_run_claim = True

    def detect(self, history: History, t: dict[str, Any], final: bool) -> Finding | None:
        if not history.has("ep_return"):
            return None  # without episode returns a constant reward proves nothing (CartPole)
        if not history.has("reward_std"):
            return self._from_returns(history, t)
        eps = t["spread_eps"]
        flat = streak_start(history, "reward_std", lambda v: v <= eps)
        if flat is None or len(history) - flat < t["min_updates"]:
            return None
        returns = history.values("ep_return", last=len(history) - flat)
        if not _enough_episodes(history, returns, history.step_of(flat) if flat else 0, t):
            return None
        if max(returns) - min(returns) > eps * max(1.0, abs(returns[0])):
            return None
        value = history.values("reward_mean")[-1] if history.has("reward_mean") else float("nan")
        # Constant from the first rollout on: the env pays no signal (a cause). Constant only since
        # later: the policy stopped reaching what paid (a consequence of another failure, which then
        # leads the verdict); a warning here.
        from_start = flat == 0
        return Finding(
            self.name,
            history.step_of(flat),
            f"every step of the last {len(history) - flat} rollouts paid the same reward ({value:.4g})",
            {
                "reward_mean_last": value,
                "reward_std_last": history.values("reward_std")[-1],
                "rollouts_flat": len(history) - flat,
            },
            [
                "check the env's reward function and any stage/curriculum that pays a constant",
                "shorten constant-reward phases or give them a shaped reward",
            ],
            [] if from_start else ["rewards varied in earlier rollouts: the policy stopped reaching them"],
            certain=from_start,
        )

    def _from_returns(self, history: History, t: dict[str, Any]) -> Finding | None:
        """A plain log has no reward statistics: every episode of the run, from the first logged
        on, returned the same total, and that total is 0 or the episodes all lasted as long (so
        one reward on every step could have paid it). (A solved task's constant return came after
        varying ones.)
        Certain, as the callback's rewards constant from the first rollout are, whether or not the
        policy also froze: a policy that never saw a return change had nothing to learn from, and
        the two paths name the same cause for the same run."""
        returns = history.values("ep_return")
        if not _enough_episodes(history, returns, 0, t):
            return None
        if max(returns) - min(returns) > t["spread_eps"] * max(1.0, abs(returns[0])):
            return None
        if _lengths_vary(history, t) and abs(returns[0]) > t["spread_eps"]:
            # Episodes of different lengths returned the same non-zero total. Were every step paid
            # one reward r, each return would be r times its length: so steps paid different
            # rewards (a success paid once, say, reached every time), and the rollouts do carry
            # a signal. Only a total of 0 is what a reward of 0 on every step would give.
            return None
        return Finding(
            self.name,
            history.step_of(0),
            f"every episode of the run returned the same total ({returns[0]:.4g})",
            {"ep_return": returns[0], "updates": len(history)},
            [
                "check the env's reward function and any stage/curriculum that pays a constant",
                "give the agent a reward it can change (shaping), or a start state that can reach it",
            ],
        )


def _lengths_vary(history: History, t: dict[str, Any]) -> bool:
    """Whether the logged mean episode length changed over the run."""
    lengths = [v for v in history.values("ep_length") if v > 0]
    return bool(lengths) and max(lengths) - min(lengths) > t["spread_eps"] * max(1.0, max(lengths))


def _enough_episodes(history: History, returns: list[float], start_step: int, t: dict[str, Any]) -> bool:
    """Whether the stretch from env step ``start_step`` holds enough episodes to call their
    returns constant: ``min_episodes`` of them when episode lengths are logged (two return records
    at least, to compare), else ``min_updates`` return records.

    A log record is not an episode in either direction. The logged return is a running mean over
    recent episodes, logged at every update whether or not an episode ended: MountainCar's
    999-step episodes end in waves ~4000 env steps apart (4 envs), so ten records of one wave's
    mean are one wave, not ten returns, and a 12k-step run of 1024-step rollouts logs 9 returns
    that span 12 episodes. The episodes a stretch holds are its env steps over the mean episode
    length (steps of all envs count); a stretch from the run's start counts from step 0, as the
    first logged mean already holds the episodes that ended before it. Without episode lengths
    the records are all there is to go by.

    Episodes that all ran out the env's time limit (every logged length at ``time_limit`` in the
    context, from the run's start) need two, not ``min_episodes``: none ended on anything the
    policy did, so their ends carry no signal and each one's return is its limit's worth of
    per-step rewards, which the rollouts already show. More of them would only repeat that sum:
    CartPole cut at 2000 steps and paid 0.2 a step ends 4 episodes in 12000 steps of 4 envs, all
    returning 400."""
    lengths = [v for v in history.values("ep_length") if v > 0]
    if not lengths:
        return len(returns) >= t["min_updates"]
    episodes = (history.last_step - start_step) / (sum(lengths) / len(lengths))
    limit = references.whole_steps(history.context.get(references.TIME_LIMIT))
    needed = 2 if limit is not None and min(lengths) >= limit else t["min_episodes"]
    return len(returns) >= 2 and episodes >= needed
