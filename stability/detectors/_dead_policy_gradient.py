"""``dead_policy_gradient``: the policy has stopped changing while the learning rate is not 0.

Judged over the last ``window_fraction`` of updates, once ``min_progress`` of the budget is done
(or at the end of a run of unknown budget), from ``min_updates`` updates mid-run and from
``min_updates_final`` once the run has ended (a short budget of big rollouts has only a handful):
- PPO-style runs (approx_kl logged): clip_fraction about 0, and either approx_kl about 0 with
  entropy frozen over the window, or entropy still at its very first value (a policy that only
  jitters around its initial distribution: the report's entropy of exactly ln 16 with approx_kl
  ~1e-3 from noise). For a Gaussian policy the entropy measures only the std: its first value
  held says nothing, and the window's approx_kl summed must also be about 0 (a RecurrentPPO that
  learned 0 -> 75 on a spiky reward did it at ~1e-4 nats per update). clip_fraction near 1 is
  the opposite case (a decayed clip range clips everything) and never counts as dead, unless the
  logged clip range is under ``clip_range_tiny``: then every sample is clipped by a ratio that
  moved ~nothing, and clipping says nothing. A schedule that has taken the learning rate near 0
  is not a failure either.
- A2C-style runs (no approx_kl; A2C's policy_loss uses raw advantages, so it is never ~0):
  entropy and std frozen, and the actor's share of the gradient negligible or the advantages flat,
  or (discrete policies) the entropy still at its very first value (weight decay or an entropy
  bonus holding the policy at uniform while its gradient is not small); mid-run, not where that
  entropy drifts steadily away from its first value (a slow learner, judged once the run has ended).
- Either style, where the callback recorded the weights' norm (``param_norm``): a discrete
  policy's entropy frozen over the window, or a Gaussian's std never further than
  ``shrunk_std_drift_max`` from its first value, while the weights sit at ``weights_shrunk`` of
  their norm at the start or less. A network pulled that close to 0 (weight decay) computes about what it
  computed at the start, where SB3 starts a policy's outputs (an action head at gain 0.01, a
  log_std of 0, which decay also pulls to 0): its policy has not moved, whatever its gradients.
  The mirror of exploding_updates' tenfold growth. In view when it was set, only the weight-decay
  cases shrank their weights at all (to 0.04-0.12 of their start); a healthy run at a weight decay
  of 0.001 later ended at 0.84.
  Where no norm was recorded (an A2C-style plain log read with its config), the run's own weight
  decay stands for it: ``weight_decay_pins`` or more, through an optimizer that adds it to the
  gradient and normalises the sum (SB3's Adam and RMSprop), pulls every weight towards 0 by about
  the learning rate a step once the decay term outweighs the loss's gradient; AdamW's decoupled
  decay shrinks them by only lr x decay a step, and plain SGD's likewise, so neither counts. How
  far the weights can get is about the learning rate times the optimizer's steps: A2C at SB3's
  defaults steps once a rollout of 5 x n_envs steps, 7e-4 x 800 = 0.56 in 16k env steps with 4
  envs, about its weights' own size; a RecurrentPPO at a decay of 0.25 (3e-4 x 384 = 0.12) kept
  0.6 of its norm. A PPO-style log has approx_kl to decide from, and is left to it.
  Where neither decides (a plain A2C-style log of a Gaussian policy), a critic that predicts one
  value everywhere stands for them: explained variance within the stuck detector's ``ev_pinned`` of
  0 at every update of the window (each value is one short rollout's, noisy about 0 for any critic
  whose values vary with the state), beside the std held as above.
A converged policy that got there by learning (returns rose to their best and stay there) is not
dead: its entropy and KL still move, and its returns show the learning.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from stability import advice
from stability._numbers import is_real
from stability.detectors._base import (
    Detector,
    clipping_off,
    is_continuous,
    median,
    progress,
    rel_change,
    returns_rose,
    streak_start,
    weights_start,
    window_size,
)
from stability.findings import Finding
from stability.signals import History

_OFF_POLICY = {"SAC", "TD3", "TQC", "DDPG", "DQN", "QRDQN", "CrossQ"}


class DeadPolicyGradient(Detector):
    name = "dead_policy_gradient"

    def detect(self, history: History, t: dict[str, Any], final: bool) -> Finding | None:
        n = len(history)
        # Mid-run, min_updates before judging; at the end of a run, min_updates_final (a short
        # budget of big rollouts has only a handful, and a policy that never moved in all of them
        # is as dead as one that never moved in twenty).
        if n < t["min_updates_final" if final else "min_updates"] or history.context.get("algo") in _OFF_POLICY:
            return None
        done = progress(history)
        if not final and (done is None or done < t["min_progress"]):
            return None
        w = window_size(history, t) if n >= 2 * t["min_window"] else max(2, n // 2)
        lr = history.values("learning_rate")
        if lr and (lr[-1] <= 0 or lr[-1] < t["lr_min_fraction"] * max(lr)):
            return None
        evidence: dict[str, Any] = {"window_updates": w}
        frozen_entropy = _frozen(history, "entropy", w, t, evidence)
        if history.has("approx_kl"):
            kl = median(history.values("approx_kl", last=w))
            clip = median(history.values("clip_fraction", last=w)) if history.has("clip_fraction") else 0.0
            evidence.update(approx_kl_median=kl, clip_fraction_median=clip)
            # Clipping is movement of at least the clip range. Under clip_range_tiny every sample
            # is clipped by a ratio that moved ~nothing (a clip range of 1e-6 clipped 99% of them
            # while approx_kl stayed ~0 and the entropy at ln 2), so clipping says nothing then.
            # A clip range that is not logged (CleanRL) keeps clipping as movement.
            tiny = _tiny_clip_range(history, w, t, evidence)
            unclipped = clip < t["clip_fraction_max"] or tiny
            quiet = kl < t["kl_max"] and frozen_entropy is not False
            if is_continuous(history):
                # A Gaussian's entropy measures only its std, so a frozen entropy and a first
                # entropy never left say nothing of its mean. What the updates of the window moved
                # the policy by, all together, does: a per-update KL under kl_max, taken a few
                # dozen times, is a policy that is learning slowly, not a dead one.
                moved = _window_kl(history, w)
                evidence["window_kl_sum"] = moved
                dead = unclipped and quiet and moved < t["window_kl_max"]
            else:
                dead = unclipped and (quiet or _never_moved(history, t, evidence))
            movable = unclipped  # clipping is movement (see above), the shrunk weights' rule's too
            onset = None if tiny else streak_start(history, "clip_fraction", lambda v: v < t["clip_fraction_max"])
        else:
            frozen_std = _frozen(history, "std", w, t, evidence)
            starved = _actor_starved(history, w, t, evidence)
            # A discrete policy whose entropy never left its first value (a Gaussian's entropy
            # only measures its std, so this says nothing of its mean): as in PPO's case. A
            # Gaussian's std that never moved at all (see _std_never_moved) is the optimizer
            # moving nothing, mean included.
            if is_continuous(history):
                still = _std_never_moved(history, t, evidence)
            else:
                still = _never_moved(history, t, evidence) and (final or not _drifting(history, t, evidence))
            dead = bool(frozen_entropy) and frozen_std is not False and (starved or still)
            movable = True
            onset = n - w
        shrunk = not dead and movable and _held(history, frozen_entropy, t, evidence)
        shrunk = shrunk and (
            _weights_pinned(history, w, t, evidence)
            or _decay_pins(history, t, evidence)
            or _critic_constant(history, w, t, evidence)
        )
        if not (dead or shrunk) or returns_rose(history, w, at_best=True):  # converged by learning: not dead
            return None
        if _collapsed(history, t):  # frozen near determinism after moving there: entropy_collapse's case
            return None
        onset = n - w if onset is None else min(onset, n - w)
        causes, patches = _causes(history, w, t, evidence, shrunk)
        # A run of a few thousand env steps (a smoke test) has barely begun to move its policy:
        # said as a warning, never a stop.
        short = history.last_step < t["min_certain_steps"]
        if short:
            causes.insert(0, f"only {history.last_step} env steps: the policy may just not have moved yet")
        if "clip_range_median" in evidence:
            summary = (
                f"the policy has stopped changing (no KL, entropy frozen): a clip range of "
                f"{evidence['clip_range_median']:.2g} clips every sample before it can move"
            )
        elif shrunk and "weights_norm_over_start" in evidence:
            summary = (
                f"the policy has stayed where it started while lr > 0: its weights were pulled to "
                f"{evidence['weights_norm_over_start']:.2g} of their norm at the start"
            )
        elif shrunk and "weight_decay_pins" in evidence:
            summary = (
                f"the policy has stayed where it started while lr > 0: a weight decay of "
                f"{evidence['weight_decay_pins']:g} in {history.context['optimizer']} pulls its weights to about 0"
            )
        elif shrunk:
            summary = (
                f"the policy has stayed where it started while lr > 0: its std within {evidence['std_max_drift']:.0%} "
                "of its first value, its critic a constant (explained variance ~0 at every update of the window)"
            )
        elif history.has("approx_kl"):
            summary = "the policy has stopped changing (no KL, no clipping, entropy frozen) while lr > 0"
        else:
            summary = "the policy has stopped changing (entropy/std frozen, actor gets ~no gradient) while lr > 0"
        return Finding(
            self.name,
            history.step_of(onset),
            summary,
            evidence,
            advice.texts(patches) + _env_advice(causes),
            causes,
            certain=not short,
            patches=patches,
        )


def _tiny_clip_range(history: History, w: int, t: dict[str, Any], evidence: dict[str, Any]) -> bool:
    """The window's logged clip range is under ``clip_range_tiny`` (noted in the evidence)."""
    ranges = [v for v in history.values("clip_range", last=w) if math.isfinite(v)]
    level = median(ranges) if ranges else math.inf
    if level >= t["clip_range_tiny"]:
        return False
    evidence["clip_range_median"] = level
    return True


