"""Detectors, verdicts and thresholds on constructed signal histories (no training)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from stability import History, ThresholdError, Thresholds, advice, classify, keys
from stability.signals import History as H
from stability.thresholds import DEFAULTS

ROOT = Path(__file__).resolve().parents[1]
TORCH_SCALE_ERROR = (
    "Traceback (most recent call last):\n  ...\nValueError: Expected parameter scale (Tensor of shape (1, 4)) of "
    "distribution Normal(loc: torch.Size([1, 4]), scale: torch.Size([1, 4])) to satisfy the constraint "
    "GreaterThan(lower_bound=0.0), but found invalid values:\ntensor([[inf, inf, 0., 0.]])"
)


def ppo_history(n: int = 40, kl: float = 5e-3, clip: float = 0.1, **extra: list) -> History:
    """A PPO-like history; ``extra`` gives whole series (length n) to add or replace."""
    h = H(total_steps=n * 1000)
    for i in range(n):
        values = {
            "approx_kl": kl,
            "clip_fraction": clip,
            "entropy": 0.6 - 0.005 * i + 0.01 * math.sin(i),
            "value_loss": 10.0 / (1 + i),
            "explained_variance": 0.8,
            "learning_rate": 3e-4,
            "pg_loss": -0.01,
            "ep_return": 20.0 + i,
        }
        values |= {k: v[i] for k, v in extra.items()}
        h.add(1000 * (i + 1), values)
    return h


def test_import_stays_light():
    code = (
        "import sys, stability, stability.detectors, stability.readers; "
        "print([m for m in ('torch', 'optuna', 'mlflow', 'ray', 'sweeps', 'stable_baselines3') "
        "if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_conf_file_holds_the_defaults():
    assert yaml.safe_load((ROOT / "conf" / "stability.yaml").read_text()) == DEFAULTS
    assert Thresholds.load(ROOT / "conf" / "stability.yaml").values == DEFAULTS


def test_thresholds_file_errors_name_file_and_key(tmp_path):
    bad = tmp_path / "t.yaml"
    bad.write_text("nan_scale: {log_std_hgh: 3}\ndead_policy_gradient: {kl_max: fast}\nbogus: {}\n")
    with pytest.raises(ThresholdError) as err:
        Thresholds.load(bad)
    text = str(err.value)
    assert text.startswith(f"{bad}: 3 errors")
    assert "nan_scale.log_std_hgh: unknown threshold" in text
    assert "dead_policy_gradient.kl_max: expected a number, got 'fast'" in text
    assert "bogus: unknown detector" in text
    assert Thresholds({"nan_scale": {"log_std_high": 30}}).of("nan_scale")["log_std_high"] == 30.0


def test_near_deterministic_has_one_home_that_the_deferring_detectors_read():
    t = Thresholds({"entropy_collapse": {"std_max": 0.02, "entropy_drop": 4}})
    assert t.of("dead_policy_gradient")["deterministic_std"] == 0.02
    assert t.of("exploding_updates")["deterministic_std"] == 0.02
    assert t.of("exploding_updates")["deterministic_entropy_drop"] == 4.0
    assert t.values["entropy_collapse"]["std_max"] == 0.02  # the section itself is unchanged by reading
    assert "deterministic_std" not in t.values["dead_policy_gradient"]
    with pytest.raises(ThresholdError, match=r"exploding_updates.deterministic_std: set entropy_collapse.std_max"):
        Thresholds({"exploding_updates": {"deterministic_std": 0.1}})


def test_healthy_history_is_healthy():
    verdict = classify(ppo_history(), final=True)
    assert verdict.verdict == "healthy" and verdict.findings == []


# --- nan_scale ------------------------------------------------------------------------------
def test_torch_scale_error_is_nan_scale_not_a_crash():
    h = ppo_history(10)
    h.error = TORCH_SCALE_ERROR
    verdict = classify(h, final=True)
    assert verdict.verdict == "nan_scale" and verdict.onset_step == h.last_step
    assert "Expected parameter scale" in verdict.findings[0].evidence["error"]
    assert any("log_std_bounds" in a for a in verdict.findings[0].advice)


def test_non_finite_loss_gives_onset_at_its_update():
    losses = [1.0] * 12 + [math.nan] * 3
    verdict = classify(ppo_history(15, value_loss=losses))
    assert verdict.verdict == "nan_scale" and verdict.onset_step == 13000


def test_log_std_warns_then_is_certain():
    rising = [0.5 * i for i in range(40)]  # crosses 7 at update 15 (step 16000), never reaches 23
    verdict = classify(ppo_history(40, log_std_max=rising, log_std_min=[0.0] * 40))
    assert verdict.verdict == "healthy"
    assert [(f.kind, f.certain, f.onset_step) for f in verdict.warnings] == [("nan_scale", False, 16000)]
    verdict = classify(ppo_history(40, log_std_max=[1.5 * i for i in range(40)], log_std_min=[0.0] * 40))
    assert verdict.verdict == "nan_scale" and verdict.findings[0].certain
    assert verdict.onset_step == 6000  # from the warning, not from crossing 23


def test_a_gaussian_started_with_a_std_past_1e10_is_nan_scale_though_it_never_moves():
    # log_std_init 24: every action is clipped to the bounds and the policy is dead; the cause,
    # the scale, is the verdict, in a sweep (log_std) and from a plain log (SB3's mean train/std)
    flat = [20.0 + 0.5 * (i % 3) for i in range(40)]
    common = {"kl": 1e-7, "clip": 0.0, "ep_return": flat}
    live = classify(ppo_history(40, log_std_max=[24.0] * 40, log_std_min=[24.0] * 40, **common), final=True)
    plain = classify(ppo_history(40, std=[math.exp(24.0)] * 40, **common), final=True)
    for verdict in (live, plain):
        assert verdict.verdict == "nan_scale" and verdict.certain and verdict.onset_step == 1000
    # a plain log's std that reached 0 is past the lower bar, from the record where it did
    zero = classify(ppo_history(40, std=[1.0] * 10 + [0.0] * 30, **common), final=True)
    assert zero.verdict == "nan_scale" and zero.onset_step == 11000
    # a std that leaves the sane range but stays under 1e10 is only a warning
    warm = classify(ppo_history(40, log_std_max=[20.0] * 40, log_std_min=[20.0] * 40, **common), final=True)
    assert warm.verdict != "nan_scale" and any(f.kind == "nan_scale" and not f.certain for f in warm.warnings)


# --- dead_policy_gradient -------------------------------------------------------------------
def test_frozen_ppo_policy_is_dead():
    flat = [20.0 + 0.5 * (i % 3) for i in range(40)]  # no trend; not one total (that is degenerate_reward)
    verdict = classify(ppo_history(40, kl=1e-7, clip=0.0, entropy=[1.386] * 40, ep_return=flat))
    assert verdict.verdict == "dead_policy_gradient"
    # the same signals after returns rose to their best: a converged learner, not a dead one
    assert classify(ppo_history(40, kl=1e-7, clip=0.0, entropy=[1.386] * 40)).verdict == "healthy"


def test_decayed_clip_range_is_not_dead():
    # rl-zoo3's lin_0.2: late in a healthy run clip_fraction -> 1 and approx_kl -> 0
    verdict = classify(ppo_history(40, kl=1e-7, clip=0.98, entropy=[0.3] * 40))
    assert verdict.verdict == "healthy"


def test_learning_rate_schedule_at_its_end_is_not_dead():
    lr = [3e-4 * (1 - i / 40) for i in range(40)]
    verdict = classify(ppo_history(40, kl=1e-7, clip=0.0, entropy=[1.386] * 40, learning_rate=lr))
    assert verdict.verdict == "healthy"


def _frozen_std_gaussian(kl: float, continuous: bool = True) -> History:
    """96 updates of a policy whose logged entropy (a Gaussian's: its std alone) never moves,
    returns flat, clip_fraction 0, approx_kl ``kl`` per update."""
    n = 96
    flat = [40.0 + 2.0 * (i % 3) for i in range(n)]
    h = ppo_history(n, kl=kl, clip=0.0, entropy=[1.4189] * n, ep_return=flat)
    h.context["continuous"] = continuous
    return h


def test_a_gaussian_policy_moving_slowly_under_a_frozen_std_is_not_dead():
    # ~1e-4 nats per update, 24 updates in the window: about 2e-3 nats moved (the corpus's
    # RecurrentPPO that learned 0 -> 75 on a spiky reward this way)
    assert "dead_policy_gradient" not in {f.kind for f in classify(_frozen_std_gaussian(9e-5)).findings}
    # a Gaussian's first entropy kept says nothing of its mean: per-update KL 3e-3 is learning
    assert "dead_policy_gradient" not in {f.kind for f in classify(_frozen_std_gaussian(3e-3)).findings}
    # the same frozen std with updates that move nothing is dead
    dead = classify(_frozen_std_gaussian(1e-7))
    assert dead.verdict == "dead_policy_gradient"
    assert dead.findings[0].evidence["window_kl_sum"] < 1e-5
    # a discrete policy's entropy is the whole policy's: still at its first value, it never moved
    assert classify(_frozen_std_gaussian(3e-3, continuous=False)).verdict == "dead_policy_gradient"


def test_a_plain_log_without_a_std_is_read_as_gaussian_from_its_entropy():
    # CleanRL logs a Gaussian's entropy but no std, and a plain log has no context: the first
    # entropy, a unit-std Gaussian's per dimension (1.4189, moved by the first update), says so
    def plain(kl: float, first: float, last: float | None = None) -> History:
        n = 96
        entropy = [first + 0.001 * (i % 2) for i in range(n)]
        if last is not None:
            entropy[-1] = last
        flat = [40.0 + 2.0 * (i % 3) for i in range(n)]
        return ppo_history(n, kl=kl, clip=0.0, entropy=entropy, ep_return=flat)

    # one dimension (Pendulum), 1.5e-3 nats per update: a policy learning slowly, not a dead one
    assert "dead_policy_gradient" not in {f.kind for f in classify(plain(1.5e-3, 1.4165)).findings}
    # two dimensions, and a log whose entropy went below 0 (only a density's can)
    assert "dead_policy_gradient" not in {f.kind for f in classify(plain(1.5e-3, 2.8351)).findings}
    assert "dead_policy_gradient" not in {f.kind for f in classify(plain(1.5e-3, 0.9, last=-0.2)).findings}
    # the same log with updates that move nothing is dead
    assert classify(plain(1e-7, 1.4165)).verdict == "dead_policy_gradient"
    # a discrete policy near uniform over 4 actions (ln 4 = 1.386, 2.3% under one unit) that never
    # left its first entropy never moved, whatever approx_kl's noise says
    assert classify(plain(1.5e-3, 1.3855)).verdict == "dead_policy_gradient"


def a2c(entropy: list, actor: float, value_loss: float = 50.0, ev: float = 0.5, **context: object) -> History:
    """40 A2C-style records (no KL) with the actor's share of a gradient norm of 10 given."""
    h = H(total_steps=40 * 400, context=dict(context))
    for i in range(40):
        h.add(
            400 * (i + 1),
            {
                "pg_loss": 15.0 * (-1) ** i,
                "value_loss": value_loss,
                "explained_variance": ev,
                "entropy": entropy[i],
                "grad_norm": 10.0,
                "grad_norm_actor": actor,
            },
        )
    return h


def test_a2c_judged_without_kl():
    assert classify(a2c([0.69] * 40, actor=1e-3)).verdict == "dead_policy_gradient"
    # A2C's policy_loss is far from 0 with a moving policy: healthy
    assert classify(a2c([0.69 - 0.01 * i for i in range(40)], actor=2.0)).verdict == "healthy"
    # a small actor share starves the actor only through one clip scaling every gradient: with
    # clipping off, or a clip never reached, the actor's gradient is applied in full (an entropy
    # that moved early and then settled: only the starved actor would make it dead)
    settled = [0.69 - 0.005 * min(i, 20) for i in range(40)]
    assert classify(a2c(settled, actor=1e-3)).verdict == "dead_policy_gradient"  # nothing known of the clip
    off = a2c(settled, actor=1e-3)
    off.context["max_grad_norm"] = math.inf
    verdict = classify(off)
    assert "dead_policy_gradient" not in {f.kind for f in verdict.findings}
    on = a2c(settled, actor=1e-3)
    on.context["max_grad_norm"] = 0.5
    for clipped, dead in ((0.0, False), (1.0, True)):
        h = H(total_steps=on.total_steps, context=dict(on.context))
        for i, step in enumerate(on.steps):
            row = {name: values[i] for name, (_, values) in on.series.items()}
            h.add(step, row | {"grad_clipped_fraction": clipped})
        assert ("dead_policy_gradient" in {f.kind for f in classify(h).findings}) is dead, clipped


def test_a_starved_actors_config_causes_come_before_the_generic_patches():
    """The critic's share dominates the clipped gradient because a tiny clip_range_vf holds the
    critic where it started (its loss stays at the returns' scale): the clip is named among the
    causes and its removal is the first patch, before normalising rewards or a smaller vf_coef. A
    reward_scale that shrinks every reward to nothing is likewise named, with the knob back to 1."""

    def starved(**ctx: object) -> list:
        h = a2c([0.69] * 40, actor=1e-3, value_loss=5e4, ev=0.0, max_grad_norm=0.5, **ctx)
        return next(f for f in classify(h).findings if f.kind == "dead_policy_gradient").patches

    # a reward_scale that shrinks every reward to nothing is named first, with the knob back to 1
    shrunk = starved(reward_scale=2.6e-8)
    assert shrunk[0]["patch"] == {"reward_scale": 1.0}
    assert all("reward_scale" not in p["patch"] for p in starved(reward_scale=0.5))
    clipped = starved(clip_range_vf=4e-5, vf_coef=0.5)
    assert clipped[0]["patch"] == {"clip_range_vf": None}
    assert {"vf_coef": 0.05} in [p["patch"] for p in clipped[1:]]  # still offered, after it
    # a value clip of PPO's usual size (or none) is no cause: the patches are as before
    for ctx in ({"clip_range_vf": 0.2}, {}):
        assert all("clip_range_vf" not in p["patch"] for p in starved(vf_coef=0.5, **ctx))


def test_dead_names_weight_decay_first_and_patches_it_off():
    n = 40
    flat = [20.0 + 0.5 * (i % 3) for i in range(n)]
    h = ppo_history(n, kl=1e-7, clip=0.0, entropy=[1.386] * n, ep_return=flat)
    h.context["weight_decay"] = 0.3
    verdict = classify(h, final=True)
    assert verdict.verdict == "dead_policy_gradient"
    dead = verdict.findings[0]
    assert "weight decay 0.3" in dead.causes[0]
    assert dead.patches[0]["patch"] == {"weight_decay": 0.0}
    # a small decay (the corpus's healthy 1e-4) is not named
    h.context["weight_decay"] = 1e-4
    assert all("weight_decay" not in p["patch"] for p in classify(h, final=True).findings[0].patches)


def test_dead_names_overrides_and_constant_rewards():
    n = 40
    verdict = classify(
        ppo_history(
            n,
            kl=1e-7,
            clip=0.0,
            entropy=[2.77] * n,
            ep_return=[0.0] * n,
            override_fraction=[0.8] * n,
            reward_distinct=[1.0] * n,
            reward_std=[0.0] * n,
            reward_norm_std=[0.0] * n,
        )
    )
    # constant rewards in every episode: degenerate_reward explains the dead gradient, and ranks first
    assert verdict.verdict == "degenerate_reward"
    dead = next(f for f in verdict.findings if f.kind == "dead_policy_gradient")
    causes = " ".join(dead.causes)
    assert "overrides the agent's action on 80%" in causes and "constant" in causes


# --- stuck_value_loss -----------------------------------------------------------------------
def test_flat_value_loss_with_zero_ev_is_stuck_and_names_weight_decay():
    n = 40
    h = ppo_history(
        n, value_loss=[50.0 + (i % 3) for i in range(n)], explained_variance=[1e-5] * n, return_rms=[10.0] * n
    )
    h.context["weight_decay"] = 0.1
    verdict = classify(h, final=True)
    assert verdict.verdict == "stuck_value_loss"
    assert any("weight decay 0.1" in c for c in verdict.findings[0].causes)
    # before the run has ended the same critic is a warning (it may still fit): stop_on never acts on it
    live = classify(h)
    (warning,) = [f for f in live.findings if f.kind == "stuck_value_loss"]
    assert live.verdict == "healthy" and not warning.certain
    assert any("judged when the run ends" in c for c in warning.causes)


def test_stuck_names_a_value_head_started_large_from_its_threshold():
    n = 40
    h = ppo_history(
        n, value_loss=[50.0 + (i % 3) for i in range(n)], explained_variance=[1e-5] * n, return_rms=[10.0] * n
    )
    h.context["value_head_weight_std"] = 0.8

    def head_patch(thresholds: Thresholds | None = None) -> bool:
        finding = classify(h, thresholds, final=True).findings[0]
        assert finding.kind == "stuck_value_loss"
        named = any("value head starts large (weight std 0.8)" in c for c in finding.causes)
        patched = {"init_gains": {"value": 1.0}} in [p["patch"] for p in finding.patches]
        assert named is patched
        return named

    assert head_patch()
    assert not head_patch(Thresholds({"stuck_value_loss": {"value_head_std_max": 1.0}}))


def test_stuck_names_a_tiny_value_clip_and_patches_it_away_first():
    """PPO's clip_range_vf bounds how far one update moves the critic's values from the last
    rollout's, in the returns' units: at 2e-5 the critic cannot follow returns of any size, and
    what answers it is no clip (SB3's default), before normalising the rewards."""
    n = 40
    h = ppo_history(
        n, value_loss=[50.0 + (i % 3) for i in range(n)], explained_variance=[1e-5] * n, return_rms=[10.0] * n
    )
    h.context["clip_range_vf"] = 2e-5
    finding = classify(h, final=True).findings[0]
    assert finding.kind == "stuck_value_loss"
    assert [p["patch"] for p in finding.patches][0] == {"clip_range_vf": None}
    assert any("clip_range_vf 2e-05" in c for c in finding.causes)
    h.context["clip_range_vf"] = 0.2  # a clip of the usual size is no cause
    finding = classify(h, final=True).findings[0]
    assert {"clip_range_vf": None} not in [p["patch"] for p in finding.patches]
    # a reward_scale that shrinks the critic's targets to nothing: the knob back to 1, before normalising
    h.context["reward_scale"] = 2.6e-8
    finding = classify(h, final=True).findings[0]
    assert [p["patch"] for p in finding.patches][:1] == [{"reward_scale": 1.0}]
    assert any("reward_scale 2.6e-08" in c for c in finding.causes)


def test_stuck_names_an_undiscounted_horizon_and_advises_sb3s_gamma_last():
    n = 40
    h = ppo_history(
        n, value_loss=[50.0 + (i % 3) for i in range(n)], explained_variance=[1e-5] * n, return_rms=[10.0] * n
    )

    def advised(gamma: float, thresholds: Thresholds | None = None) -> tuple[list[dict], list[str]]:
        h.context["gamma"] = gamma
        finding = classify(h, thresholds, final=True).findings[0]
        assert finding.kind == "stuck_value_loss"
        return [p["patch"] for p in finding.patches], finding.causes

    patches, causes = advised(1.0)  # last: a shorter horizon changes the task's objective
    assert patches == [{"normalize": {"reward": True}}, {"gamma": 0.99}] and "gamma 1 (no discount)" in causes[-1]
    patches, causes = advised(0.9999)
    assert patches[-1] == {"gamma": 0.99} and "a horizon of 10000 steps" in causes[-1]
    patches, causes = advised(0.99)  # SB3's default
    assert patches == [{"normalize": {"reward": True}}] and not any("gamma" in c for c in causes)
    patches, _ = advised(0.9999, Thresholds({"stuck_value_loss": {"long_horizon_gamma": 1.0}}))
    assert patches == [{"normalize": {"reward": True}}]


def test_a_constant_critic_beside_a_deterministic_policy_is_the_collapses_to_name():
    """From a plain A2C-style log: a critic pinned at explained variance 0 with a loss not falling
    is stuck, unless the policy is near-deterministic all the while: its episodes are then alike,
    a constant at their level fits them, and the collapse is the verdict."""

    def plain(collapsed: bool) -> History:
        h = H(total_steps=40 * 500)
        for i in range(40):
            entropy = 0.69 - 0.005 * i + 0.02 * math.sin(i) if i < 2 or not collapsed else 1e-4
            h.add(
                500 * (i + 1),
                {
                    "entropy": entropy,
                    "value_loss": 15.0 + (i % 3),
                    "explained_variance": 0.0,
                    "pg_loss": -0.01,
                    "learning_rate": 0.1,
                    "ep_return": 18.0 if i < 2 else 9.4,
                    "ep_length": 18.0 if i < 2 else 9.4,
                },
            )
        return h

    stuck = classify(plain(collapsed=False), final=True)
    assert stuck.verdict == "stuck_value_loss" and stuck.findings[0].certain
    collapsed = classify(plain(collapsed=True), final=True)
    assert collapsed.verdict == "entropy_collapse"
    (warning,) = [f for f in collapsed.findings if f.kind == "stuck_value_loss"]
    assert not warning.certain and warning.evidence["pinned_beside_deterministic"]
    assert any("policy is near-deterministic" in c for c in warning.causes)


def test_ev_alone_never_decides():
    n = 40
    # EV <= 0 but the loss falls: healthy
    assert classify(ppo_history(n, explained_variance=[-0.5] * n, return_rms=[20.0] * n)).verdict == "healthy"
    # converged: EV <= 0 and a flat loss that is tiny against the returns: healthy
    h = ppo_history(n, value_loss=[1e-4] * n, explained_variance=[-2.0] * n, return_rms=[50.0] * n)
    assert classify(h).verdict == "healthy"


def test_a_plain_ppo_log_whose_loss_is_tiny_against_its_episodes_is_not_stuck_for_its_explained_variance():
    """Long episodes whose discounted return (~3 here) the critic fits to a few percent: explained
    variance stays under ev_max, as it does for targets that barely vary about their level."""
    n = 40
    ev = [0.05 + 0.02 * math.sin(i) for i in range(n)]
    common = dict(explained_variance=ev, ep_return=[-30.0 + i % 3 for i in range(n)], ep_length=[999.0] * n)
    fit = ppo_history(n, value_loss=[0.5 / (1 + i) for i in range(n)], **common)  # ends at ~0.0013 of 9
    assert classify(fit, final=True).verdict == "healthy"
    # ~0.01 of 9, a tenth of the scale off: explained variance alone says stuck, a warning only
    # (and 0.62 of the lambda-returns' size, 0.48: under the bar of the rule on them)
    off = classify(ppo_history(n, value_loss=[0.09] * n, **common), final=True)
    assert off.verdict == "healthy"
    warning = next(f for f in off.findings if f.kind == "stuck_value_loss")
    assert not warning.certain and warning.evidence["explained_variance_only"]
    assert "explained variance alone" in warning.causes[0]
    # with a reference return the flat returns never approach (0 here), the policy is not learning
    # either, and explained variance alone then says stuck; with one they reached, it stays a warning
    short = ppo_history(n, value_loss=[0.09] * n, **common)
    short.context["reference_return"] = 0.0
    verdict = classify(short, final=True)
    assert verdict.verdict == "stuck_value_loss" and "not learning either" in verdict.findings[0].causes[0]
    reached = ppo_history(n, value_loss=[0.09] * n, **common)
    reached.context["reference_return"] = -29.5
    verdict = classify(reached, final=True)
    assert verdict.verdict == "healthy"
    warning = next(f for f in verdict.findings if f.kind == "stuck_value_loss")
    assert not warning.certain and "at or past the reference return -29.5" in warning.causes[0]
    # ~0.11 of 9, a third of the scale off and not falling: the loss itself says stuck
    assert classify(ppo_history(n, value_loss=[1.0] * n, **common), final=True).verdict == "stuck_value_loss"
    # ~1e-8 of it: rewards scaled down before the critic, whose targets the episodes do not measure
    scaled = ppo_history(n, value_loss=[1e-7] * n, **common)
    assert classify(scaled, final=True).verdict == "stuck_value_loss"


def test_a_plain_ppo_log_whose_loss_is_the_lambda_returns_own_size_is_a_critic_off_their_level():
    """Pendulum-like episodes (-2500 over 400 steps): GAE's lambda-returns bootstrap from the
    critic, so a critic that never learnt the returns' level (-620 discounted) is fit to targets of
    about 6.25 / (1 - 0.99 x 0.95) = 105 and logs a loss near their square, ~2% of the discounted
    return's square: under the rule on that square, and explained variance alone gave a warning."""
    n = 24
    common = dict(
        explained_variance=[0.004 + 0.002 * math.sin(i) for i in range(n)],
        ep_return=[-2500.0 + 40 * math.sin(i) for i in range(n)],
        ep_length=[400.0] * n,
    )
    off = classify(ppo_history(n, value_loss=[9000.0 + 300 * math.sin(i) for i in range(n)], **common), final=True)
    assert off.verdict == "stuck_value_loss"
    finding = off.findings[0]
    assert finding.certain and finding.evidence["value_error_over_lambda_return"] == pytest.approx(0.9, abs=0.03)
    assert "off the returns' level by about 0.9" in finding.summary
    # before the end, a warning; a loss that fell (with its targets) is not this rule's
    live = classify(ppo_history(n, value_loss=[9000.0] * n, **common), final=False)
    assert live.verdict == "healthy"
    fell = classify(ppo_history(n, value_loss=[30000.0 * 0.9**i for i in range(n)], **common), final=True)
    assert not any(f.evidence.get("off_the_lambda_returns") for f in fell.findings)
    # a critic that explained 0.8 of the variance at an update of the last window: its error varies
    # from state to state, which the bootstrap does not shrink, and the loss says nothing of its
    # level; one that did so only early on (an update at 5 of 24) has not fit since
    late_fit = dict(common, explained_variance=[0.8 if i == n - 2 else 0.004 for i in range(n)])
    fit_late = classify(ppo_history(n, value_loss=[9000.0] * n, **late_fit), final=True)
    assert not any(f.evidence.get("off_the_lambda_returns") for f in fit_late.findings)
    early_fit = dict(common, explained_variance=[0.8 if i == 5 else 0.004 for i in range(n)])
    fit_early = classify(ppo_history(n, value_loss=[9000.0] * n, **early_fit), final=True)
    assert fit_early.verdict == "stuck_value_loss" and fit_early.findings[0].evidence["off_the_lambda_returns"]
    # a critic at the returns' level, off by the targets' own noise: a loss of 2000 is 0.43 of them
    near = classify(ppo_history(n, value_loss=[2000.0] * n, **common), final=True)
    assert near.verdict == "healthy" and not any(f.certain for f in near.findings)
    # the run's own lambda: at 0.8 the targets hold ~4.8 steps of reward (30), and a loss of 9000
    # is 3 of them (off); at 1.0 the whole discounted return (614), and it is 0.15 of that
    for lam, verdict in ((0.8, "stuck_value_loss"), (1.0, "healthy")):
        h = ppo_history(n, value_loss=[9000.0] * n, **common)
        h.context["gae_lambda"] = lam
        assert classify(h, final=True).verdict == verdict, lam


def test_a_config_reward_scale_puts_the_critics_targets_in_its_units():
    """The Pendulum-like log above with rewards x270 before the algorithm (rlsweep's reward_scale),
    after the episode recorder: the logged returns stay the env's, the loss is 270^2 times larger.
    Read alone, the loss is ~1e4 of the episodes' squared discounted return, not in their units, and
    explained variance alone gives a warning; with the config's reward_scale, the targets are read
    in the critic's units, 0.9 off their level: stuck, naming the scale. Rewards normalised after it
    put the targets in neither unit, and the scale is not read."""
    n = 24
    common = dict(
        explained_variance=[0.004 + 0.002 * math.sin(i) for i in range(n)],
        ep_return=[-2500.0 + 40 * math.sin(i) for i in range(n)],
        ep_length=[400.0] * n,
    )

    def log(**context: Any) -> History:
        h = ppo_history(n, value_loss=[9000.0 * 270**2 + 3e7 * math.sin(i) for i in range(n)], **common)
        h.context.update(context)
        return h

    alone = classify(log(), final=True)
    assert alone.verdict == "healthy" and alone.findings[0].evidence["value_loss_units_differ"]
    scaled = classify(log(reward_scale=270.0), final=True)
    assert scaled.verdict == "stuck_value_loss"
    finding = scaled.findings[0]
    assert finding.certain and finding.evidence["value_error_over_lambda_return"] == pytest.approx(0.9, abs=0.03)
    assert any(c.startswith("reward_scale 270 makes returns of scale") for c in finding.causes)
    assert {"normalize": {"reward": True}} in [p["patch"] for p in finding.patches]
    normalised = classify(log(reward_scale=270.0, norm_reward=True), final=True)
    assert normalised.verdict == "healthy" and "reward_scale_read" not in normalised.findings[0].evidence


def test_a_plain_a2c_log_whose_loss_is_its_n_step_returns_own_size_is_a_critic_off_their_level():
    """Pendulum-like episodes (-2500 over 400 steps) from an A2C-style log (no approx_kl): its
    5-step returns bootstrap from the critic after at most 5 rewards, so a critic that never learnt
    the returns' level is fit to targets of about 3.3 steps of reward (20) and logs a loss near
    their square, ~0.1% of the discounted return's (614) square, under every other plain-log rule."""
    n = 40

    def a2c(loss: list[float], ev: float = 0.01, length: float = 400.0) -> History:
        h = H(total_steps=n * 500)
        for i in range(n):
            h.add(
                500 * (i + 1),
                {
                    "entropy": 1.4 - 0.005 * i,
                    "value_loss": loss[i],
                    "explained_variance": ev + 0.02 * math.sin(i),
                    "pg_loss": -0.01,
                    "learning_rate": 7e-4,
                    "ep_return": (-2500.0 + 40 * math.sin(i)) * length / 400,
                    "ep_length": length + (length < 400) * 30 * math.sin(i),
                },
            )
        return h

    off = classify(a2c([500.0 + 20 * math.sin(i) for i in range(n)]), final=True)
    assert off.verdict == "stuck_value_loss"
    finding = off.findings[0]
    assert finding.certain and finding.evidence["value_error_over_lambda_return"] == pytest.approx(1.1, abs=0.03)
    assert "off the returns' level by about 1.09" in finding.summary
    # before the end, a warning at most; a loss that fell, or a critic explaining half the
    # variance, is not this rule's; a loss of 100 is 0.49 of the targets' size (under the bar)
    assert classify(a2c([500.0] * n), final=False).verdict == "healthy"
    fell = classify(a2c([5000.0 * 0.9**i for i in range(n)]), final=True)
    assert not any(f.evidence.get("off_the_lambda_returns") for f in fell.findings)
    assert classify(a2c([500.0] * n, ev=0.5), final=True).verdict == "healthy"
    assert classify(a2c([100.0] * n), final=True).verdict == "healthy"
    # the run's own rollout: 32 steps hold ~20 rewards (122), and the same loss is 0.18 of them
    longer = a2c([500.0] * n)
    longer.context["n_steps"] = 32
    assert classify(longer, final=True).verdict == "healthy"
    # episodes of varying length end by failure: their last targets drop to the rewards left, an
    # error of the level's size for a critic at it, and the loss says nothing of its level
    ended = classify(a2c([500.0] * n, length=200.0), final=True)
    assert not any(f.evidence.get("off_the_lambda_returns") for f in ended.findings)


def test_a_critic_whose_vf_coef_is_almost_zero_is_untrained_whatever_its_loss_does():
    """A plain A2C-style log read with its config: vf_coef 6e-7 leaves the critic's loss out of the
    gradient. Rewards normalised before the critic put its loss (~0.5) in other units than the
    episodes' (-1200), under every rule on the loss, and its falling says nothing (the targets
    moved). Explained variance ~0 at the end: stuck, certain; with SB3's vf_coef 0.5 the same log
    is no finding of this rule, and before the end it is no certain one."""
    n = 40

    def log(vf_coef: float) -> History:
        h = H(total_steps=n * 500)
        for i in range(n):
            h.add(
                500 * (i + 1),
                {
                    "entropy": 1.4 - 0.005 * i,
                    "value_loss": 1.0 * 0.98**i,
                    "explained_variance": 0.02 * math.sin(i),
                    "pg_loss": -0.01,
                    "learning_rate": 7e-4,
                    "ep_return": -1200.0 + 30 * math.sin(i),
                    "ep_length": 200.0,
                },
            )
        h.context["vf_coef"] = vf_coef
        return h

    stuck = classify(log(6e-7), final=True)
    assert stuck.verdict == "stuck_value_loss" and stuck.findings[0].certain
    assert stuck.findings[0].summary.startswith("vf_coef 6e-07 leaves the critic untrained")
    assert {"vf_coef": 0.5} in [p["patch"] for p in stuck.findings[0].patches]
    assert classify(log(0.5), final=True).verdict == "healthy"
    assert not any(f.certain for f in classify(log(6e-7), final=False).findings)


def test_a_plain_log_loss_far_over_its_episodes_square_is_rewards_scaled_up_not_a_stuck_critic():
    """A loss ~100 times the episodes' squared discounted return (~3) with explained variance ~0:
    in the episodes' units the critic would be ten times their scale off and explain far less than
    nothing, so its rewards were scaled up (a tiny raw reward normalised). A warning only; the same
    loss with explained variance below the mean's bar is a critic that far off, and stuck."""
    n = 40
    common = dict(ep_return=[-30.0 + i % 3 for i in range(n)], ep_length=[999.0] * n, value_loss=[1000.0] * n)
    ev = [0.05 + 0.02 * math.sin(i) for i in range(n)]
    scaled = classify(ppo_history(n, explained_variance=ev, **common), final=True)
    assert scaled.verdict == "healthy"
    warning = next(f for f in scaled.findings if f.kind == "stuck_value_loss")
    assert not warning.certain and warning.evidence["value_loss_units_differ"]
    assert "too large to be in their units" in warning.causes[0]
    off = classify(ppo_history(n, explained_variance=[-3.0] * n, **common), final=True)
    assert off.verdict == "stuck_value_loss"
    assert "value_loss_units_differ" not in off.findings[0].evidence


def test_a_plain_log_loss_far_over_its_episodes_square_from_a_critic_that_never_explained_anything_is_stuck():
    """The same loss, ~100 times the episodes' squared discounted return, from a critic whose
    explained variance sat within ev_pinned of 0 at every update while its loss did not fall and
    the returns did not rise: explained variance has no units, and a critic that explained none of
    its targets' variance at any update, whatever their scale, learnt nothing of them (rewards
    scaled up and not normalised). Certain once the run has ended; with the returns risen, or an
    update that explained over ev_max of their variance (0.3), the warning above stays."""
    n = 40
    flat = dict(ep_return=[-30.0 + i % 3 for i in range(n)], ep_length=[999.0] * n, value_loss=[1000.0] * n)
    pinned = [2e-4 * math.sin(i) for i in range(n)]
    stuck = classify(ppo_history(n, explained_variance=pinned, **flat), final=True)
    assert stuck.verdict == "stuck_value_loss"
    finding = stuck.findings[0]
    assert finding.certain and finding.evidence["constant_critic_scaled_targets"]
    assert "it has learnt nothing of them" in finding.causes[0]
    assert not any(f.certain for f in classify(ppo_history(n, explained_variance=pinned, **flat)).findings)
    rising = flat | {"ep_return": [-30.0 + i for i in range(n)]}
    assert classify(ppo_history(n, explained_variance=pinned, **rising), final=True).verdict == "healthy"
    once = [0.3 if i == 3 else v for i, v in enumerate(pinned)]
    warning = classify(ppo_history(n, explained_variance=once, **flat), final=True)
    assert warning.verdict == "healthy" and warning.findings[0].evidence["explained_variance_only"]


def test_stuck_waits_for_half_the_budget():
    n = 40
    h = ppo_history(n, value_loss=[50.0] * n, explained_variance=[0.0] * n, return_rms=[10.0] * n)
    h.total_steps = 1000 * n * 4  # a quarter done
    assert classify(h).verdict == "healthy"
    assert classify(h, final=True).verdict == "stuck_value_loss"


# --- exploding_updates, degenerate_reward, priority -----------------------------------------
def test_gradient_explosion_certain_after_three_hits():
    grads = [1.0] * 30 + [5e3] * 2 + [1.0] * 8
    finding = classify(ppo_history(40, grad_norm=grads)).findings[0]
    assert (finding.kind, finding.certain) == ("exploding_updates", False)
    grads = [1.0] * 30 + [5e3] * 3 + [1.0] * 7
    verdict = classify(ppo_history(40, grad_norm=grads))
    assert verdict.verdict == "exploding_updates" and verdict.onset_step == 31000


def test_constant_reward_without_return_spread_is_degenerate_but_cartpole_is_not():
    n = 30
    flat = classify(
        ppo_history(n, reward_std=[0.0] * n, reward_mean=[0.0] * n, return_std=[0.3] * n, ep_return=[0.0] * n)
    )
    assert flat.verdict == "degenerate_reward"
    cartpole = classify(
        ppo_history(
            n,
            reward_std=[0.0] * n,
            reward_mean=[1.0] * n,
            return_std=[8.0] * n,
            ep_return=[20.0 + (i % 5) for i in range(n)],
        )
    )
    assert cartpole.verdict == "healthy"


def test_priority_nan_over_stuck():
    n = 40
    h = ppo_history(n, value_loss=[50.0] * (n - 1) + [math.inf], explained_variance=[0.0] * n, return_rms=[10.0] * n)
    verdict = classify(h, final=True)
    assert verdict.verdict == "nan_scale"
    assert {f.kind for f in verdict.findings} >= {"nan_scale", "stuck_value_loss"}


def test_verdict_json_round_trip_with_non_finite_evidence():
    verdict = classify(ppo_history(15, value_loss=[1.0] * 14 + [math.nan]))
    data = json.loads(verdict.to_json())
    assert data["verdict"] == "nan_scale" and data["findings"][0]["evidence"]["first_value"] == "nan"
    assert "nan_scale" in verdict.render()


def test_from_scalars_maps_sb3_and_cleanrl_names():
    sb3 = {
        "train/entropy_loss": [(64, -0.69), (128, -0.6)],
        "train/policy_gradient_loss": [(64, -0.01), (128, 0)],
        "rollout/ep_rew_mean": [(64, 20.0), (128, 25.0)],
        "time/fps": [(64, 1000.0)],
    }
    h = History.from_scalars(sb3)
    assert h.steps == [64, 128] and h.values("entropy") == [0.69, 0.6] and h.values("ep_return") == [20.0, 25.0]
    clean = {
        "losses/entropy": [(512, 1.4), (1024, 1.3)],
        "losses/clipfrac": [(512, 0.1), (1024, 0.2)],
        "charts/episodic_return": [(200, -1200.0), (400, -1100.0), (600, -1000.0)],
    }
    h = History.from_scalars(clean)
    assert h.steps == [512, 1024]  # episodic returns join updates instead of adding updates
    assert h.values("entropy") == [1.4, 1.3] and h.values("ep_return") == [-1150.0, -1000.0]


# --- the critic against finished episodes (callback) ----------------------------------------
def _rollouts(values, rewards, starts, size):
    """Cut one env's steps into rollouts of ``size`` steps, as SB3's buffer holds them, with the
    flag saying whether each rollout's last step ended an episode."""
    import numpy as np

    out = []
    for a in range(0, len(values), size):
        b = min(a + size, len(values))
        last_end = starts[b] if b < len(starts) else True
        out.append(
            (
                np.array(values[a:b])[:, None],
                np.array(rewards[a:b])[:, None],
                np.array(starts[a:b])[:, None],
                [last_end],
            )
        )
    return out


def test_episode_returns_join_rollouts_and_compare_the_critic_with_discounted_returns():
    from stability.callback import EpisodeReturns

    gamma = 0.5
    # two episodes, of 7 and 3 steps, paid 1 a step; rollouts of 3 steps split the first one twice
    starts = [True] + [False] * 6 + [True, False, False]
    rewards = [1.0] * 10
    exact = [(1 - gamma ** (k)) / (1 - gamma) for k in (7, 6, 5, 4, 3, 2, 1, 3, 2, 1)]
    for values, error, r2 in ((exact, 0.0, 1.0), ([0.0] * 10, 1.0, None)):
        tracker = EpisodeReturns(gamma, min_pairs=8)
        first, *rest = _rollouts(values, rewards, starts, 3)
        tracker.add(*first)
        assert tracker.pop() == {}  # no episode finished yet
        for rollout in rest:
            tracker.add(*rollout)
        out = tracker.pop()
        assert out["critic_error"] == pytest.approx(error, abs=1e-12)
        if r2 is not None:
            assert out["critic_r2"] == pytest.approx(r2)
        else:
            assert out["critic_r2"] < 0  # a critic at 0 explains none of the returns' variance
        assert tracker.pop() == {}  # popped: the next record starts afresh


def flat_critic(n: int) -> dict[str, list[float]]:
    """A critic the loss rules call stuck: a flat loss, explained variance ~0, returns of RMS 10."""
    return {
        "value_loss": [50.0 + (i % 3) for i in range(n)],
        "explained_variance": [1e-5] * n,
        "return_rms": [10.0] * n,
    }


def test_the_critic_measured_against_the_episodes_returns_decides_where_it_is_clear():
    n = 40
    # the loss falls and explained variance is high (the critic fits its own bootstrapped
    # targets), but against the returns its episodes paid it is off by 90% of their RMS
    h = ppo_history(n, critic_error=[0.9] * n, critic_r2=[-3.0] * n)
    finding = next(f for f in classify(h, final=True).findings if f.kind == "stuck_value_loss")
    assert finding.certain and "90%" in finding.summary
    # judged once the run has ended only: a live check (what stop_on acts on) leaves it to the loss
    assert classify(h).verdict == "healthy"
    # only half way through off, then fitting: the rules on the loss decide (healthy here)
    h = ppo_history(n, critic_error=[0.9] * 20 + [0.5] * 20, critic_r2=[-3.0] * 20 + [0.3] * 20)
    assert classify(h).verdict == "healthy"
    # a flat loss with explained variance ~0 is stuck by the loss rules...
    flat = flat_critic(n)
    assert classify(ppo_history(n, **flat), final=True).verdict == "stuck_value_loss"
    # ... unless the critic is measured close to the returns its episodes paid (near-constant
    # returns it predicts, which explained variance cannot credit) ...
    fits = classify(ppo_history(n, **flat, critic_error=[0.2] * n, critic_r2=[0.1] * n), final=True)
    assert fits.verdict == "healthy"
    # ... or under the label's own bar (0.6) ...
    assert classify(ppo_history(n, **flat, critic_error=[0.58] * n), final=True).verdict == "healthy"
    # ... and between the two bars, or with too few records, the loss rules stand
    assert classify(ppo_history(n, **flat, critic_error=[0.62] * n), final=True).verdict == "stuck_value_loss"
    sparse = [0.2 if i % 20 == 0 else math.nan for i in range(n)]
    assert classify(ppo_history(n, **flat, critic_error=sparse), final=True).verdict == "stuck_value_loss"
    # close to the returns over the last window is enough, whatever the half-way window holds
    late_only = [math.nan] * 24 + [0.2] * 16
    assert classify(ppo_history(n, **flat, critic_error=late_only), final=True).verdict == "healthy"


def test_a_critic_off_its_returns_beside_a_policy_that_learns_is_a_warning():
    """The hard negative "a critic lagging a fast-improving policy": with a reference return, a run
    whose returns got learned_fraction (0.2) of the way to it is not failing for its critic."""
    n = 40
    off = {"critic_error": [0.9] * n, "critic_r2": [-3.0] * n}
    learns = ppo_history(n, **off, ep_return=[20.0 + 12 * i for i in range(n)])  # CartPole: 20 -> 488
    alone = classify(learns, final=True)  # without a reference: its own rise says nothing ...
    assert alone.verdict == "stuck_value_loss"
    assert "no reference return is known" in alone.findings[0].advice[-1]  # ... and the finding says what would
    assert alone.findings[0].evidence[keys.UNREFERENCED_RISE]  # (a sweep's summary counts these)
    learns.context.update(reference_return=475.0, reference_source="CartPole-v1's registered reward_threshold")
    verdict = classify(learns, final=True)
    finding = next(f for f in verdict.findings if f.kind == "stuck_value_loss")
    assert verdict.verdict == "healthy" and not finding.certain
    assert "learns regardless" in finding.causes[0] and "CartPole-v1's registered" in finding.causes[0]
    assert finding.evidence["reference_return"] == 475.0
    # a rise a sixth of the way (22 -> 96 of 475) is short of it: the critic's failure stands
    slow = ppo_history(n, **off, ep_return=[20.0 + 2 * i for i in range(n)])
    slow.context["reference_return"] = 475.0
    short = classify(slow, final=True)
    assert short.verdict == "stuck_value_loss"
    assert not any("no reference return" in a for a in short.findings[0].advice)
    flat = ppo_history(n, **off, ep_return=[20.0 - 0.1 * i for i in range(n)])  # nothing rose: nothing to say
    assert not any("no reference return" in a for a in classify(flat, final=True).findings[0].advice)
    # returns that start past the reference and stay there (a reward in negative units, Acrobot's) learnt it
    solved = ppo_history(n, **off, ep_return=[-95.0 + 3 * math.sin(i) for i in range(n)])
    solved.context["reference_return"] = -100.0
    assert classify(solved, final=True).verdict == "healthy"
    below = ppo_history(n, **off, ep_return=[-400.0 + i for i in range(n)])  # -399 -> -362: an eighth
    below.context["reference_return"] = -100.0
    assert classify(below, final=True).verdict == "stuck_value_loss"


def test_an_env_paid_per_step_survived_bounds_the_reference_by_its_time_limit():
    """No reference, but returns that follow the episodes' length at a steady rate (CartPole's 1 a
    step, here with reward noise) within a known time limit: the env pays at most limit x rate, a
    bound above any reference, so a run that got learned_fraction of the way to it learns."""
    n = 40
    off = {"critic_error": [0.9] * n, "critic_r2": [-3.0] * n}
    lengths = [20.0 + 3.5 * i for i in range(n)]  # 20 -> 156.5 steps of a 200-step limit
    paid = [length * (1.0 + 0.05 * math.sin(i)) for i, length in enumerate(lengths)]

    def judged(returns: list[float], limit: Any = 200, **more: Any) -> Any:
        h = ppo_history(n, **off, ep_return=returns, ep_length=lengths, **more)
        if limit is not None:
            h.context["time_limit"] = limit
        verdict = classify(h, final=True)
        return verdict, next(f for f in verdict.findings if f.kind == "stuck_value_loss")

    verdict, finding = judged(paid)
    assert verdict.verdict == "healthy" and not finding.certain
    assert "learns regardless" in finding.causes[0] and "200-step time limit" in finding.causes[0]
    assert finding.evidence["reference_return"] == pytest.approx(200.0, rel=0.05)
    assert keys.UNREFERENCED_RISE not in finding.evidence
    # no time limit known, or returns that do not follow the length: as before
    assert judged(paid, limit=None)[0].verdict == "stuck_value_loss"
    assert judged(paid, limit=True)[0].verdict == "stuck_value_loss"  # not a number of steps
    assert judged(paid, limit=200.5)[0].verdict == "stuck_value_loss"
    assert judged(paid, limit=200.0)[0].verdict == "healthy"  # read back from JSON as a float
    uneven = [length * (1.0 + 0.8 * (i % 2)) for i, length in enumerate(lengths)]  # a bonus every other record
    assert judged(uneven)[0].verdict == "stuck_value_loss"
    # lengths past the limit: the limit read is not the one that ended the episodes
    assert judged(paid, limit=100)[0].verdict == "stuck_value_loss"
    # the bound stands for the reference both ways: short of learned_fraction of the way to it, the
    # policy did not learn (no advice to give a reference: the bound told how far short it is)
    lengths[:] = [20.0 + 0.6 * i for i in range(n)]  # 20 -> 43 of 200: an eighth of the way
    verdict, finding = judged([length * 1.01 for length in lengths])
    assert verdict.verdict == "stuck_value_loss" and finding.certain
    assert finding.evidence["reference_return"] == pytest.approx(202.0, rel=0.01)
    assert keys.UNREFERENCED_RISE not in finding.evidence
    # six huge updates short of the bound: judged on them, as short of a reference; with no limit
    # known, a critic that may only need more updates (a warning)
    few = {"critic_error": [0.9] * 6, "critic_r2": [-3.0] * 6, "ep_length": [21.0, 24, 30, 38, 45, 52]}
    few["ep_return"] = [length * 1.01 for length in few["ep_length"]]
    for limit, certain in ((200, True), (None, False)):
        h = ppo_history(6, **few)
        if limit is not None:
            h.context["time_limit"] = limit
        verdict = classify(h, final=True)
        assert [(f.kind, f.certain) for f in verdict.findings] == [("stuck_value_loss", certain)]


def test_an_env_that_charges_per_step_until_the_episode_ends_is_bounded_by_an_end_at_once():
    """Acrobot's -1 a step (here with noise) over episodes cut at 700 steps: shorter is better, and
    the most an episode can return is 0. That stands for the reference both ways: a run whose
    episodes got learned_fraction of the way from their start to 0 learns (a warning); one that
    got under it, over lengths that still varied, does not (certain)."""
    n = 40
    off = {"critic_error": [0.9] * n, "critic_r2": [-3.0] * n}

    def judged(lengths: list[float], limit: Any = 700) -> Any:
        returns = [-length * (1.0 + 0.01 * math.sin(i)) for i, length in enumerate(lengths)]
        h = ppo_history(n, **off, ep_return=returns, ep_length=lengths)
        if limit is not None:
            h.context["time_limit"] = limit
        verdict = classify(h, final=True)
        return verdict, next(f for f in verdict.findings if f.kind == "stuck_value_loss")

    sooner = [700.0 - 14 * i for i in range(n)]  # 700 -> 154 steps: 78% of the way to 0
    verdict, finding = judged(sooner)
    assert verdict.verdict == "healthy" and not finding.certain
    assert finding.evidence["reference_return"] == 0.0
    assert "learns regardless" in finding.causes[0] and "until it ends: 0, an end at once" in finding.causes[0]
    assert judged(sooner, limit=None)[0].verdict == "stuck_value_loss"  # no limit known: as before
    # lengths that varied (a few early episodes reached the goal) but ended where they began
    varied = [300.0 + 10 * i for i in range(n)]  # 300 -> 690 of 700: worse, not better
    verdict, finding = judged(varied)
    assert verdict.verdict == "stuck_value_loss" and finding.certain
    # lengths that never varied enough to show the cost follows them (every episode cut at the
    # limit, or near it) say nothing of the bound: as without one
    assert "reference_return" not in judged([700.0 - 4 * i for i in range(n)])[1].evidence


def test_the_return_at_a_runs_end_is_its_recent_episodes_where_the_callback_recorded_them():
    """SB3's ep_return is a mean over the last 100 episodes: on 1000-step episodes it spans most of a
    run and lags a policy that has learnt. The callback's ep_return_recent (the episodes ended
    since its record before) is the policy's return at the end where there are enough records."""
    n = 40
    off = {"critic_error": [0.9] * n, "critic_r2": [-3.0] * n}
    lagging = [-50.0 + 0.5 * i for i in range(n)]  # a 100-episode mean still climbing: -50 -> -30.5
    caught_up = [-50.0] * 20 + [85.0] * 20  # the goal reached every episode of the second half
    h = ppo_history(n, **off, ep_return=lagging)
    h.context["reference_return"] = 90.0
    assert classify(h, final=True).verdict == "stuck_value_loss"  # -50 -> -31, 14% of the way to 90: short
    h = ppo_history(n, **off, ep_return=lagging, ep_return_recent=caught_up)
    h.context["reference_return"] = 90.0
    verdict = classify(h, final=True)
    finding = next(f for f in verdict.findings if f.kind == "stuck_value_loss")
    assert verdict.verdict == "healthy" and "learns regardless" in finding.causes[0]
    assert finding.evidence["return_end"] == 85.0
    # a few records are too few to stand for the end: the logged mean decides
    few = [math.nan] * (n - 4) + [85.0] * 4
    h = ppo_history(n, **off, ep_return=lagging, ep_return_recent=few)
    h.context["reference_return"] = 90.0
    assert classify(h, final=True).verdict == "stuck_value_loss"
    # recent episodes that fell back below the bar are a policy that is not there at the end
    fell = [85.0] * 30 + [-50.0] * 10
    h = ppo_history(n, **off, ep_return=[-50.0 + 3 * i for i in range(n)], ep_return_recent=fell)
    h.context["reference_return"] = 90.0
    assert classify(h, final=True).verdict == "stuck_value_loss"


def test_a_short_run_that_ended_short_of_its_reference_is_judged_on_its_budget():
    """Under min_certain_updates a stuck critic is a warning (it may only need more updates), unless
    the run has ended with its returns short of a reference: the budget was the trial's, spent on
    a critic that did not fit beside a policy that did not learn (a PPO of 1024-step batches and 6
    updates on CartPole-v0)."""
    n = 6
    off = {"critic_error": [0.95] * n, "critic_r2": [-1.8] * n, "ep_return": [21.0, 28.0, 32.0, 43.0, 46.0, 54.0]}
    h = ppo_history(n, **off)
    finding = next(f for f in classify(h, final=True).findings if f.kind == "stuck_value_loss")
    assert not finding.certain and "may not have had the time" in finding.causes[0]  # no reference: warning
    h.context["reference_return"] = 195.0
    finding = next(f for f in classify(h, final=True).findings if f.kind == "stuck_value_loss")
    assert finding.certain and "judged on them" in finding.causes[0]
    # a policy that got there on those 6 updates is not failing for its critic
    h = ppo_history(n, **off | {"ep_return": [21.0, 60.0, 100.0, 140.0, 170.0, 190.0]})
    h.context["reference_return"] = 195.0
    assert classify(h, final=True).verdict == "healthy"


def test_the_reference_return_is_the_registered_threshold_of_the_returns_the_recorder_sees():
    """A registered reward_threshold holds unless a wrapper that may change the reward sits
    between the env and the recorder of its episode returns (SB3's Monitor)."""
    import gymnasium as gym

    from stability import references

    monitor = "stable_baselines3.common.monitor:Monitor"

    def spec(*entry_points: str) -> Any:
        wrappers = tuple(gym.envs.registration.WrapperSpec(e.split(":")[1], e, None) for e in entry_points)
        return replace(gym.spec("CartPole-v1"), additional_wrappers=wrappers)

    assert references.registered(spec(monitor)) == (475.0, "CartPole-v1's registered reward_threshold")
    assert references.registered(spec("sweeps.repro_envs:DictObservation", monitor)) is not None  # observations only
    assert references.registered(spec("sweeps.repro_envs:NoisyReward", monitor)) is None  # changes what Monitor sums
    assert references.registered(spec(monitor, "sweeps.repro_envs:NoisyReward")) is not None  # over it: not seen
    assert references.registered(spec("no.such.module:Wrapper")) is None  # unknown: it may change the reward
    # SB3 logs the outermost Monitor's returns: a reward wrapper under it counts, under an inner recorder too
    inner = "gymnasium.wrappers.common:RecordEpisodeStatistics"
    assert references.registered(spec(inner, "sweeps.repro_envs:NoisyReward", monitor)) is None
    # made otherwise than registered: another time limit, another keyword argument, a TimeLimit added
    assert references.registered(gym.make("CartPole-v1", max_episode_steps=100).spec) is None
    assert references.registered(gym.make("CartPole-v1", sutton_barto_reward=True).spec) is None
    assert references.registered(spec("gymnasium.wrappers.common:TimeLimit", monitor)) is None
    assert references.registered(gym.make("CartPole-v1", render_mode="rgb_array").spec) is not None  # display only
    assert references.registered(gym.spec("Pendulum-v1")) is None  # registered without one
    assert references.by_id("Acrobot-v1") == (-100.0, "Acrobot-v1's registered reward_threshold")
    assert references.limit_of(references.spec_by_id("Acrobot-v1")) == {"time_limit": 500}
    cut = gym.make("CartPole-v1", max_episode_steps=300)
    assert references.time_limit(cut) == {"time_limit": 300} and references.time_limit(None) == {}
    loop = SimpleNamespace()
    loop.env = loop  # an env that names itself as its inner env: the walk ends
    assert references.time_limit(loop) == {}
    with pytest.raises(KeyError, match="Nope"):
        references.by_id("Nope-v0")
    with pytest.raises(KeyError, match="not imported"):  # an id read from a log imports nothing
        references.by_id("stability.references:CartPole-v1")


def test_a_module_env_id_is_registered_by_importing_its_module(tmp_path, monkeypatch):
    import gymnasium as gym

    from stability import references

    (tmp_path / "rlsweep_test_envs.py").write_text(
        "import gymnasium as gym\n"
        "gym.register('RlsweepRefTest-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv', "
        "reward_threshold=123.0, max_episode_steps=50)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert references.by_id("rlsweep_test_envs:RlsweepRefTest-v0", import_module=True)[0] == 123.0
        with pytest.raises(KeyError, match="cannot import"):
            references.by_id("no_such_module_here:Env-v0", import_module=True)
    finally:
        gym.registry.pop("RlsweepRefTest-v0", None)


def test_an_rl_zoo_file_keyed_by_env_id_gives_that_envs_reference(tmp_path):
    from stability.readers import read_config

    (tmp_path / "ppo.yml").write_text("CartPole-v1:\n  n_steps: 32\n  gamma: 0.98\n")
    assert read_config(tmp_path / "ppo.yml", "ppo")["reference_return"] == 475.0
    (tmp_path / "plain.yml").write_text("n_steps: 32\ngamma: 0.98\n")  # no env named: none
    assert "reference_return" not in read_config(tmp_path / "plain.yml", "ppo")
    (tmp_path / "custom.yml").write_text("my.envs:Cart-v0:\n  n_steps: 32\n")  # a module is never imported
    assert "reference_return" not in read_config(tmp_path / "custom.yml", "ppo")


def test_a_reference_return_given_to_the_callback_must_be_a_number():
    from stability import StabilityCallback

    for bad in (math.nan, math.inf, "475"):
        with pytest.raises(ValueError, match="reference_return must be a finite number"):
            StabilityCallback(reference_return=bad)  # type: ignore[arg-type]
    for bad in (0.0, -1.0, math.nan, math.inf, "2", True):
        with pytest.raises(ValueError, match="reward_scale must be a positive finite number"):
            StabilityCallback(reward_scale=bad)  # type: ignore[arg-type]


def test_a_cleanrl_table_names_its_env_and_so_its_reference():
    from stability.readers import context_from_cleanrl_table

    table = "|param|value|\n|-|-|\n|env_id|CartPole-v1|\n|gamma|0.99|\n"
    assert context_from_cleanrl_table(table)["reference_return"] == 475.0
    assert "reference_return" not in context_from_cleanrl_table(table.replace("CartPole-v1", "Pendulum-v1"))
    assert "reference_return" not in context_from_cleanrl_table(table.replace("CartPole-v1", "my.envs:Cart-v0"))


def test_records_too_few_for_a_window_are_read_together_over_the_second_half():
    # episodes of hundreds of steps end a few times a run: one record in each window, two in the
    # run's second half. The loss falls and explained variance is high, so the loss rules see
    # nothing; the critic is off the returns its episodes paid by three times their RMS.
    n = 40
    at = (8, 25, 39)
    off = {
        "critic_error": [3.0 if i in at else math.nan for i in range(n)],
        "critic_r2": [-60.0 if i in at else math.nan for i in range(n)],
    }
    finding = next(f for f in classify(ppo_history(n, **off), final=True).findings if f.kind == "stuck_value_loss")
    assert finding.certain and "300% of their RMS" in finding.summary
    assert finding.evidence["critic_records_second_half"] == 2
    assert classify(ppo_history(n, **off)).verdict == "healthy"  # a live check leaves it to the loss
    # the two records disagree (one fits): left to the loss rules, which see a healthy critic
    split = dict(off, critic_error=[3.0 if i == 25 else 0.3 if i == 39 else math.nan for i in range(n)])
    assert classify(ppo_history(n, **split), final=True).verdict == "healthy"
    # one record alone is not enough
    one = dict(off, critic_error=[3.0 if i == 39 else math.nan for i in range(n)])
    assert classify(ppo_history(n, **one), final=True).verdict == "healthy"
    # both close to the returns: the loss rules' flat critic with explained variance ~0 is cleared
    flat = flat_critic(n)
    close = {"critic_error": [0.2 if i in at else math.nan for i in range(n)]}
    assert classify(ppo_history(n, **flat), final=True).verdict == "stuck_value_loss"
    assert classify(ppo_history(n, **flat, **close), final=True).verdict == "healthy"


def test_a_plain_log_whose_episodes_all_returned_zero_holds_no_measure_of_the_critic():
    n = 40
    flat = {"value_loss": [4.0 + 0.1 * (i % 3) for i in range(n)], "explained_variance": [1e-5] * n}
    # episodes that pay: a flat loss, large against their scale, with explained variance pinned at 0
    # is a stuck critic
    paid = [5.0 + i % 2 for i in range(n)]
    assert classify(ppo_history(n, **flat, ep_return=paid), final=True).verdict == "stuck_value_loss"
    # episodes that all returned 0 give the loss no scale, and targets with no spread make
    # explained variance 0 whatever the critic predicts: not judged
    zero = classify(ppo_history(n, **flat, ep_return=[0.0] * n), final=True)
    assert "stuck_value_loss" not in {f.kind for f in zero.findings}
    # one episode of the window that paid is enough to judge again
    once = [0.0] * (n - 3) + [1.0, 0.0, 0.0]
    assert classify(ppo_history(n, **flat, ep_return=once), final=True).verdict == "stuck_value_loss"


def test_update_ratio_follows_the_weights_through_in_place_steps_and_replaced_storage():
    from collections.abc import Callable

    import torch as th

    from stability.callback import _Weights

    net = th.nn.Sequential(th.nn.Linear(3, 4), th.nn.Linear(4, 2))
    weights = _Weights(net)

    def expected(step: Callable[[], None]) -> float:
        before = th.cat([p.detach().reshape(-1).clone() for p in net.parameters()])
        with th.no_grad():
            step()
        after = th.cat([p.detach().reshape(-1) for p in net.parameters()])
        return float(th.linalg.vector_norm(after - before) / th.linalg.vector_norm(before))

    def in_place() -> None:  # what an optimizer does
        for p in net.parameters():
            p.add_(0.1 * th.randn_like(p))

    def replaced() -> None:  # a load by assignment: new storage, the old views would be stale
        for p in net.parameters():
            p.data = p.data * 3.0

    for step in (in_place, replaced, in_place):
        want = expected(step)
        assert weights.moved() == pytest.approx(want, rel=1e-5)
    assert weights.moved() == 0.0  # nothing moved since
    net[0].weight = th.nn.Parameter(net[0].weight.detach() * 2)  # another object: seen at a recheck
    assert weights.moved(recheck=True) is None
    want = expected(in_place)
    assert weights.moved() == pytest.approx(want, rel=1e-5)
    with th.no_grad():
        next(net.parameters()).fill_(math.nan)
    assert weights.moved() is None  # not finite: nan_scale reads it from params_finite


def test_discounted_returns_match_the_backward_sum_for_short_and_long_episodes():
    import numpy as np

    from stability.callback import discounted_returns

    rng = np.random.default_rng(0)
    for gamma in (0.0, 0.3, 0.9, 0.99, 0.999, 1.0):
        for length in (0, 1, 5, 64, 65, 700, 12_000):  # 12k steps at gamma 0.3: several blocks
            rewards = rng.standard_normal(length) * 10 + 3
            expected, running = [], 0.0
            for r in reversed(rewards.tolist()):
                running = r + gamma * running
                expected.append(running)
            got = discounted_returns(rewards, gamma)
            assert got.shape == (length,) and np.all(np.isfinite(got))
            assert np.allclose(got, expected[::-1], rtol=1e-12, atol=1e-9)


def test_episode_returns_measure_nothing_against_returns_of_zero_and_keep_envs_apart():
    import numpy as np

    from stability.callback import EpisodeReturns

    # a constant zero reward: the critic's small outputs are no error of any size worth a number
    tracker = EpisodeReturns(0.99, min_pairs=4)
    tracker.add(np.full((8, 1), 1e-3), np.zeros((8, 1)), np.array([[1]] + [[0]] * 7), [True])
    assert tracker.pop() == {}
    # two envs, episodes ending at different steps; env 1's critic is exact, env 0's predicts 0
    gamma = 0.9
    rewards = np.ones((6, 2))
    starts = np.array([[1, 1], [0, 0], [0, 0], [1, 0], [0, 0], [0, 0]])  # env 0: 3 + 3 steps, env 1: 6
    exact = lambda k: (1 - gamma**k) / (1 - gamma)  # noqa: E731
    values = np.array([[0.0, exact(6 - t)] for t in range(6)])
    tracker = EpisodeReturns(gamma, min_pairs=1)
    tracker.add(values, rewards, starts, [True, True])
    returns = [exact(3), exact(2), exact(1)] * 2 + [exact(6 - t) for t in range(6)]
    errors = [r for r in returns[:6]] + [0.0] * 6
    expected = math.sqrt(sum(e * e for e in errors) / 12) / math.sqrt(sum(r * r for r in returns) / 12)
    assert tracker.pop()["critic_error"] == pytest.approx(expected)
    # an episode longer than the cap keeps and measures its last steps only
    tracker = EpisodeReturns(gamma, min_pairs=1, cap=4)
    for _ in range(3):
        tracker.add(np.zeros((3, 1)), np.ones((3, 1)), np.zeros((3, 1)), [False])
    tracker.add(np.zeros((1, 1)), np.ones((1, 1)), np.zeros((1, 1)), [True])
    tracker._flush()
    assert tracker._n == 4


def a2c_plain_log(ev: list[float], value_loss: list[float]) -> History:
    """What ``diagnose`` reads from a plain A2C log: no approx_kl, no return_rms; episodes of 100
    steps returning ~50, so a loss of ~1 is small against the returns' scale."""
    n = len(ev)
    h = H(total_steps=n * 500)
    for i in range(n):
        h.add(
            500 * (i + 1),
            {
                "pg_loss": 2.0 * (-1) ** i,
                "value_loss": value_loss[i],
                "explained_variance": ev[i],
                "entropy": 1.3 - 0.01 * i,
                "learning_rate": 7e-4,
                "ep_return": 50.0 + (i % 3),
                "ep_length": 100.0,
            },
        )
    return h


def test_a2c_plain_log_calls_a_critic_worse_than_its_targets_mean_stuck_once_the_run_has_ended():
    n = 40
    flat = [1.0 + 0.05 * (i % 3) for i in range(n)]
    falling = [10.0 / (1 + i) for i in range(n)]
    # healthy A2C: each update's explained variance is one short rollout's, noisy around 0
    noisy = [0.3 * math.sin(1.7 * i) for i in range(n)]
    assert classify(a2c_plain_log(noisy, flat), final=True).verdict == "healthy"
    # further off the targets than their own mean, over the window, once the run has ended, with a
    # loss that fell but is still ~0.4 of the episodes' squared discounted return (~32^2)
    worse = [-0.6 + 0.3 * math.sin(1.7 * i) for i in range(n)]
    large = [2000.0 / (1 + i / 10) for i in range(n)]
    verdict = classify(a2c_plain_log(worse, large), final=True)
    assert verdict.verdict == "stuck_value_loss" and "further off its targets" in verdict.findings[0].summary
    # not from a live check, and not from PPO-style logs (a converged policy's near-constant
    # targets make their explained variance very negative)
    assert classify(a2c_plain_log(worse, large)).verdict == "healthy"
    # a loss of ~1e-4 of that square: targets that barely vary about a level the critic fits; a warning
    small = classify(a2c_plain_log(worse, falling), final=True)
    assert small.verdict == "healthy" and not small.findings[0].certain
    settled = [0.8] * (n // 2) + worse[n // 2 :]  # it fit before its targets went near-constant
    ppo = ppo_history(n, explained_variance=settled, value_loss=falling, ep_length=[100.0] * n)
    assert classify(ppo, final=True).verdict == "healthy"
    # pinned at 0 with a flat loss small against the episodes' scale: a constant critic, maybe at
    # the returns' level (which the label calls fit); a plain log cannot tell, so not judged
    # (a rule that called it stuck broke three held-out runs)
    assert classify(a2c_plain_log([1e-5] * n, flat), final=True).verdict == "healthy"


def test_a_run_that_ends_mid_group_on_one_env_closes_without_a_crash():
    """At the end of training the last rollout buffer has been flattened by train(); the
    callback's last probe of the Gaussian's mean must read it in that layout too."""
    from stable_baselines3 import A2C
    from stable_baselines3.common.env_util import make_vec_env

    from stability import StabilityCallback
    from sweeps.repro_envs import make_spiky_targets

    env = make_vec_env(make_spiky_targets, n_envs=1, seed=0)
    model = A2C("MlpPolicy", env, seed=0, device="cpu", n_steps=5, policy_kwargs={"net_arch": [8]})
    # 4 updates a record; the 11th record (a probed one) is the 2 updates training ends with
    cb = StabilityCallback(min_update_steps=20)
    model.learn(210, callback=cb)
    assert cb.history.steps[-1] == 210 and len(cb.history) == 11
    probed, _ = cb.history.series["loc_abs_max"]
    assert probed[-1] == 10  # the last record was probed, in the flattened layout


def test_the_weights_norm_is_recorded_from_the_start_of_training_to_its_end():
    """param_norm is the weights' norm after each record's updates (the last one: the trained
    model's); the context holds it at the start and the unit-gain norm of the weight matrices."""
    from stable_baselines3 import A2C
    from stable_baselines3.common.env_util import make_vec_env

    from stability import StabilityCallback

    env = make_vec_env("CartPole-v1", n_envs=1, seed=0)
    model = A2C("MlpPolicy", env, seed=0, device="cpu", n_steps=5, learning_rate=0.05, policy_kwargs={"net_arch": [8]})

    def norm() -> float:
        return math.sqrt(sum(float((p.detach().double() ** 2).sum()) for p in model.policy.parameters()))

    start = norm()
    cb = StabilityCallback(min_update_steps=20)
    model.learn(200, callback=cb)
    norms = cb.history.values("param_norm")
    assert len(norms) == len(cb.history) == 10
    assert cb.history.context["param_norm_start"] == pytest.approx(start, rel=1e-5)
    assert norms[-1] == pytest.approx(norm(), rel=1e-5) and norms[-1] != pytest.approx(start, rel=1e-3)
    # 4 inputs -> 8 units in each of the two nets, heads 8 -> 2 and 8 -> 1: min(rows, columns) each
    assert cb.history.context["param_norm_unit"] == pytest.approx(math.sqrt(4 + 4 + 2 + 1))


def test_context_records_the_gaussian_start_and_bounds_the_advice_reads():
    from stable_baselines3 import A2C
    from stable_baselines3.common.env_util import make_vec_env

    from stability import StabilityCallback
    from sweeps.policies import BoundedActorCriticPolicy
    from sweeps.repro_envs import make_spiky_targets

    env = make_vec_env(make_spiky_targets, n_envs=1, seed=0)
    kwargs = {"net_arch": [8], "log_std_init": -1.0, "log_std_bounds": [-5, 2]}
    bounded = A2C(BoundedActorCriticPolicy, env, seed=0, device="cpu", n_steps=5, policy_kwargs=kwargs)
    plain = A2C("MlpPolicy", env, seed=0, device="cpu", n_steps=5, policy_kwargs={"net_arch": [8]})
    contexts = []
    for model in (bounded, plain):
        cb = StabilityCallback()
        model.learn(10, callback=cb)
        contexts.append(cb.history.context)
    assert contexts[0]["log_std_init"] == -1.0 and contexts[0]["log_std_bounds"] == [-5.0, 2.0]
    assert contexts[1]["log_std_init"] == 0.0 and "log_std_bounds" not in contexts[1]
    # both heads' starting scale: SB3's gains (0.01 for the policy's, 1 for the value's) on 8 units
    assert contexts[1]["policy_head_weight_std"] < 0.01 and 0.1 < contexts[1]["value_head_weight_std"] < 1.0
    assert contexts[1]["default_learning_rate"] == 7e-4  # A2C's own, read from its constructor
    assert contexts[1]["default_optimizer"] == "rmsprop"  # and its own optimizer (PPO's is Adam)
    assert "clip_range_vf" not in contexts[1]  # A2C has none
    json.dumps(contexts)  # the context travels as JSON (MLflow's stability.context tag)
    # PPO keeps its value clip as a schedule: the context holds its value at the start, none unset
    from stable_baselines3 import PPO

    for clip, expected in ((lambda _: 3e-5, 3e-5), (0.2, 0.2), (None, None)):
        ppo = PPO(
            "MlpPolicy",
            env,
            seed=0,
            device="cpu",
            n_steps=16,
            batch_size=16,
            clip_range_vf=clip,
            policy_kwargs={"net_arch": [8]},
        )
        cb = StabilityCallback()
        ppo.learn(16, callback=cb)
        assert cb.history.context.get("clip_range_vf") == expected


def test_a_learning_rate_far_above_the_algorithms_default_is_named_and_can_go_back_to_it():
    """A rate 10 times its algorithm's default or more is named as a cause; the patch back to the
    default is offered where nearer rates or SGD (SB3's defaults are for Adam and RMSprop) are not.
    Exploding updates keep their tenfold cut and name the rate first."""
    ctx = {"algo": "PPO", "optimizer": "Adam", "default_learning_rate": 3e-4}
    assert advice.far_above_default(ctx, 0.2) == "learning rate 0.2 is 667x PPO's default (0.0003)"
    back = advice.back_to_default_lr(ctx, 0.2, "smaller steps")
    assert back is not None and back["patch"] == {"learning_rate": 3e-4} and "667x" in back["why"]
    assert advice.back_to_default_lr(ctx, 2e-3, "x") is None  # under 10x: the usual cut decides
    assert advice.back_to_default_lr(ctx | {"optimizer": "SGD"}, 25.0, "x") is None
    assert advice.back_to_default_lr({}, 0.2, "x") is None  # no default known
    assert advice.lower_lr(ctx, 0.2, 3.0, "x")["patch"] == {"learning_rate": 0.0667}
    blowup = {"update_ratio": [0.01] * 8 + [0.9] * 32, "approx_kl": [0.01] * 8 + [20.0] * 32}
    h = ppo_history(40, learning_rate=[0.2] * 40, **blowup)
    h.context.update(ctx)
    finding = next(f for f in classify(h, final=True).findings if f.kind == "exploding_updates")
    assert finding.causes[0].startswith("learning rate 0.2 is 667x")
    assert finding.patches[0]["patch"] == {"learning_rate": 0.02}


def test_plain_sgd_stepping_past_its_gradient_goes_back_to_the_algorithms_own_optimizer():
    """SGD at a learning rate of 1 or more steps each weight by more than its gradient: a divergence
    there is advised the algorithm's own optimizer at its default rate, before any cut of the rate
    (a third of 55 still diverged). Under 1, or another optimizer, the cuts decide as before."""
    ctx = {"algo": "PPO", "optimizer": "SGD", "default_learning_rate": 3e-4, "default_optimizer": "adam"}
    back = advice.back_to_own_optimizer(ctx, 55.0, "smaller updates")
    assert back is not None and back["patch"] == {"optimizer": "adam", "learning_rate": 3e-4}
    assert "55" in back["why"] and "adam" in back["why"]
    assert advice.back_to_own_optimizer(ctx, 0.5, "x") is None  # SGD under 1: the usual cut first
    assert advice.back_to_own_optimizer(ctx | {"optimizer": "Adam"}, 55.0, "x") is None
    assert advice.back_to_own_optimizer(ctx | {"optimizer": "sgd"}, 55.0, "x") is not None  # a config's knob
    assert advice.back_to_own_optimizer({"optimizer": "SGD"}, 55.0, "x") is None  # nothing known to go back to
    # momentum m multiplies a steady gradient's step by 1 / (1 - m): 0.32 with momentum 0.9 steps by
    # 3.2 gradients, past the bar; the same rate without momentum (or a momentum out of [0, 1)) does not
    heavy = advice.back_to_own_optimizer(ctx | {"momentum": 0.9}, 0.32, "x")
    assert heavy is not None and heavy["patch"] == {"optimizer": "adam", "learning_rate": 3e-4}
    assert "momentum 0.9" in heavy["why"] and "3.2 times" in heavy["why"]
    for momentum in (0.0, 1.0, -0.5, True):
        assert advice.back_to_own_optimizer(ctx | {"momentum": momentum}, 0.32, "x") is None, momentum
    # both divergence findings offer it first (nan_scale after a Gaussian's bounds, which it has not here)
    h = ppo_history(12, learning_rate=[55.0] * 12)
    h.add(13000, {"value_loss": math.nan})
    h.context.update(ctx)
    nan = next(f for f in classify(h, final=True).findings if f.kind == "nan_scale")
    assert [p["patch"] for p in nan.patches[:2]] == [
        {"optimizer": "adam", "learning_rate": 3e-4},
        {"learning_rate": 18.3},
    ]
    blowup = {"update_ratio": [0.01] * 8 + [0.9] * 32, "approx_kl": [0.01] * 8 + [20.0] * 32}
    h = ppo_history(40, learning_rate=[2.0] * 40, **blowup)
    h.context.update(ctx | {"default_optimizer": "rmsprop", "default_learning_rate": 7e-4})
    exploding = next(f for f in classify(h, final=True).findings if f.kind == "exploding_updates")
    assert exploding.patches[0]["patch"] == {"optimizer": "rmsprop", "learning_rate": 7e-4}
    assert exploding.patches[1]["patch"] == {"learning_rate": 0.2}


def test_gradient_norms_split_by_role_exactly_and_keep_an_infinite_role_apart():
    import torch as th

    from stability.gradients import GradNormMonitor

    class Policy(th.nn.Module):  # SB3's parameter names decide the roles
        def __init__(self) -> None:
            super().__init__()
            self.action_net = th.nn.Linear(3, 2)
            self.value_net = th.nn.Linear(3, 1)
            self.log_std = th.nn.Parameter(th.zeros(2))
            self.optimizer = th.optim.SGD(self.parameters(), lr=0.0)

    policy = Policy()
    monitor = GradNormMonitor(policy, max_grad_norm=1.0)
    # every element of a role equal, scaled so that the role's norm is exactly its size
    numel: dict[str, int] = {}
    for name, p in policy.named_parameters():
        numel[name.split(".")[0]] = numel.get(name.split(".")[0], 0) + p.numel()
    try:
        for critic in (4.0, math.inf, 4.0):
            sizes = {"action_net": 3.0, "value_net": critic, "log_std": 12.0}
            for name, p in policy.named_parameters():
                top = name.split(".")[0]
                p.grad = th.full_like(p, sizes[top] / math.sqrt(numel[top]))
            total = th.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)  # the monitor stands in for torch's
            policy.optimizer.step()
            assert float(total) == pytest.approx(math.sqrt(9 + critic**2 + 144))
        out = monitor.pop()
    finally:
        monitor.close()
    assert th.nn.utils.clip_grad_norm_ is not monitor._clip  # torch's own again
    # the actor and log_std roles are untouched by the critic's infinite step
    assert out["train/grad_norm_actor"] == pytest.approx(3.0)
    assert out["train/grad_norm_log_std"] == pytest.approx(12.0)
    assert math.isinf(out["train/grad_norm_critic"]) and math.isinf(out["train/grad_norm_max"])
    assert out["train/grad_clipped_fraction"] == 1.0
    assert monitor.pop() == {}  # popped: the next update starts afresh
