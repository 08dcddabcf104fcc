"""``stuck_value_loss``: the critic is not learning.

Looked at after ``min_progress`` of the budget, on the first and last windows of updates
(smaller windows for a run of fewer than ``min_updates``), and **certain only once the run has
ended**: before that a finding is a warning, which ``stop_on`` does not act on. The corpus label
reads the critic at half the budget and at the end; a critic off its targets at half may fit them
by the end (a learning rate that decays, a critic lagging a fast-improving policy), and a finding
certain at a check stays in the verdict. Made final-only on 2026-12-05 with fresh26 to fresh33 in
view: 8 runs of 597 righted on the sweep path and none broken, 11 righted and 5 broken of 618
from plain logs. A run of fewer than ``min_certain_updates`` updates or ``min_certain_steps`` env
steps gets at most a warning (its critic may only need more updates).

With the callback's ``return_rms`` (the scale of the critic's targets), stuck when the last
window's value loss is:

- at least ``relative_alone`` times the mean squared return, whatever explained variance says
  and however far the loss fell (it falls with its targets when the reward shrinks);
- or at least ``relative_floor`` times it, the loss has not fallen below ``fall_ratio`` times its
  first level, and explained variance stays at or below ``ev_max``. A critic lagging a
  fast-improving policy is a few percent off; one this far off has not learnt the returns' scale;
- or, once a PPO-style run has ended, at least ``relative_never_fit`` times it while explained
  variance never rose above ``ev_max`` at any update.

From a plain log (no ``return_rms``), with explained variance at or below ``ev_max``:

- a loss that has not fallen and is at least ``relative_floor_episode`` times the square of the
  discounted return estimated from the episodes' return and length (the targets' scale when
  rewards reach the critic as the env paid them; with normalised rewards it can be far off either
  way: on Pendulum it overstates them);
- or, for PPO-style logs (large batches, where explained variance is a reliable number), a loss
  that has not fallen with explained variance pinned within ``ev_pinned`` of 0 on
  ``pinned_share`` of the window while the returns do not rise;
- or, once such a run has ended, explained variance never above ``ev_max`` at any update;
- neither of those two where the loss is under ``relative_fit_episode`` times that square (an
  error of a tenth of the targets' scale: explained variance is ~0 for targets that barely vary
  about a level the critic fits), unless it is under ``relative_fit_episode_min`` times it (then
  the critic's targets are on another scale than the episodes' returns: rewards scaled down);
- for A2C-style logs (no approx_kl: each explained variance is one short rollout's, noisy around
  0 when healthy), once the run has ended, a window median of ``ev_below_mean`` or less (the
  critic's values further from its targets than their own mean);
- for A2C-style logs of a Gaussian policy, once the run has ended, explained variance never over
  ``gaussian_ev_best_max`` at any update of the run, while the returns did not rise over the
  window and the policy is not near-deterministic (entropy_collapse's bars) at every update of
  it: in continuous control the returns vary with the state, and a critic that learns their worth
  explains most of their variance at some update, however noisy each short rollout's number (a
  discrete survival env's targets barely vary once mastered: not read there);
- once the run has ended, a loss that has not fallen, from a critic that has not fit (explained
  variance at or under ``ev_max`` at every update of a PPO-style log's last window; at or under it
  in the window's median of an A2C-style one), whose square root is at least ``critic_error_off``
  of the size of its own targets: GAE's lambda-returns (A2C's n-step returns) bootstrap from the
  critic, so a critic that never learnt the returns' level is fit to targets of a few steps of
  reward (about 17 for PPO's defaults, 3.3 for A2C's 5-step rollouts) and logs a loss near their
  square, far under the discounted return's square. The rule says how far off that level it is, as
  a fraction of it (see ``_lambda_scale``). Only where every episode of the window lasted one
  length (a time limit, which SB3 bootstraps): episodes that end by failure drop their last
  targets to the rewards left, an error of the level's size for a critic at that level.
- once the run has ended, a ``vf_coef`` under ``vf_coef_untrained`` in the run's context (the
  model's, or the config given to diagnose): the critic's loss barely reaches the gradient, so
  the critic is not trained, and its loss moves with its targets alone.

The episodes' returns are the env's rewards. Where the run's context gives a ``reward_scale`` (a
config given to diagnose, or the sweep's own through the callback: rlsweep's knob, which
multiplies every reward before the algorithm sees it) and its rewards are not normalised, the
critic's targets are that many times the episodes' scale, and each size above (per-step reward,
discounted return, lambda-returns) is read so.

A loss of at least ``relative_units_max`` times that square, with explained variance above
``ev_below_mean``, is not in the episodes' units: in them, the critic would be off by more than
three times the returns' whole scale and explain far less than nothing of them. Its rewards were
scaled up before it (a tiny raw reward normalised: a Gaussian of small std on MountainCar pays
~1e-4 a step), the square gives it no scale, and the first rule does not apply.

A rule above that rests on explained variance alone (pinned, never fit, below the mean) gives a
warning and never a certain verdict where the loss is under ``relative_floor_episode`` of that
square, or not in its units. Under it, the critic is off by under a third of the targets'
estimated scale, and explained variance near 0 is as often targets that barely vary about a level
it fits (a constant critic at the returns' level, a policy that barely varies what it does) as a
critic that learnt nothing; not in its units, nothing says how far off the critic is. Except, not
in its units, a PPO-style critic pinned at ~0 over the window (loss not fallen, returns not
risen) that never explained ``ev_max`` at any update: explained variance has no units, a loss
that large says the targets are large in the critic's, and a critic that explained none of their
variance at any update learnt nothing of them (rewards scaled up and not normalised). Certain.

From a plain log, a critic pinned at explained variance ~0 (within ``ev_pinned`` on
``pinned_share`` of the window) while the policy is near-deterministic at every update of the
window (entropy_collapse's bars) gives a warning only: one action everywhere makes the episodes
alike, a constant at their level fits them, and a plain log does not show the level. A learning
rate that saturated both is entropy_collapse's to name.

None of these applies when every episode of the window returned exactly 0: nothing then gives the
targets a scale, and explained variance against targets with no spread measures nothing.

With the callback's ``critic_error`` and ``critic_r2`` (its values against the discounted returns
of the episodes its rollouts finished, bootstrapped only where a time limit cut an episode,
rather than against its own n-step targets), that measurement decides where it is clear: never
stuck when the last window's median error is under ``critic_error_fit`` of the returns' RMS;
once the run has ended, stuck when the median error is at least ``critic_error_off``, explaining
under ``critic_r2_max`` of their variance, over both the last window's records and the window
ending half way through them. With fewer than ``critic_records`` records in a window (episodes
of hundreds of steps), the second half's records together decide where there are at least
``critic_records_sparse`` and all of them are on one side: all under ``critic_error_fit``, or
(once the run has ended) all at or above ``critic_error_off`` and none explaining
``critic_r2_max``. Between the two bars (a narrow band about the corpus label's, 0.6), or where
the records are too few or disagree, the rules above decide. It
catches what the loss cannot show: an A2C critic that fits its 5-step targets
``r + gamma * V(s')`` while predicting ~0 of what the episodes return.

A run whose policy learns despite its critic is not failing: where the context holds a reference
return (``reference_return``: the sweep's ``stability.reference_return``, ``diagnose
--reference-return`` or ``--env``, else the env's registered ``reward_threshold``, which the
callback records), a finding on a run whose episode return at its end got at least
``learned_fraction`` of the way from its return at the start to the reference is a warning, never a
certain verdict (the critic lagging a fast-improving policy). Without one, an env that pays a
steady reward per step survived (the run's records of return over length all near one positive
rate, over lengths that vary) within a known time limit (``time_limit``) bounds it: limit times
rate is the most an episode returns. Such an env's return is its survival time, surviving to the
limit is the task, and a reference is near the bound (CartPole's 475 of 500, 195 of 200): the bound
stands for the reference both ways. A run under that fraction (0.2) of the way to it is under half
the way to any reference 0.4 of the way from its start to the bound or further. The return at
the end is that of the episodes the run's last records saw end, where the callback recorded them
(``ep_return_recent``), rather than a mean over the last 100 episodes that lags the policy. Without
a reference or such a bound, the run's own rise says nothing of how far it fell short: returns from
20 to 130 on CartPole are a quarter of the way, and the rules above decide. With a reference the
returns got under that fraction of the way to, the rules that rest on explained variance alone give
a certain verdict rather than a warning: beside a policy that is not learning, a critic that never
explains its returns is not one fitting returns that barely vary about its level (the reason those
rules only warn); and a run of fewer than ``min_certain_updates`` updates that has ended so is
judged on them (its budget was the trial's).

Explained variance is never used alone from a live check: it is ~0 in healthy runs whose rollouts
hold no episode end (near-constant targets), and in A2C's 5-step rollouts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from stability import advice, keys, references
from stability._numbers import is_real
from stability.detectors._base import (
    Detector,
    is_continuous,
    median,
    near_deterministic_since,
    progress,
    returns_rose,
    window_size,
)
from stability.findings import Finding
from stability.signals import History


class StuckValueLoss(Detector):
    name = "stuck_value_loss"

    def detect(self, history: History, t: dict[str, Any], final: bool) -> Finding | None:
        n = len(history)
        if n < 3 or not history.has("value_loss") or not history.has("explained_variance"):
            return None
        if n < t["min_updates"] and not final:
            return None
        done = progress(history)
        if not final and (done is None or done < t["min_progress"]):
            return None
        w = window_size(history, t) if n >= 2 * t["min_window"] else max(1, n // 2)
        early = median(history.before("value_loss", w))
        late = median(history.values("value_loss", last=w))
        ev = median(history.values("explained_variance", last=w))
        evidence: dict[str, Any] = {
            "value_loss_first_window": early,
            "value_loss_last_window": late,
            "explained_variance_median": ev,
            "window_updates": w,
        }
        if not (math.isfinite(early) and math.isfinite(late) and math.isfinite(ev)):
            return None
        evidence["ev_best"] = max(
            (v for v in history.values("explained_variance") if math.isfinite(v)), default=math.nan
        )
        clear = _against_the_returns(history, t, w, evidence, final)
        if clear is False or (clear is None and not _stuck_by_loss(history, t, w, evidence, final)):
            return None
        causes, patches = _causes(history, t, evidence)
        # With a reference return, once the run has ended: True (the policy learns: a warning),
        # False (it got under learned_fraction of the way: explained variance alone then decides)
        learned = _learned(history, t, evidence) if final else None
        # Fewer than min_certain_updates updates or min_certain_steps env steps: a critic that has
        # not fit yet may only need more of them (a smoke-test budget); a warning, never a stop.
        # A run that has ended on its budget of updates (min_certain_steps or more) with its
        # returns short of the reference is judged on what it had: the budget was the trial's,
        # and neither its critic nor its policy got anywhere on it.
        few = n < t["min_certain_updates"]
        short = history.last_step < t["min_certain_steps"] or (few and learned is not False)
        if short:
            causes.insert(
                0, f"only {n} updates over {history.last_step} steps: the critic may not have had the time to fit"
            )
        elif few:
            causes.insert(
                0,
                f"only {n} updates over {history.last_step} steps, judged on them: the run has ended with its "
                "returns short of the reference, so its budget was spent on a critic that did not fit",
            )
        pinned_beside = bool(evidence.get("pinned_beside_deterministic"))
        ev_only = bool(evidence.get("explained_variance_only")) and learned is not False
        unsure = ev_only or pinned_beside
        # Certain only once the run has ended, on every path: mid-run, a critic off its targets
        # may still fit them (a learning rate that decays, a critic lagging a policy that
        # improves), and a certain finding stays in the verdict. Before the end it is a warning.
        live = not final
        if live:
            causes.append("judged when the run ends: a critic off its targets mid-run may still fit them")
        if pinned_beside:
            causes.insert(
                0,
                "the critic predicts a constant while the policy is near-deterministic: its episodes "
                "barely vary, and a constant at their level fits them (a plain log does not show the level)",
            )
        elif ev_only:
            ratio = evidence["value_loss_over_episode_return_sq"]
            why = (
                "too large to be in their units (rewards scaled up before the critic): explained variance "
                "alone says stuck"
                if evidence.get("value_loss_units_differ")
                else "explained variance alone says stuck, which a critic fitting targets that barely vary also shows"
            )
            causes.insert(0, f"its loss is {ratio:.2g} of the episodes' squared discounted return: {why}")
        elif evidence.get("constant_critic_scaled_targets"):
            ratio = evidence["value_loss_over_episode_return_sq"]
            causes.insert(
                0,
                f"its loss is {ratio:.2g} of the episodes' squared discounted return (rewards scaled up before "
                "the critic), and it explained none of its targets' variance at any update: whatever their "
                "units, it has learnt nothing of them",
            )
        if learned:  # first: it is why the finding is a warning
            causes.insert(0, _learned_message(history.context, evidence))
        elif learned is False and evidence.get("explained_variance_only"):
            causes.insert(0, _short_message(history.context, evidence))
        if clear:
            message = _off_message(*_clear_error(evidence))
        elif evidence.get("critic_not_trained"):
            message = (
                f"vf_coef {history.context['vf_coef']:g} leaves the critic untrained: it explains {ev:.2f} of its "
                f"targets' variance (value loss {early:.3g} -> {late:.3g})"
            )
        elif evidence.get("off_the_lambda_returns"):
            message = (
                f"value loss has not fallen ({early:.3g} -> {late:.3g}): the critic is off the returns' level by "
                f"about {evidence['value_error_over_lambda_return']:.2f} of it, explaining {ev:.2f} of their variance"
            )
        elif evidence.get("ev_below_mean"):
            message = f"explained variance stays {ev:.2f}: the critic is further off its targets than their mean"
        elif evidence.get("never_fit_gaussian"):
            message = (
                f"explained variance stays {ev:.2f} and was never over {evidence['ev_best']:.2f} at any update: "
                "the critic has not learnt what the states are worth"
            )
        else:
            message = f"value loss has not fallen ({early:.3g} -> {late:.3g}) and explained variance stays {ev:.2f}"
        unreferenced = _reference_advice(history, learned, final)
        if unreferenced:  # what a sweep's summary counts: findings a reference return could excuse
            evidence[keys.UNREFERENCED_RISE] = True
        return Finding(
            self.name,
            history.step_of(n - w),
            message,
            evidence,
            advice.texts(patches) + unreferenced,
            causes,
            certain=not (short or unsure or live or learned),
            patches=patches,
        )


def _stuck_by_loss(history: History, t: dict[str, Any], w: int, evidence: dict[str, Any], final: bool) -> bool:
    """The rules on the logged value loss and explained variance (the first two lists above)."""
    early, late = evidence["value_loss_first_window"], evidence["value_loss_last_window"]
    ppo_style, best_ev = history.has("approx_kl"), evidence["ev_best"]
    # PPO-style batches make explained variance a reliable number: a critic that never
    # explained ev_max of the returns' variance at any update of the whole run has not fit,
    # whether or not its loss fell (it may have fallen with its targets). Judged only once the
    # run has ended: mid-run, a slow critic (noisy rewards) may not have got there yet, and a
    # live check would stop it.
    never_fit = final and ppo_style and math.isfinite(best_ev) and best_ev <= t["ev_max"]
    evs = history.values("explained_variance", last=w)
    ev, fell = evidence["explained_variance_median"], late < t["fall_ratio"] * early
    rms = history.values("return_rms", last=w)
    if rms:
        relative = late / max(median(rms) ** 2, 1e-12)
        evidence["value_loss_over_return_sq"] = relative
        # Still relative_alone of the returns' mean square: whatever explained variance says
        # (it can track their variation around a badly wrong level) and however far the loss
        # fell (with its targets: a shrinking reward, a policy that stopped moving), the critic
        # has not learnt the returns. Healthy critics of the corpus stay under 0.15.
        alone = relative >= t["relative_alone"]
        usual = ev <= t["ev_max"] and not fell and relative >= t["relative_floor"]
        return alone or usual or (never_fit and relative >= t["relative_never_fit"])
    returns = [v for v in history.values("ep_return")[-w:] if math.isfinite(v)]  # the window's episodes
    if ev > t["ev_max"] or _paid_nothing(returns):
        return False
    # A vf_coef under vf_coef_untrained (the run's own, from the model or the config given to
    # diagnose) scales the critic's loss in the gradient to nothing: the critic is not trained, and
    # one that explains at most ev_max of its targets' variance once the run has ended has not fit
    # them. Its loss rises or falls with the targets alone, and its scale is not read here.
    vf = history.context.get("vf_coef")
    untrained = final and isinstance(vf, (int, float)) and vf < t["vf_coef_untrained"]
    if untrained:
        evidence["critic_not_trained"] = True  # what decided: the message says so
    lengths = [v for v in history.values("ep_length")[-w:] if math.isfinite(v) and v > 0]  # the same episodes
    paid = _target_units(history.context)
    returns = [v * paid for v in returns]  # in the critic's targets' units (x1 without a reward_scale)
    rate = _reward_rate(returns, lengths)
    scale = _discounted_scale(history, returns, rate)
    if paid != 1.0:
        evidence.update(reward_scale_read=paid, scaled_return_scale=scale)  # _causes names the scale
    episode = late / max(scale**2, 1e-12) if math.isfinite(scale) else math.nan
    pinned = sum(abs(v) < t["ev_pinned"] for v in evs) / max(len(evs), 1)
    evidence.update(value_loss_over_episode_return_sq=episode, ev_pinned_share=pinned)
    # A loss over relative_units_max of that square, while explained variance is not below the
    # mean's bar, cannot be in the episodes' units: a critic off by more than three times the
    # returns' whole scale explains far less than nothing of them. Its rewards reached it scaled up
    # (normalised from a tiny raw reward), and the estimate says nothing of its fit.
    # (A scale of 0, the window's median episode paying nothing, is no scale: not this rule.)
    units = scale > 0 and math.isfinite(episode) and episode >= t["relative_units_max"] and ev > t["ev_below_mean"]
    if units:
        evidence["value_loss_units_differ"] = True
    # The loss is against GAE's lambda-returns (A2C's n-step returns), which bootstrap from the
    # critic's own values, so a critic off the returns' level by a fraction f of it logs a loss of
    # about (f x the lambda-return scale)^2 (see _lambda_scale), far under the discounted return's
    # square. (A critic whose error varies from state to state is not shrunk so: its loss reads
    # as a larger f than it has.) Once the run has ended, a critic that has not fit (explained
    # variance at or under ev_max at every update of a PPO-style log's last window, whatever it
    # was before: one early update at 0.21-0.28 had kept Pendulum critics 0.69-0.83 off their level
    # out of the rule; at or under it in the median of an A2C-style log's last window, whose every
    # value is one short rollout's), whose loss has not fallen, is stuck where f reaches
    # critic_error_off (the callback's critic_error bar).
    # Only where every episode of the window lasted one length (a time limit, at which SB3
    # bootstraps): an episode that ends by failure drops its last targets to the rewards left,
    # an error of the level's own size for a critic at that level that cannot foresee the end:
    # healthy CartPole A2C critics read 0.8-1.9 off, as stuck ones do.
    lam = _lambda_scale(history, rate, ppo_style)
    off_level = math.sqrt(late) / lam if lam > 0 and math.isfinite(lam) and late >= 0 else math.nan
    evidence["value_error_over_lambda_return"] = off_level
    if ppo_style:  # no update of the last window explained over ev_max of the targets' variance
        unfit = final and max((v for v in evs if math.isfinite(v)), default=math.inf) <= t["ev_max"]
    else:
        unfit = final and ev <= t["ev_max"]
    one_length = bool(lengths) and max(lengths) <= ONE_LENGTH_SPAN * min(lengths)
    level_off = unfit and one_length and not fell and not units and math.isfinite(off_level)
    level_off = level_off and off_level >= t["critic_error_off"]
    if level_off:
        evidence["off_the_lambda_returns"] = True  # what decided: the message says so
    # A critic pinned at a constant beside a policy near-deterministic over the whole window: one
    # action everywhere makes the episodes alike, a constant at their level is a critic that fits
    # them, and a plain log cannot tell the level (where the rule above does, it decides; not from
    # an A2C-style log: one action everywhere may fail at one step every episode, one length that
    # is no time limit, and a constant critic at its 5-step targets' mean then logs a loss of
    # their own size from the steps before each end). The policy's collapse is entropy_collapse's
    # to name (a learning rate that saturated both); this finding is then a warning.
    decided = level_off and ppo_style
    if pinned >= t["pinned_share"] and not decided and _deterministic_throughout(history, t, w):
        evidence["pinned_beside_deterministic"] = True
    big = not fell and math.isfinite(episode) and episode >= t["relative_floor_episode"] and not units
    if ppo_style:
        # Explained variance says nothing of a critic whose loss is under relative_fit_episode of
        # the targets' estimated square (an error of a tenth of their scale): targets that barely
        # vary about their level leave it ~0 however well the level is fit (a sparse reward, a
        # long episode). Neither explained-variance rule then calls it stuck. A loss under
        # relative_fit_episode_min of it is no such evidence: the critic's targets are then on
        # another scale than the episodes' returns (rewards scaled down before the critic), and
        # the estimate says nothing either way.
        fits = math.isfinite(episode) and t["relative_fit_episode_min"] <= episode < t["relative_fit_episode"]
        if fits:
            evidence["value_loss_fits_episode_scale"] = True
        flat_critic = not fell and pinned >= t["pinned_share"] and not returns_rose(history, w)
        by_ev = not fits and (flat_critic or never_fit)
        if by_ev and not big and not level_off and not untrained:
            _unsure_below_floor(episode, t, evidence, constant=flat_critic and never_fit)
        return big or by_ev or level_off or untrained
    # A2C-style logs: each logged explained variance is one short rollout's (n_steps x n_envs
    # samples), noisy around 0 when healthy. A window median of ev_below_mean or less, once the
    # run has ended: the critic's values are further from the targets than the targets' own mean
    # is. (Pinned at 0 is not read: a constant critic at the returns' level is one the label
    # calls fit, and a plain log cannot tell its level; see conf/stability.yaml.)
    worse_than_mean = final and ev <= t["ev_below_mean"]
    if worse_than_mean and not big and not level_off and not untrained:
        evidence["ev_below_mean"] = True  # what decided: the message says so
        _unsure_below_floor(episode, t, evidence)
    # A Gaussian policy's critic (continuous control, where the returns vary with the state: a
    # pendulum's angle, a car's position) that never explained gaussian_ev_best_max of its targets'
    # variance at any update of the whole run, once the run has ended, beside returns that did not
    # rise over the window and a policy that is not near-deterministic: short rollouts make each
    # value noisy, but a critic that learns the state's worth explains most of it at some update.
    # (Not a discrete policy's: a survival env's targets barely vary once it is mastered, and a
    # critic at their level explains ~0 of them; nor one that only acts one way, whose episodes
    # are alike.)
    never_fit_gaussian = (
        final
        and is_continuous(history)
        and math.isfinite(best_ev)
        and best_ev <= t["gaussian_ev_best_max"]
        and bool(returns)  # the window's episodes, whose returns must be seen not to rise
        and not returns_rose(history, w)
        and not _deterministic_throughout(history, t, w)
    )
    if never_fit_gaussian and not (big or worse_than_mean or level_off or untrained):
        evidence["never_fit_gaussian"] = True  # what decided: the message says so
        _unsure_below_floor(episode, t, evidence)
    return big or worse_than_mean or level_off or untrained or never_fit_gaussian


RETURN_RECORDS = 3  # records read at each end of a run for its return there
# the window's longest logged episode length at most this times its shortest: every episode
# lasted one length (a time limit), as the lambda reading needs (see _stuck_by_loss)
ONE_LENGTH_SPAN = 1.01
NO_REFERENCE = (
    "the returns rose, and no reference return is known to tell how far: if this run's policy did "
    "learn, its critic only lags it (a warning); give the env's return when solved to tell "
    "(stability.reference_return in a sweep, --reference-return or --env to diagnose)"
)
RECENT_RECORDS = 5  # records of the episodes that ended since the one before, read at the run's end


def _learned(history: History, t: dict[str, Any], evidence: dict[str, Any]) -> bool | None:
    """The run's policy learns despite its critic: with a reference return in the context (the
    spec's, or the env's registered reward threshold), its episode return at the end got at least
    ``learned_fraction`` of the way from its return at the start to it (or reached it, where it
    started at or past it). Start and end are the medians of the first and last ``RETURN_RECORDS``
    records (in SB3 logs each is already a mean over the last 100 episodes, so it lags the policy;
    a window's median would lag it further: the quickstart's gamma 0.999 trial logs 38 -> 163 over
    its first and last quarters, 18 -> 186 at its ends, and its policy returns 450-500 when
    evaluated). Where the callback recorded ``ep_return_recent`` (the episodes that ended since its
    record before), the end is the median of its last ``RECENT_RECORDS`` records instead: a mean
    over 100 episodes of 1000 steps covers most of a 100k-step run (a MountainCar A2C whose last
    episodes returned 73 on average logged -5, a PPO whose last ones returned 84 logged 22). The
    start stays the logged one: early, the 100 episodes are the run's first and no older. Without a
    reference, the bound of an env paid per step survived, or charged per step until the episode
    ends (:func:`_survival_ceiling`), stands for one; None without either."""
    reference = history.context.get("reference_return")
    ceiling = None
    if not isinstance(reference, (int, float)) or not math.isfinite(reference):
        ceiling = _survival_ceiling(history, t)
        if ceiling is None:
            return None  # before the returns are read: without a reference, _rose reads them for the advice
        reference = ceiling[0]
    ends = _ends(history)
    if ends is None:
        return None
    first, last = ends
    bar = first + t["learned_fraction"] * (reference - first) if reference > first else reference
    evidence.update(return_start=first, return_end=last, reference_return=float(reference))
    if ceiling is not None:
        rate, limit = ceiling[1:]
        evidence.update(
            reference_source=f"the most an episode can return: its {limit}-step time limit at the {rate:.3g} "
            "a step its episodes were paid"
            if rate > 0
            else f"the most an episode can return at a cost of {-rate:.3g} a step until it ends: 0, an end at once",
        )
    return last >= bar


def _survival_ceiling(history: History, t: dict[str, Any]) -> tuple[float, float, int] | None:
    """``(ceiling, rate, time limit)`` where the run's episodes were paid a steady reward per step
    survived: every record's return over its length within ``survival_rate_tolerance`` of their
    median rate (positive), over lengths that vary by ``survival_length_span`` or more (so that the
    return follows the length, not a fixed-length episode's sum), all within the env's time limit
    (``time_limit`` in the context). Such an env's return can reach at most its limit times that
    rate: CartPole's 1 a step over 200 steps on v0, whatever its reward_threshold. Surviving to the
    limit is such an env's task, so :func:`_learned` reads the bound as the reference, both ways.
    A steady negative rate is a cost paid per step until the episode ends (Acrobot's -1, with
    whatever noise or time limit): ending sooner is the task, and the most an episode can return
    is 0, an end at once, which stands for the reference the same way (Acrobot's registered -100
    is 80% of the way to it from an untrained policy's -500). None otherwise."""
    limit = references.whole_steps(history.context.get(references.TIME_LIMIT))
    if limit is None:
        return None
    at_r, returns = history.arrays("ep_return")
    at_l, lengths = history.arrays("ep_length")
    _, i, j = np.intersect1d(at_r, at_l, assume_unique=True, return_indices=True)
    returns, lengths = returns[i], lengths[j]
    keep = np.isfinite(returns) & np.isfinite(lengths) & (lengths > 0)
    returns, lengths = returns[keep], lengths[keep]
    if len(returns) < t["survival_records"] or lengths.max() > limit:
        return None
    rates = returns / lengths
    rate = float(np.median(rates))
    steady = rate != 0 and bool(np.all(np.abs(rates / rate - 1) <= t["survival_rate_tolerance"]))
    if not steady or lengths.max() < t["survival_length_span"] * lengths.min():
        return None
    return max(rate * limit, 0.0), rate, limit


def _reference_advice(history: History, learned: bool | None, final: bool) -> list[str]:
    """Once the run has ended with its returns risen and no reference return to measure the rise
    against: the hard negative "a critic lagging a policy that learns" cannot be told apart, and on
    the corpus it is what this finding gets wrong most on envs without one (CartPole with another
    time limit or noisy rewards: healthy runs that learned, flagged stuck). Say what would tell it."""
    return [NO_REFERENCE] if final and learned is None and _rose(history) else []


def _ends(history: History) -> tuple[float, float] | None:
    """The run's episode return at its start and at its end, as :func:`_learned` reads them; None
    with fewer than two return records."""
    returns = [v for v in history.values("ep_return") if math.isfinite(v)]
    if len(returns) < 2:
        return None
    k = min(RETURN_RECORDS, max(1, len(returns) // 4))
    first, last = median(returns[:k]), median(returns[-k:])
    recent = [v for v in history.values("ep_return_recent") if math.isfinite(v)]
    if len(recent) >= 2 * RECENT_RECORDS:  # the callback's: the policy's own returns at the end
        last = median(recent[-RECENT_RECORDS:])
    return first, last


def _rose(history: History) -> bool:
    """The run's episode return at its end above its start (:func:`_ends`)."""
    ends = _ends(history)
    return ends is not None and ends[1] > ends[0]


def _returns_read(ctx: dict[str, Any], evidence: dict[str, Any]) -> tuple[float, float, float, str]:
    """What :func:`_learned` read (start, end, reference) and the reference's source, as text."""
    first, last, reference = (evidence[k] for k in ("return_start", "return_end", "reference_return"))
    source = evidence.get("reference_source") or ctx.get("reference_source")
    return first, last, reference, f" ({source})" if source else ""


def _short_message(ctx: dict[str, Any], evidence: dict[str, Any]) -> str:
    first, last, reference, of = _returns_read(ctx, evidence)
    share = f" ({(last - first) / (reference - first):.0%} of the way)" if reference > first else ""
    return (
        f"the policy is not learning either: its returns went from {first:.4g} to {last:.4g}{share}, short of the "
        f"reference return {reference:.4g}{of}. Beside it, explained variance that stays near 0 says the critic "
        "learnt nothing, not that it fits returns which barely vary"
    )


def _learned_message(ctx: dict[str, Any], evidence: dict[str, Any]) -> str:
    first, last, reference, of = _returns_read(ctx, evidence)
    where = (
        f"rose from {first:.4g} to {last:.4g}, {(last - first) / (reference - first):.0%} of the way to"
        if reference > first
        else f"went from {first:.4g} to {last:.4g}, at or past"
    )
    return (
        f"the policy learns regardless: its returns {where} the reference return {reference:.4g}{of}. "
        "A critic that lags a policy which learns is a warning, not a failure"
    )


def _deterministic_throughout(history: History, t: dict[str, Any], w: int) -> bool:
    """The policy near-deterministic (entropy_collapse's bars) at every update of the last window
    that logged its entropy or std."""
    return near_deterministic_since(
        history,
        len(history) - w,
        t["deterministic_entropy_fraction"],
        t["deterministic_std"],
        t["deterministic_entropy_drop"],
    )


def _unsure_below_floor(episode: float, t: dict[str, Any], evidence: dict[str, Any], constant: bool = False) -> None:
    """Explained variance alone decided, against a loss under ``relative_floor_episode`` of the
    episodes' squared discounted return (and not so far under it that the scales differ), or one
    so far over it that the scales differ (nothing then says how far off the critic is). Such a
    critic is off its targets by under a third of their estimated scale: explained variance near 0
    then says the targets vary little about a level the critic may well fit (a constant critic at
    the returns' level, a policy that barely varies what it does), as often as it says the critic
    learnt nothing; a plain log cannot tell which. A warning, never a certain verdict.

    Except, where the scales differ, a ``constant`` critic (a PPO-style log's: pinned at ~0 over
    the window with its loss not fallen and the returns not risen, and never over ``ev_max`` at
    any update of the run). Explained variance has no units: a loss that large says the targets
    the critic was fit to are large in its units (it is their spread about the critic's constant,
    or more), and a critic that explained none of their variance at any update has learnt nothing
    of them (rewards scaled a few hundred times and not normalised)."""
    below = math.isfinite(episode) and t["relative_fit_episode_min"] <= episode < t["relative_floor_episode"]
    units = bool(evidence.get("value_loss_units_differ"))
    if below or (units and not constant):
        evidence["explained_variance_only"] = True
    elif units:
        evidence["constant_critic_scaled_targets"] = True


def _clear_error(evidence: dict[str, Any]) -> tuple[float, float]:
    """The error and r2 that decided: the second half's pooled records where a window was too thin
    (the last window may still hold its own median then), else the last window's."""
    if "critic_error_second_half" in evidence:
        return evidence["critic_error_second_half"], evidence["critic_r2_second_half"]
    return evidence["critic_error_last"], evidence["critic_r2_last"]


def _paid_nothing(returns: list[float]) -> bool:
    """Every episode that ended over the window returned exactly 0 (a sparse reward
    never found, or no longer found). A plain log then holds no measure of the critic: the
    episodes give its targets no scale, and explained variance against targets with no spread is
    ~0 whatever the critic predicts (the callback's own measure skips such returns for the same
    reason). What the run needs is the reward, which the other detectors name."""
    return bool(returns) and all(v == 0 for v in returns)


def _off_message(error: float, r2: float) -> str:
    size = f"{error:.0%} of their RMS" if error < 10 else f"{error:.3g} times their RMS"
    share = f" and explains {r2:.2f} of their variance" if math.isfinite(r2) else ""
    return f"the critic is off the discounted returns its episodes paid by {size}{share}"


def _against_the_returns(
    history: History, t: dict[str, Any], w: int, evidence: dict[str, Any], final: bool
) -> bool | None:
    """The callback's critic_error / critic_r2 where they are clear: False (close to the returns over
    the last window), True (once the run has ended, far off them over the last window and the window
    ending half way), None (between, or fewer than ``critic_records`` records in a window)."""
    k, n = t["critic_records"], len(history)
    series = {key: history.arrays(key) for key in ("critic_error", "critic_r2")}  # read once, sliced twice

    def window(key: str, a: int, b: int) -> list[float]:
        at, values = series[key]
        chosen = values[(at >= a) & (at < b)]
        return [float(v) for v in chosen[np.isfinite(chosen)]]

    medians = {}
    for name, (a, b) in (("last", (n - w, n)), ("half", (n // 2 - w, n // 2))):
        errors, r2s = window("critic_error", a, b), window("critic_r2", a, b)
        if len(errors) < k:
            return _sparse(window("critic_error", n // 2, n), window("critic_r2", n // 2, n), t, evidence, final)
        # returns with no spread (a constant the critic may well predict) leave r2 undefined
        medians[name] = (median(errors), median(r2s) if r2s else math.nan)
        evidence[f"critic_error_{name}"], evidence[f"critic_r2_{name}"] = medians[name]
        if name == "last" and medians[name][0] < t["critic_error_fit"]:
            return False
    # Judged only once the run has ended, like the never-fit rule: how a live check would treat
    # a slow critic has not been measured, and stop_on would act on it.
    off = all(e >= t["critic_error_off"] and not r2 >= t["critic_r2_max"] for e, r2 in medians.values())
    return True if final and off else None


def _sparse(
    errors: list[float], r2s: list[float], t: dict[str, Any], evidence: dict[str, Any], final: bool
) -> bool | None:
    """Too few records to fill the windows (episodes of hundreds of steps end a few times a run):
    the second half's records together, when there are at least ``critic_records_sparse`` and all
    of them are on one side of the label's bar. False when every one is under ``critic_error_fit``;
    True, once the run has ended, when every one is at or above ``critic_error_off`` and none
    explains ``critic_r2_max`` of the returns' variance. Each record covers a whole episode's
    states, so a few of them measure more than their count suggests. Records that disagree, or a
    run still going, are left to the loss rules (None)."""
    if len(errors) < t["critic_records_sparse"]:
        return None
    evidence.update(
        critic_records_second_half=len(errors),
        critic_error_second_half=median(errors),
        critic_r2_second_half=median(r2s) if r2s else math.nan,
    )
    if max(errors) < t["critic_error_fit"]:
        return False
    off = min(errors) >= t["critic_error_off"] and not any(r2 >= t["critic_r2_max"] for r2 in r2s)
    return True if final and off else None


# (gae_lambda, n_steps) where a plain log gives neither: SB3's defaults for PPO-style logs (those
# with approx_kl: PPO, RecurrentPPO, CleanRL's PPO) and for the others (A2C)
_PPO_ROLLOUT = (0.95, 2048)
_A2C_ROLLOUT = (1.0, 5)


def _lambda_scale(history: History, rate: tuple[float, float] | None, ppo_style: bool) -> float:
    """The size of the targets an on-policy critic that predicts 0 is fit to: GAE's lambda-returns
    (A2C's n-step returns are the case lambda = 1) hold the rewards of the steps left in the
    rollout (n_steps a rollout, at most an episode's length), each decayed by gamma x lambda,
    before the critic's own value takes over. This is the mean reward per step summed so, as the
    root mean square over a rollout's positions: about 1 / (1 - gamma x lambda) steps of reward for
    a PPO rollout of thousands of steps (17 at SB3's 0.99 and 0.95), about 3 for A2C's 5-step one.
    gae_lambda and n_steps come from the run's context, else SB3's defaults for the log's style
    (PPO 0.95 and 2048; A2C 1.0 and 5). A critic predicting a constant c where the returns' level
    is L is fit to targets about (L - c) / L times this size off its output: the square root of its
    loss over this is how far off their level it is, as a fraction of it. ``rate`` is the window's
    (see _reward_rate)."""
    lam_default, steps_default = _PPO_ROLLOUT if ppo_style else _A2C_ROLLOUT
    decay = float(history.context.get("gamma", 0.99)) * float(history.context.get("gae_lambda", lam_default))
    steps = int(history.context.get("n_steps", steps_default))
    if rate is None or steps < 1:
        return math.nan
    per_step, length = rate
    left = np.minimum(np.arange(steps, 0, -1), length)  # steps left to the rollout's end (or episode's)
    sums = (1 - decay**left) / (1 - decay) if decay < 1 else left
    return per_step * float(np.sqrt(np.mean(sums**2)))


def _discounted_scale(history: History, returns: list[float], rate: tuple[float, float] | None) -> float:
    """The size of the critic's targets estimated from a plain log: the mean reward per step
    (the window's finite episode ``returns`` / their length) summed over the episode with the
    discount (gamma from the run's context, else 0.99). The targets' scale when rewards reach the
    critic as the env paid them; not when they reach it normalised (on Pendulum it then overstates
    them). Without episode lengths (``rate`` None, see _reward_rate), the episodes' whole return."""
    if not returns:
        return math.nan
    if rate is None:
        return abs(median(returns))
    gamma = float(history.context.get("gamma", 0.99))
    per_step, length = rate
    return per_step * (1 - gamma**length) / (1 - gamma) if gamma < 1 else per_step * length


def _target_units(ctx: dict[str, Any]) -> float:
    """What the critic's targets are per unit of the episodes' logged return: the context's
    ``reward_scale`` (rlsweep's knob multiplies the rewards after the episode recorder and before
    the algorithm), where it is a positive finite number and the rewards are not normalised (then
    the targets are in neither unit, as without the knob); 1 otherwise."""
    scale = ctx.get("reward_scale")
    if not is_real(scale) or ctx.get("norm_reward"):
        return 1.0
    return float(scale) if math.isfinite(scale) and scale > 0 else 1.0


def _reward_rate(returns: list[float], lengths: list[float]) -> tuple[float, float] | None:
    """The window's mean reward per step (the median of its episodes' ``returns`` over the median
    of their ``lengths``, in size) and that length; None without returns or logged lengths."""
    if not returns or not lengths:
        return None
    length = median(lengths)
    return abs(median(returns) / length), length


def _causes(history: History, t: dict[str, Any], evidence: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    ctx = history.context
    causes: list[str] = []
    patches: list[dict[str, Any] | None] = []
    advice.name(advice.weight_decay(ctx, t["weight_decay"], "critic"), causes, patches)
    advice.name(advice.value_clip(ctx, t["value_clip_tiny"]), causes, patches)
    # before normalising: VecNormalize divides targets of 1e-8 by ~eps-sized spreads
    advice.name(advice.tiny_reward_scale(ctx, t["reward_scale_tiny"]), causes, patches)
    rms = history.values("return_rms")
    if rms and median(rms) > t["return_scale"] and not ctx.get("norm_reward"):
        evidence["return_rms_median"] = median(rms)
        causes.append(f"returns of scale {median(rms):.3g} reach the critic unnormalised")
        patches.append(advice.make(ctx, "normalize", {"reward": True}, "bring the returns the critic fits near 1"))
    elif evidence.get("scaled_return_scale", 0.0) > t["return_scale"]:  # the config's reward_scale made them so
        scaled = evidence["scaled_return_scale"]
        causes.append(f"reward_scale {ctx['reward_scale']:g} makes returns of scale {scaled:.3g} reach the critic")
        patches.append(advice.make(ctx, "normalize", {"reward": True}, "bring the returns the critic fits near 1"))
    vf = ctx.get("vf_coef")
    if isinstance(vf, (int, float)) and vf < 0.05:
        causes.append(f"vf_coef {vf:g}: the critic's loss barely reaches the gradient")
        patches.append(advice.make(ctx, "vf_coef", 0.5, "train the critic"))
    ev = evidence.get("explained_variance_median")
    if ev is not None and abs(ev) < 1e-3:
        causes.append(
            f"the critic predicts a near-constant (explained variance {ev:.1e}): its weights are pinned "
            "or its output is saturated"
        )
    head = ctx.get("value_head_weight_std")
    if head is not None and head > t["value_head_std_max"]:
        causes.append(f"the value head starts large (weight std {head:.2g})")
        patches.append(advice.make(ctx, "init_gains", {"value": 1.0}, "start the value head at CleanRL's scale"))
    if not patches and not ctx.get("norm_reward"):
        patches.append(advice.make(ctx, "normalize", {"reward": True}, "returns near 1 are easier to fit"))
    gamma = ctx.get("gamma")
    if isinstance(gamma, (int, float)) and gamma >= t["long_horizon_gamma"]:
        # last: a shorter horizon changes what the policy optimises, the patches above do not
        horizon = "no discount" if gamma >= 1 else f"a horizon of {1 / (1 - gamma):.0f} steps"
        causes.append(
            f"gamma {gamma:g} ({horizon}): the critic fits sums over whole episodes, whose scale and "
            "spread grow with their length"
        )
        patches.append(advice.make(ctx, "gamma", 0.99, "a horizon of 100 steps gives the critic targets it can fit"))
    return causes, advice.collect(*patches)