def _collapsed(history: History, t: dict[str, Any]) -> bool:
    """The entropy fell to under ``collapsed_fraction`` of its first value: the policy moved, to a
    near-deterministic one (a policy saturated from its first update keeps its first entropy).
    Always the first recorded value, never the uniform policy's entropy: a policy that starts
    saturated (huge output weights) and never moves is dead, and a plain log, which has only the
    recorded values, must reach the same verdict as the callback."""
    entropy = [v for v in history.values("entropy") if math.isfinite(v)]
    top = entropy[0] if entropy else 0.0
    if len(entropy) < 2 or top <= 0:
        return False
    return entropy[-1] < t["collapsed_fraction"] * top


def _frozen(history: History, name: str, w: int, t: dict[str, Any], evidence: dict[str, Any]) -> bool | None:
    if not history.has(name):
        return None
    change = rel_change(history.values(name, last=w))
    evidence[f"{name}_rel_change"] = change
    return bool(math.isfinite(change) and change < t["entropy_rel_change_max"])


def _never_moved(history: History, t: dict[str, Any], evidence: dict[str, Any]) -> bool:
    """Entropy still within ``entropy_rel_change_max`` of its first value, over the whole run."""
    entropy = [v for v in history.values("entropy") if math.isfinite(v)]
    if len(entropy) < 2:
        return False
    first, drift = entropy[0], max(abs(v - entropy[0]) for v in entropy)
    moved = drift / max(abs(first), 0.1)
    evidence.update(entropy_first=first, entropy_last=entropy[-1], entropy_max_drift=moved)
    return moved < t["entropy_rel_change_max"]


def _drifting(history: History, t: dict[str, Any], evidence: dict[str, Any]) -> bool:
    """A discrete policy's entropy drifting steadily away from its first value, however little so
    far: its distance from the first value tracks time (correlation ``drift_corr_min`` or more) and
    its median over the last quarter of the records is ``drift_growth`` times that over the second
    quarter or more. A slow learner's (a learning rate of 5e-5 on A2C: 0.0001 -> 0.0023 by half
    way, on its way to 0.04 nats from its start), not a policy held where it started (weight
    decay: a drift reached early and kept, its quarters alike). Noted in the evidence."""
    entropy = np.array([v for v in history.values("entropy") if math.isfinite(v)])
    q = len(entropy) // 4
    if q < 2:
        return False
    drift = np.abs(entropy - entropy[0])
    if drift.std() == 0:
        return False
    corr = float(np.corrcoef(np.arange(len(drift)), drift)[0, 1])
    early, late = float(np.median(drift[q : 2 * q])), float(np.median(drift[-q:]))
    evidence.update(entropy_drift_corr=corr, entropy_drift_late=late, entropy_drift_early=early)
    return corr >= t["drift_corr_min"] and late > 0 and late >= t["drift_growth"] * early


def _std_never_moved(history: History, t: dict[str, Any], evidence: dict[str, Any]) -> bool:
    """A Gaussian std within ``std_never_moved_max`` of its first value (a fraction) over the whole run.

    The std's parameter (SB3's state-independent log_std) gets a gradient from every update that
    gets one at all, and an optimizer that moves anything moves it: at a learning rate of 7e-5
    an A2C std drifted by 0.4% in 2,000 updates, at 1e-9 by 1e-7 (float32's resolution). A std
    that never left its first value in a whole run says the updates move nothing, the mean
    included. (The exception, a log_std initialised outside a clamp's bounds, whose parameter
    then gets no gradient while the mean learns, is a config error of its own.) A std already
    under ``deterministic_std`` is a near-deterministic policy: entropy_collapse's to name."""
    drift = _std_drift(history, t, evidence)
    return drift is not None and drift < t["std_never_moved_max"]


def _std_drift(history: History, t: dict[str, Any], evidence: dict[str, Any]) -> float | None:
    """How far a Gaussian's std got from its first value over the whole run, as a fraction of it
    (noted in the evidence); None with fewer than two records or a first std under
    ``deterministic_std`` (a near-deterministic policy: entropy_collapse's to name)."""
    std = [v for v in history.values("std") if math.isfinite(v) and v > 0]
    if len(std) < 2 or std[0] < t["deterministic_std"]:
        return None
    drift = max(abs(v - std[0]) for v in std) / std[0]
    evidence["std_max_drift"] = drift
    return drift


def _held(history: History, frozen_entropy: bool | None, t: dict[str, Any], evidence: dict[str, Any]) -> bool:
    """What must hold beside weights pulled to about 0 (:func:`_weights_pinned`) for the policy to
    be where it started: a discrete policy's entropy frozen over the window; a Gaussian's std
    never further than ``shrunk_std_drift_max`` from its first value. A Gaussian's entropy measures
    only its std, and with the weights (log_std among them) pulled towards 0, its std jitters about
    1 by a few percent from the gradients' noise (Pendulum with noisy rewards, a weight decay of
    0.6 on A2C: 3-4%, an entropy that moved 2.5% over the window, so not frozen), while its
    mean, computed by the shrunk network, stays about its first value. A std within 10% of its
    first value is under 0.01 nats of KL per action dimension from it."""
    if not is_continuous(history) or not history.has("std"):
        return frozen_entropy is True
    drift = _std_drift(history, t, evidence)
    return drift is not None and drift <= t["shrunk_std_drift_max"]


def _weights_pinned(history: History, w: int, t: dict[str, Any], evidence: dict[str, Any]) -> bool:
    """The weights' norm (the callback's ``param_norm``) over the last ``w`` records, as a median,
    at ``weights_shrunk`` of its start or less: the network has been pulled to about 0 and computes
    about its start's outputs. False where the norm was not recorded (plain logs)."""
    at, norms = history.arrays("param_norm")
    if not len(norms):
        return False
    start = weights_start(history, norms)
    late = [float(v) for v in norms[at >= len(history) - w] if math.isfinite(v)]
    if start is None or not late:
        return False
    ratio = median(late) / start
    evidence["weights_norm_over_start"] = ratio
    return ratio <= t["weights_shrunk"]


def _critic_constant(history: History, w: int, t: dict[str, Any], evidence: dict[str, Any]) -> bool:
    """Where the weights' norm was not recorded and no weight decay decided (an A2C-style plain
    log of a Gaussian policy, read alone or with a config whose decay is under the bar): the
    critic's explained variance within ``critic_ev_pinned`` of 0 (the stuck detector's
    ``ev_pinned``) at every update of the window. Each of those values is one short rollout's,
    noisy about 0 for a critic that computes anything that varies with the state (a healthy one,
    an untrained one at its random start); exactly 0, every time, is a critic that predicts one
    value everywhere: its weights pulled to about 0, as :func:`_weights_pinned` measures where the
    norm is recorded. Beside a std held where it started (:func:`_held`), the actor's are too. A
    discrete policy so held has its entropy frozen, which the rules above read; a PPO-style log has
    approx_kl (noted in the evidence)."""
    if history.has("param_norm") or history.has("approx_kl") or not is_continuous(history):
        return False
    evs = [v for v in history.values("explained_variance", last=w) if math.isfinite(v)]
    if len(evs) < t["min_window"] or any(abs(v) >= t["critic_ev_pinned"] for v in evs):
        return False
    evidence["critic_constant"] = True
    return True


_ADAPTIVE = frozenset({"adam", "rmsprop"})  # coupled L2 decay, normalised with the gradient


def _decay_pins(history: History, t: dict[str, Any], evidence: dict[str, Any]) -> bool:
    """Where the weights' norm was not recorded, from an A2C-style log: the context's weight decay
    at ``weight_decay_pins`` or more, through Adam or RMSprop (the context's optimizer; unknown is
    not enough), pulls the network to about 0 as :func:`_weights_pinned` measures it (noted in the
    evidence)."""
    if history.has("param_norm") or history.has("approx_kl"):
        return False  # measured: the norm decides; PPO-style: approx_kl does (see the module's text)
    decay, optimizer = history.context.get("weight_decay"), history.context.get("optimizer")
    if not is_real(decay) or decay < t["weight_decay_pins"]:
        return False
    if str(optimizer).lower() not in _ADAPTIVE:
        return False
    evidence["weight_decay_pins"] = float(decay)
    return True


def _window_kl(history: History, w: int) -> float:
    """The window's approx_kl values summed: how far its updates moved the policy, in nats, were
    each update's move independent of the others (a policy pushed the same way every update moves
    further; one that only jitters, about this far)."""
    return sum(max(v, 0.0) for v in history.values("approx_kl", last=w) if math.isfinite(v))


def _actor_starved(history: History, w: int, t: dict[str, Any], evidence: dict[str, Any]) -> bool:
    adv = history.values("adv_std", last=w)
    if adv and median(adv) < 1e-6:
        evidence["adv_std_median"] = median(adv)
        return True
    actor, total = history.values("grad_norm_actor", last=w), history.values("grad_norm", last=w)
    if actor and total:
        share = median(actor) / max(median(total), 1e-12)
        evidence["actor_grad_share"] = share
        return share < t["actor_grad_share_max"] and _clip_scales_all(history, w, evidence)
    return False


def _clip_scales_all(history: History, w: int, evidence: dict[str, Any]) -> bool:
    """Whether one gradient clip scaled the actor's gradient with the critic's over the window.

    A small actor share of the gradient norm starves the actor only through that clip: the total's
    size sets the one factor every gradient is multiplied by. With clipping off (``max_grad_norm``
    infinite), or on but never reached in the window (a logged clipped fraction of 0), the actor's
    gradient is applied in full, however large the critic's (an A2C critic head started 1000 times
    too large: the actor's share was 3e-4 while its policy moved as a healthy one's). Unknown (no
    ``max_grad_norm`` in the context, no clipped fraction logged): the share decides, as before."""
    if clipping_off(history):
        evidence["gradient_clipping_off"] = True
        return False
    clipped = [v for v in history.values("grad_clipped_fraction", last=w) if math.isfinite(v)]
    if clipped and max(clipped) == 0:
        evidence["gradient_clip_never_reached"] = True
        return False
    return True


def _causes(
    history: History, w: int, t: dict[str, Any], evidence: dict[str, Any], shrunk: bool
) -> tuple[list[str], list[dict[str, Any]]]:
    """Likely causes, and the knob patches that answer them (computed from the run's own config);
    ``shrunk``: the policy was found held by weights pulled to about 0."""
    causes: list[str] = []
    patches: list[dict[str, Any] | None] = []
    ctx = history.context
    if shrunk and "weights_norm_over_start" in evidence:
        causes.append(
            f"the weights shrank to {evidence['weights_norm_over_start']:.2g} of their norm at the start: the "
            "network is held near 0 and computes about its first outputs"
        )
    elif shrunk and evidence.get("critic_constant"):
        causes.append(
            "the critic predicts one value everywhere and the policy's std never left its start: a network held "
            f"near 0, which a weight decay of {t['weight_decay_pins']:g} or more through Adam or RMSprop does (set it "
            "to 0 if it has one)"
        )
    advice.name(advice.weight_decay(ctx, t["weight_decay"], "policy"), causes, patches)
    clip_norm = ctx.get("max_grad_norm")
    if isinstance(clip_norm, (int, float)) and 0 < clip_norm < t["grad_clip_tiny"]:
        causes.append(f"gradients are clipped to a norm of {clip_norm:.2g}: the optimizer's eps swallows what is left")
        patches.append(advice.make(ctx, "max_grad_norm", 0.5, "clip gradients at SB3's default norm"))
    target = ctx.get("target_kl")
    if isinstance(target, (int, float)) and 0 < target < t["kl_max"]:
        # PPO ends an update's epochs once a minibatch's KL passes 1.5 x target_kl: under the bar of a
        # policy that moves at all, every update stops after its first minibatch
        causes.append(
            f"target_kl {target:.2g} stops every update as soon as its KL passes {1.5 * target:.2g}: "
            "after its first minibatch"
        )
        patches.append(advice.make(ctx, "target_kl", None, "no early stop on KL (SB3's default)"))
    if "clip_range_median" in evidence:
        causes.append(f"PPO's clip range is {evidence['clip_range_median']:.2g}: each update may move the policy ~0")
        patches.append(advice.make(ctx, "clip_range", 0.2, "let each update move the policy (SB3's default)"))
    override = history.values("override_fraction", last=w)
    if override and median(override) >= t["override_fraction"]:
        evidence["override_fraction_median"] = median(override)
        causes.append(f"the env overrides the agent's action on {median(override):.0%} of steps")
    distinct, reward_std = history.values("reward_distinct", last=w), history.values("reward_std", last=w)
    if distinct and median(distinct) <= 2:
        evidence["reward_distinct_median"] = median(distinct)
        causes.append(f"rewards are (nearly) constant: {median(distinct):.0f} distinct value(s) per rollout")
    norm_std = history.values("reward_norm_std", last=w)
    if ctx.get("norm_reward") and norm_std and reward_std and median(norm_std) < 0.1 * max(median(reward_std), 1e-12):
        evidence["reward_norm_std_median"] = median(norm_std)
        causes.append(f"VecNormalize shrinks the rewards the agent sees to std {median(norm_std):.3g}")
        patches.append({"patch": {"normalize": {"reward": False}}, "why": "let the sparse reward through unshrunk"})
    # before the advantages' missing spread below, its consequence
    advice.name(advice.tiny_reward_scale(ctx, t["reward_scale_tiny"]), causes, patches)
    adv = history.values("adv_std", last=w)
    if adv:
        evidence["adv_std_median"] = median(adv)
        if median(adv) < 1e-3:
            causes.append(f"advantages have almost no spread (std {median(adv):.3g})")
            patches.append(advice.make(ctx, "normalize_advantage", True, "rescale tiny advantages to unit spread"))
        elif ctx.get("normalize_advantage") is False and median(adv) < 0.1:
            causes.append(f"advantages of spread {median(adv):.3g} reach the policy loss unnormalised")
            patches.append(advice.make(ctx, "normalize_advantage", True, "rescale small advantages to unit spread"))
    share = evidence.get("actor_grad_share")
    actor, total = history.values("grad_norm_actor", last=w), history.values("grad_norm", last=w)
    if share is None and actor and total:
        share = evidence["actor_grad_share"] = median(actor) / max(median(total), 1e-12)
    if share is not None and share < t["actor_grad_share_max"]:
        causes.append(f"the actor gets {share:.2%} of the gradient norm; the critic dominates the clipped total")
        # a critic held by a tiny value clip never fits, so its loss keeps the returns' scale: the
        # clip is why the critic's gradient dominates, and its patch comes before the others
        advice.name(advice.value_clip(ctx, t["value_clip_tiny"]), causes, patches)
        if not ctx.get("norm_reward"):
            patches.append(
                advice.make(ctx, "normalize", {"reward": True}, "shrink the returns the critic's gradient scales with")
            )
        vf = ctx.get("vf_coef")
        patches.append(
            advice.make(
                ctx,
                "vf_coef",
                float(f"{(vf if vf else 0.5) / 10:.3g}"),
                "a smaller critic share of the clipped gradient",
            )
        )
    ent = ctx.get("ent_coef")
    if isinstance(ent, (int, float)) and ent >= 0.1:
        causes.append(f"ent_coef {ent:g} rewards a uniform policy more than any return")
        patches.append(advice.make(ctx, "ent_coef", 0.0, "let the advantages, not the entropy bonus, move the policy"))
    lr = history.values("learning_rate")
    if lr and lr[-1] < 1e-6:
        causes.append(f"learning_rate {lr[-1]:.2g} moves nothing")
        patches.append(advice.make(ctx, "learning_rate", 3e-4, "a step size that changes the policy"))
    return causes, advice.collect(*patches)


def _env_advice(causes: list[str]) -> list[str]:
    """Fixes outside the knobs (the env itself), as text only."""
    out = []
    if any("overrides" in c for c in causes):
        out.append("train only in phases where the agent's actions are applied (env.kwargs / curriculum)")
    if any("constant" in c for c in causes):
        out.append("give the constant phases a shaped reward, or shorten them")
    if not causes:
        out.append(
            "no cause among the signals: look for weight decay on the actor, a saturated action head, "
            "or an actor learning rate that differs from the logged one"
        )
    return out
