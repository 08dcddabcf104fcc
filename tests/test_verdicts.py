"""One verdict per run: sticky findings, both paths alike, short runs, causes before consequences,
entropy collapse, and advice as knob patches computed from the run's own config."""

from __future__ import annotations

import math

import pytest

from stability import History, classify
from stability.detectors._base import UNIT_GAUSSIAN_ENTROPY
from stability.verdict import Judge, checkpoints, judge
from tests.test_stability import ppo_history


def test_checkpoints_every_update_then_every_five_percent():
    points = checkpoints(200)
    assert points[:20] == list(range(1, 21))
    assert all(b - a == max(1, a // 20) for a, b in zip(points, points[1:], strict=False))
    assert points[-1] <= 200


def test_a_certain_finding_stays_when_a_decayed_learning_rate_would_excuse_it():
    n = 40
    # dead from the start; over the last updates a schedule takes the learning rate towards 0
    lr = [3e-4] * 30 + [3e-4 * (1 - (i + 1) / 10) * 0.04 for i in range(10)]
    h = ppo_history(
        n, kl=1e-7, clip=0.0, entropy=[1.386] * n, ep_return=[20.0 + 0.5 * (i % 3) for i in range(n)], learning_rate=lr
    )
    assert classify(h, final=True).verdict == "healthy"  # the end alone excuses it ...
    assert judge(h).verdict == "dead_policy_gradient"  # ... the run's verdict does not


def test_judge_replays_what_the_callback_saw():
    n = 40
    h = ppo_history(n, kl=1e-7, clip=0.0, entropy=[1.386] * n, ep_return=[20.0] * n)
    live = Judge()
    for k in checkpoints(n)[:-1]:
        live.check(h.prefix(k))
    assert live.check(h, final=True).to_dict() == judge(h).to_dict()


def test_short_runs_are_judged_and_say_so():
    h = History(total_steps=3 * 8192)
    for i, (loss, ev) in enumerate([(83.0, 0.0003), (84.0, 0.011), (79.0, 0.019)]):
        h.add(
            8192 * (i + 1),
            {
                "value_loss": loss,
                "explained_variance": ev,
                "return_rms": 11.0,
                "approx_kl": 0.007,
                "clip_fraction": 0.05,
                "entropy": 0.69 - 0.01 * i,
                "ep_return": 22.0 + 4 * i,
            },
        )
    verdict = judge(h)
    assert verdict.notes and "short run: 3 updates" in verdict.notes[0]
    # value loss ~70% of the returns' square after 3 updates: said, but as a warning (a critic
    # may only need more updates), so a smoke-test sweep's configs are not thrown away
    finding = verdict.findings[0]
    assert (finding.kind, finding.certain, verdict.verdict) == ("stuck_value_loss", False, "healthy")
    assert "only 3 updates over 24576 steps" in finding.causes[0]


def test_a_critic_lagging_rising_returns_is_not_stuck():
    n = 40
    # value loss rises with the returns, EV near 0 in rollouts without an episode end, but the
    # loss is a few percent of the returns' square: a critic catching up, not a stuck one
    h = ppo_history(
        n,
        value_loss=[30.0 + 2 * i for i in range(n)],
        explained_variance=[0.0005 * (-1) ** i for i in range(n)],
        return_rms=[20.0 + 1.5 * i for i in range(n)],
        ep_return=[20.0 + 5 * i for i in range(n)],
    )
    assert judge(h).verdict == "healthy"


def test_constant_rewards_since_a_later_rollout_do_not_hide_the_failure_that_caused_them():
    n = 40
    rewards = [0.3] * 10 + [0.0] * 30  # the policy reached the goal early on, then stopped moving
    h = ppo_history(
        n,
        kl=1e-7,
        clip=0.0,
        entropy=[1.386] * n,
        ep_return=[0.5] * 10 + [0.0] * 30,
        reward_std=rewards,
        reward_mean=[0.0] * n,
    )
    verdict = judge(h)
    assert verdict.verdict == "dead_policy_gradient"
    degenerate = next(f for f in verdict.findings if f.kind == "degenerate_reward")
    assert not degenerate.certain


def _discrete_history(entropy: list[float], returns: list[float], lr: float = 3e-4) -> History:
    h = History(total_steps=len(entropy) * 512, context={"continuous": False, "ent_coef": -0.3})
    for i, (e, r) in enumerate(zip(entropy, returns, strict=False)):
        h.add(
            512 * (i + 1),
            {
                "entropy": e,
                "ep_return": r,
                "approx_kl": 1e-6,
                "clip_fraction": 0.0,
                "value_loss": 1.0,
                "explained_variance": 0.9,
                "learning_rate": lr,
            },
        )
    return h


def test_entropy_collapse_is_a_premature_near_deterministic_policy_with_stalled_returns():
    n = 40
    collapsed = [0.69 * 0.5**i for i in range(n)]
    verdict = judge(_discrete_history(collapsed, [20.0] + [9.4] * (n - 1)))
    assert verdict.verdict == "entropy_collapse"
    finding = verdict.findings[0]
    assert any("negative" in c for c in finding.causes)
    assert {"ent_coef": 0.01} in [p["patch"] for p in finding.patches]
    # the same entropy on a policy that learnt (a solved task): not a collapse
    assert judge(_discrete_history(collapsed, [20.0 + 12 * i for i in range(n)])).verdict == "healthy"


def test_a_collapse_from_a_policy_head_started_large_is_told_to_start_it_at_sb3_s_gain():
    n = 40
    collapsed = [0.69 * 0.5**i for i in range(n)]
    saturated = _discrete_history(collapsed, [20.0] + [9.4] * (n - 1))
    saturated.context["policy_head_weight_std"] = 12.5  # init_gains.policy 100 on 64 units
    finding = judge(saturated).findings[0]
    assert finding.kind == "entropy_collapse"
    assert finding.patches[0]["patch"] == {"init_gains": {"policy": 0.01}}
    assert "policy head starts large" in finding.causes[0]
    # a head at SB3's own scale is not named
    usual = _discrete_history(collapsed, [20.0] + [9.4] * (n - 1))
    usual.context["policy_head_weight_std"] = 0.00125
    finding = judge(usual).findings[0]
    assert all("init_gains" not in p["patch"] for p in finding.patches)


def test_a_collapse_at_a_learning_rate_far_above_the_default_is_told_to_go_back_to_it_first():
    """Adam at 0.2 (667x PPO's default) saturates the logits in one update: the rate is named first
    and its patch is the default itself, before the entropy bonus; at 3x the default the rate is
    not named and its patch (divided by 3) comes after the bonus, as before."""
    n = 40
    collapsed = [0.69 * 0.5**i for i in range(n)]
    fast = _discrete_history(collapsed, [20.0] + [9.4] * (n - 1), lr=0.2)
    fast.context.update(ent_coef=0.0, algo="PPO", optimizer="Adam", default_learning_rate=3e-4)
    finding = judge(fast).findings[0]
    assert finding.kind == "entropy_collapse" and "667x PPO's default" in finding.causes[0]
    assert [p["patch"] for p in finding.patches][:2] == [{"learning_rate": 3e-4}, {"ent_coef": 0.01}]
    near = _discrete_history(collapsed, [20.0] + [9.4] * (n - 1))
    near.context.update(ent_coef=0.0, algo="PPO", optimizer="Adam", default_learning_rate=1e-4)
    finding = judge(near).findings[0]
    assert not any("default" in c for c in finding.causes)
    assert [p["patch"] for p in finding.patches][:2] == [{"ent_coef": 0.01}, {"learning_rate": 1e-4}]


def test_continuous_collapse_reads_std():
    n = 30
    h = History(total_steps=n * 1024, context={"continuous": True})
    for i in range(n):
        h.add(
            1024 * (i + 1),
            {
                "std": 0.003,
                "entropy": -4.0,
                "ep_return": -1200.0 + (i % 3),
                "value_loss": 5.0,
                "explained_variance": 0.5,
            },
        )
    assert judge(h).verdict == "entropy_collapse"


@pytest.mark.parametrize("decay, expect", [(0.3, True), (0.0, False)])
def test_patches_never_repeat_the_config(decay, expect):
    n = 40
    h = ppo_history(
        n, value_loss=[50.0 + (i % 3) for i in range(n)], explained_variance=[1e-5] * n, return_rms=[8.0] * n
    )
    h.context.update(weight_decay=decay, norm_reward=False)
    finding = next(f for f in judge(h).findings if f.kind == "stuck_value_loss")
    patches = [p["patch"] for p in finding.patches]
    assert ({"weight_decay": 0.0} in patches) is expect
    assert all(p != {"weight_decay": decay} for p in patches)
    assert finding.advice and all("—" in a for a in finding.advice[: len(patches)])


def test_nan_scale_patches_follow_the_config():
    h = ppo_history(20, log_std_max=[1.0] * 19 + [60.0], learning_rate=[0.1] * 20)
    h.context.update(max_grad_norm=0.5, norm_reward=True, continuous=True)
    finding = judge(h).findings[0]
    patches = [p["patch"] for p in finding.patches]
    assert {"log_std_bounds": [-5, 2]} in patches and {"learning_rate": 0.0333} in patches
    assert not any("max_grad_norm" in p or "normalize" in p for p in patches)  # it has both already


def test_nan_scale_bounds_patch_brings_a_start_outside_them_inside():
    # a Gaussian started at log_std 24: bounds of [-5, 2] alone would not validate (the start lies
    # outside them), so the patch also starts it at SB3's default, and the cause names the start
    h = ppo_history(20, log_std_max=[24.0] * 20, log_std_min=[24.0] * 20, learning_rate=[7e-4] * 20)
    h.context.update(continuous=True, log_std_init=24.0, log_std_bounds=[-103.0, 88.0])
    finding = judge(h).findings[0]
    assert finding.kind == "nan_scale"
    assert finding.patches[0]["patch"] == {"log_std_bounds": [-5, 2], "log_std_init": 0.0}
    assert any("starts at log_std 24" in c for c in finding.causes)
    # from a plain log (no context), the first recorded log_std tells the same
    h = ppo_history(20, log_std_max=[24.0] * 20, log_std_min=[24.0] * 20)
    assert judge(h).findings[0].patches[0]["patch"] == {"log_std_bounds": [-5, 2], "log_std_init": 0.0}
    # a start inside the bounds, driven out by updates, keeps the bounds alone
    h = ppo_history(20, log_std_max=[0.0] * 10 + [60.0] * 10, log_std_min=[0.0] * 20)
    h.context.update(continuous=True, log_std_init=0.0)
    assert judge(h).findings[0].patches[0]["patch"] == {"log_std_bounds": [-5, 2]}


def test_nan_scale_names_an_env_that_broke_on_its_own_and_offers_no_knob():
    """The callback saw the env hand back a NaN observation after ordinary actions: the verdict is
    still nan_scale (what broke), its finding names the env and proposes no knob. Actions far past
    any ordinary size, or a Gaussian started outside the warning range, mean the policy broke first
    (a huge action can overflow any env's reward): the usual patches then."""
    h = ppo_history(20, learning_rate=[7e-4] * 20)
    h.error = "ValueError: Expected parameter loc (Tensor of shape (1, 1)) of distribution Normal found invalid values"
    h.context.update(continuous=True, log_std_init=0.0)
    h.context["env_nonfinite"] = {"what": "observation", "step": 5000, "action_abs_max": 2.0}
    finding = judge(h).findings[0]
    assert finding.kind == "nan_scale" and finding.certain and finding.patches == []
    assert "non-finite observation at step 5000" in finding.summary and finding.onset_step <= 5000
    assert finding.evidence["env_nonfinite_observation_step"] == 5000
    h.context["env_nonfinite"] = {"what": "reward", "step": 5000, "action_abs_max": 3.0e9}
    assert judge(h).findings[0].patches
    h.context["env_nonfinite"] = {"what": "reward", "step": 5000, "action_abs_max": None}  # a NaN action
    assert judge(h).findings[0].patches
    h.context.update(env_nonfinite={"what": "reward", "step": 5000, "action_abs_max": 2.0}, log_std_init=24.0)
    assert judge(h).findings[0].patches


def test_nan_scale_never_advises_the_bounds_a_run_already_has():
    h = ppo_history(20, log_std_max=[1.0] * 20, learning_rate=[0.1] * 20)
    h.context.update(continuous=True, log_std_init=0.0, log_std_bounds=[-5.0, 2.0])
    h.error = "ValueError: Expected parameter loc (Tensor of shape (1, 1)) of distribution Normal found invalid values"
    finding = judge(h).findings[0]
    assert finding.kind == "nan_scale"
    assert not any("log_std_bounds" in p["patch"] for p in finding.patches)


def _clipped_everything(n: int, clip_range: list[float], ep_return: list[float]) -> History:
    """A discrete PPO run whose every sample is clipped while approx_kl stays ~0 and the entropy
    sits at ln 2: what a clip range of ~0 does (fresh27's policy clip of 1e-6)."""
    return ppo_history(
        n,
        kl=1e-8,
        clip=0.99,
        entropy=[math.log(2)] * n,
        clip_range=clip_range,
        ep_return=ep_return,
    )


def test_a_clip_range_of_almost_nothing_clipping_every_sample_is_a_dead_policy():
    n = 40
    h = _clipped_everything(n, [1e-6] * n, [21.0 + 0.5 * (i % 3) for i in range(n)])
    finding = judge(h).findings[0]
    assert finding.kind == "dead_policy_gradient" and finding.certain
    assert "clip range" in finding.summary
    assert {"clip_range": 0.2} in [p["patch"] for p in finding.patches]
    # a usable clip range that clips everything (a schedule decayed towards 0 at the end of a run
    # that learned, or a policy moving fast) is still movement, as before
    decayed = [0.2 * (1 - i / n) for i in range(n)]
    assert judge(_clipped_everything(n, decayed, [21.0 + 0.5 * (i % 3) for i in range(n)])).verdict == "healthy"
    # and without a logged clip range (CleanRL logs none), clipping everything stays movement
    h = _clipped_everything(n, [1e-6] * n, [21.0 + 0.5 * (i % 3) for i in range(n)])
    del h.series["clip_range"]
    assert judge(h).verdict == "healthy"


def test_a_dead_policy_under_a_tiny_gradient_clip_is_told_to_clip_less():
    # fresh26's max_grad_norm of 1e-9: the optimizer's eps swallows what the clip leaves, and a
    # dead verdict that named no cause left a repair only the critic's patches to try
    n = 40
    h = ppo_history(n, kl=1e-7, clip=0.0, entropy=[1.386] * n, ep_return=[20.0 + 0.5 * (i % 3) for i in range(n)])
    h.context.update(max_grad_norm=1e-9)
    finding = judge(h).findings[0]
    assert finding.kind == "dead_policy_gradient"
    assert finding.patches[0]["patch"] == {"max_grad_norm": 0.5}
    assert any("clipped to a norm of 1e-09" in c for c in finding.causes)
    h.context.update(max_grad_norm=0.5)  # a usual clip: not named
    assert not any("max_grad_norm" in p["patch"] for p in judge(h).findings[0].patches)


def test_regroup_merges_small_updates_like_the_callback():
    h = History()
    for i in range(100):
        h.add(5 * (i + 1), {"value_loss": float(i), "grad_norm_max": float(i), "params_finite": 1.0})
    g = h.regroup(50)
    assert len(g) == 10 and g.steps[0] == 50
    assert g.values("value_loss")[0] == pytest.approx(4.5)
    assert g.values("grad_norm_max")[0] == 9.0
    assert math.isclose(sum(g.values("params_finite")), 10.0)


def test_a_sparse_task_solved_to_its_cap_is_not_entropy_collapse():
    n = 40
    collapsed = [0.69 * 0.9**i for i in range(n)]
    # every episode of the last part pays the goal's reward of 1: the return cannot rise further
    solved = [0.8, 0.93, 0.96] + [1.0] * (n - 3)
    assert judge(_discrete_history(collapsed, solved)).verdict == "healthy"
    # the same entropy with returns that sit at the untrained level is still a collapse
    assert judge(_discrete_history(collapsed, [0.8, 0.93, 0.96] + [0.9] * (n - 3))).verdict == "entropy_collapse"


def test_a_small_gain_on_returns_with_a_large_offset_is_learning_when_it_beats_their_noise():
    n = 40
    collapsed = [0.69 * 0.9**i for i in range(n)]
    # a reward paid every step: the untrained policy's episodes return 40 +- 1, the trained one's 43
    # (7% more, under min_gain's 10%, but three times the early episodes' spread)
    early = [40.0, 41.0, 39.0, 40.5, 39.5, 41.5, 38.5, 40.0, 40.0, 40.0]
    h = _discrete_history(collapsed, early + [43.0] * (n - len(early)))
    assert judge(h).verdict == "healthy"
    # the same gain over episodes that were noisier than it to begin with is no evidence of learning
    noisy = [40.0, 46.0, 34.0, 44.0, 36.0, 48.0, 32.0, 40.0, 40.0, 40.0]
    finding = judge(_discrete_history(collapsed, noisy + [43.0] * (n - len(noisy)))).findings[0]
    assert finding.kind == "entropy_collapse" and finding.evidence["return_early_spread"] > 3.0


def test_plain_log_of_a_policy_saturated_from_the_start_is_read_against_ln2():
    n = 40
    # a plain log (no entropy_max): the first entropy logged is already tiny
    h = _discrete_history([0.02 * 0.9**i for i in range(n)], [20.0] + [9.4] * (n - 1))
    h.context.pop("continuous")
    verdict = judge(h)
    assert verdict.verdict == "entropy_collapse"
    assert verdict.findings[0].evidence["entropy_limit"] == pytest.approx(0.1 * math.log(2))


@pytest.mark.parametrize(
    "series",
    [
        {"approx_kl": [5e-3] * 10 + [20.0, 1e-6, 30.0, 1e-6, 15.0] * 6},
        # the logits grow with each step that sharpens an already collapsed policy: a consequence
        # (with a KL of 2 nats at each, which counts the weight move as a policy move)
        {"update_ratio": [0.03] * 10 + [1.5, 0.03] * 15, "approx_kl": [5e-3] * 10 + [2.0, 5e-3] * 15},
    ],
    ids=["approx_kl", "update_ratio"],
)
def test_spikes_of_a_near_deterministic_policy_are_not_exploding_updates(series):
    n = 40
    entropy = [0.69] * 5 + [1e-3] * (n - 5)
    h = ppo_history(n, entropy=entropy, **series, ep_return=[9.4 + 0.1 * (i % 3) for i in range(n)])
    h.context.update(continuous=False, entropy_max=math.log(2))
    verdict = judge(h)
    assert "exploding_updates" not in {f.kind for f in verdict.findings}
    assert verdict.verdict == "entropy_collapse"
    # the same spikes while the policy still explores are exploding updates
    h = ppo_history(n, **series)
    h.context.update(continuous=False, entropy_max=math.log(2))
    assert judge(h).verdict == "exploding_updates"


def test_a_first_update_that_saturated_the_untrained_policy_is_an_exploding_update():
    """A plain PPO log (no weights' norm): Adam at 300x its default moves the untrained CartPole
    policy by 14 nats in its first update, saturates its logits, and nothing moves after (approx_kl
    0, entropy 1e-12). The collapse is the update's doing, said once the run has ended; a policy
    near-deterministic before its first update, or one that explored again, is not."""
    n = 16
    returns = [18.5 + 0.3 * (i % 3) for i in range(n)]
    blown = ppo_history(n, approx_kl=[14.3] + [0.0] * (n - 1), entropy=[0.016] + [1e-12] * (n - 1), ep_return=returns)
    verdict = judge(blown)
    assert verdict.verdict == "exploding_updates"
    (found,) = [f for f in verdict.findings if f.kind == "exploding_updates"]
    assert found.evidence["first_update_saturated"] == pytest.approx(14.3)
    assert "entropy_collapse" in {f.kind for f in verdict.findings}  # the consequence, still said
    # judged before the run has ended, the collapse is all that is certain
    assert not any(f.certain for f in classify(blown).findings if f.kind == "exploding_updates")
    # a first move of a few nats is no blow-up, whatever followed
    small = ppo_history(n, approx_kl=[3.0] + [0.0] * (n - 1), entropy=[0.016] + [1e-12] * (n - 1), ep_return=returns)
    assert judge(small).verdict == "entropy_collapse"
    # the policy explored again after the first update: one large update, a warning
    back = ppo_history(n, approx_kl=[14.3] + [5e-3] * (n - 1), entropy=[0.016] * 3 + [0.5] * (n - 3), ep_return=returns)
    assert judge(back).verdict != "exploding_updates"


def test_a_large_weight_move_counts_in_a_ppo_run_only_when_the_policy_moved_with_it():
    """RecurrentPPO at lr 0.01 moves its weights by over half their norm in an update while the
    clipped objective keeps approx_kl near 0.01: such runs learned. Without a KL (A2C) the weight
    move is all there is to go by, and the same moves are exploding updates."""
    n = 40
    moves = [0.03] * 10 + [0.6, 0.03] * 15
    calm = ppo_history(n, update_ratio=moves, approx_kl=[5e-3] * 10 + [0.1, 5e-3] * 15)
    assert "exploding_updates" not in {f.kind for f in judge(calm).findings}
    wild = ppo_history(n, update_ratio=moves, approx_kl=[5e-3] * 10 + [1.5, 5e-3] * 15)
    assert judge(wild).verdict == "exploding_updates"
    assert judge(_without_kl(ppo_history(n, update_ratio=moves))).verdict == "exploding_updates"


@pytest.mark.parametrize("callback", [True, False], ids=["sweep", "plain_log"])
def test_a_huge_kl_of_a_gaussian_mean_behind_a_large_output_scale_is_not_an_exploding_update(callback):
    """Init gain 300: each small update moves the Gaussian mean by tens of std, so approx_kl is in
    the thousands while the weights move by under 1% of their norm and the std stands still. The
    same KL from updates that move the weights, or the std, is an exploding update."""
    n = 40
    kl = [5e-3] * 10 + [2000.0, 5e-3] * 15
    still = {"std": [1.0 + 0.001 * i for i in range(n)]}
    if callback:
        still["update_ratio"] = [0.005] * n
    h = ppo_history(n, approx_kl=kl, **still)
    finding = {f.kind: f for f in judge(h).findings}.get("exploding_updates")
    assert finding is None or not finding.certain
    moving = {"std": [1.0 * 1.2 ** (i % 2) for i in range(n)]}
    if callback:
        moving["update_ratio"] = [0.005] * 10 + [0.5, 0.005] * 15
    assert judge(ppo_history(n, approx_kl=kl, **moving)).verdict == "exploding_updates"


def test_a_plain_ppo_log_whose_critic_never_explained_anything_is_stuck_at_the_end_only():
    n = 40
    # explained variance never reaches 0.2 at any update: the critic is not trained. Its loss fell,
    # but ends a quarter of the episodes' squared discounted return (~63^2)
    common = dict(ep_return=[100.0 + i % 3 for i in range(n)], ep_length=[100.0] * n)
    loss = [8000.0 * 0.95**i for i in range(n)]
    h = ppo_history(n, value_loss=loss, explained_variance=[0.02 * math.sin(i) for i in range(n)], **common)
    finding = next(f for f in judge(h).findings if f.kind == "stuck_value_loss")
    assert finding.certain and finding.evidence["ev_best"] < 0.2
    # mid-run (the same history, a budget twice as long) it is not judged on that rule
    h.total_steps *= 2
    assert "stuck_value_loss" not in {f.kind for f in Judge().check(h).findings}
    # a critic that explained half the variance once is judged by the other rules
    ev = [0.02 * math.sin(i) for i in range(n)]
    ev[20] = 0.5
    assert judge(ppo_history(n, value_loss=loss, explained_variance=ev, **common)).verdict == "healthy"
    # a loss of ~2% of that square (an error of a seventh of the returns' scale; 0.52 of the
    # lambda-returns' size, 16.7, under that rule's bar): explained variance alone, which targets
    # that barely vary about a level the critic fits also leave near 0, is a warning, not a verdict
    small = judge(ppo_history(n, value_loss=[40.0 + i for i in range(n)], explained_variance=[0.02] * n, **common))
    warning = next(f for f in small.findings if f.kind == "stuck_value_loss")
    assert small.verdict == "healthy" and not warning.certain


def test_a_value_loss_that_fell_only_with_its_targets_is_stuck():
    n = 40
    # callback history: the loss falls 5% an update, but only as fast as the returns' mean square
    # (a reward shrinking towards 0): it stays as large as the targets it should fit
    h = ppo_history(
        n,
        value_loss=[100.0 * 0.95**i for i in range(n)],
        explained_variance=[0.01] * n,
        return_rms=[10.0 * 0.975**i for i in range(n)],
    )
    assert judge(h).verdict == "stuck_value_loss"
    # the same fall against steady returns is a critic that fits
    h = ppo_history(
        n, value_loss=[100.0 * 0.95**i for i in range(n)], explained_variance=[0.01] * n, return_rms=[31.0] * n
    )
    assert judge(h).verdict == "healthy"


def test_with_return_scale_a_critic_that_never_fit_is_stuck_from_a_tenth_of_the_returns_square():
    n = 40
    # the loss rises with rising returns and explained variance never leaves 0: at the end of the
    # run, an error of 15% of the returns' mean square is enough; one of 1% (noise it cannot fit) is not
    for share, verdict in ((0.15, "stuck_value_loss"), (0.01, "healthy")):
        h = ppo_history(
            n,
            value_loss=[share * (20.0 + i) ** 2 for i in range(n)],
            explained_variance=[0.001 * (-1) ** i for i in range(n)],
            return_rms=[20.0 + i for i in range(n)],
            ep_return=[20.0 + 5 * i for i in range(n)],
        )
        assert judge(h).verdict == verdict, share


def test_a_critic_off_by_most_of_the_returns_square_is_stuck_whatever_its_explained_variance():
    n = 40
    h = ppo_history(
        n,
        value_loss=[80.0] * n,
        explained_variance=[0.3] * n,
        return_rms=[10.0] * n,
        ep_return=[-900.0 + i % 5 for i in range(n)],
    )
    assert judge(h).verdict == "stuck_value_loss"


def _a2c_history(entropy: list[float], continuous: bool, std: list[float] | None = None) -> History:
    h = History(total_steps=len(entropy) * 160, context={"continuous": continuous, "algo": "A2C"})
    for i, e in enumerate(entropy):
        values = {
            "entropy": e,
            "ep_return": 20.0 + (i % 3),
            "value_loss": 9.0,
            "explained_variance": 0.001,
            "learning_rate": 7e-4,
            "grad_norm": 3.8,
            "grad_norm_actor": 0.4,  # ~10% of the gradient: not starved
        }
        if continuous:
            values["std"] = std[i] if std else 1.0 + 0.002 * (i % 3)  # within 1%: frozen, not still
        h.add(160 * (i + 1), values)
    return h


def test_an_a2c_policy_held_at_its_first_entropy_is_dead():
    n = 100
    # weight decay holds the logits at 0: entropy ln 2 all run, though the actor's gradient is not small
    frozen = [0.6904] + [0.6931] * (n - 1)
    verdict = judge(_a2c_history(frozen, continuous=False))
    assert verdict.verdict == "dead_policy_gradient"
    # a Gaussian's entropy only measures its std: a std frozen within 1% says nothing of its mean
    assert "dead_policy_gradient" not in {f.kind for f in judge(_a2c_history(frozen, continuous=True)).findings}


def test_a_slow_learners_steady_drift_from_its_first_entropy_is_judged_once_the_run_ends():
    """A discrete A2C policy still within 1% of its first entropy but drifting steadily away from it
    (a slow learner, on its way past the label's 0.01 nats) is not called dead mid-run, a stop of a
    policy that moves; once the run has ended, within 1% is dead as before. One held where it
    started (its drift reached early and kept: weight decay) is dead mid-run as before."""

    def a2c(entropy: list[float]) -> History:
        h = History(total_steps=80 * 400)  # half the budget done after these 40 updates
        for i, value in enumerate(entropy):
            row = {"pg_loss": 15.0 * (-1) ** i, "value_loss": 50.0, "explained_variance": 0.5, "entropy": value}
            h.add(400 * (i + 1), row | {"grad_norm": 10.0, "grad_norm_actor": 2.0})
        return h

    def dead(h: History, final: bool) -> bool:
        return "dead_policy_gradient" in {f.kind for f in classify(h, final=final).findings}

    drifting = a2c([0.6931 - 2e-6 * i * i for i in range(40)])  # 0.003 away by now, and growing
    assert not dead(drifting, final=False) and dead(drifting, final=True)
    finding = next(f for f in classify(drifting, final=True).findings if f.kind == "dead_policy_gradient")
    assert finding.certain
    held = a2c([0.6931 - 4e-4 * min(i, 5) + 1e-4 * (-1) ** i for i in range(40)])  # moved early, then kept
    assert dead(held, final=False)
    no_trend = classify(held).findings[0].evidence
    assert no_trend["entropy_drift_late"] < 2 * no_trend["entropy_drift_early"]


def test_an_a2c_gaussian_whose_std_never_moved_at_all_is_dead_unless_already_near_deterministic():
    """At lr 1e-9 an A2C std moves by 1e-7 of itself in a whole run (float32's resolution); at lr
    7e-5 by 4e-3. The first is the optimizer moving nothing, the mean included."""
    n = 100
    entropy = [1.4189] * n
    still = [1.0 + 1e-7 * (i % 2) for i in range(n)]
    assert judge(_a2c_history(entropy, continuous=True, std=still)).verdict == "dead_policy_gradient"
    slow = [1.0 - 4e-5 * i for i in range(n)]  # 0.4% over the run: slow, not dead
    assert "dead_policy_gradient" not in {f.kind for f in judge(_a2c_history(entropy, True, slow)).findings}
    tiny = [0.003 * (1 + 1e-7 * (i % 2)) for i in range(n)]  # near-deterministic from the start
    assert "dead_policy_gradient" not in {f.kind for f in judge(_a2c_history(entropy, True, tiny)).findings}


def test_a_frozen_policy_whose_weights_shrank_tenfold_is_dead_where_the_norm_is_recorded():
    """Weight decay 0.8 on an A2C Gaussian pulled its weights to 0.04 of their start: the policy sat
    at SB3's starting outputs (mean ~0, std ~1 within 1%) while its gradient was not small, and the
    corpus's label called it dead (its critic, pinned too, had been named instead). Both styles of
    log; not without the norm (plain logs), nor with weights held at their start, nor when the
    entropy moves (a network that shrinks while its policy changes is learning something)."""
    n = 100
    entropy = [1.4189 + 0.001 * (i % 3) for i in range(n)]
    shrunk = [16.4 * max(0.04, 0.9**i) for i in range(n)]  # to 0.04 of the start by update 31

    def with_shrunk_weights(history: History) -> History:
        """``history`` with the callback's record of weights pulled from 16.4 to 0.04 of that."""
        history.series["param_norm"] = (list(range(n)), shrunk)
        history.context["param_norm_start"] = 16.4
        return history

    h = _a2c_history(entropy, continuous=True)
    assert "dead_policy_gradient" not in _kinds(h)  # the std moves by 0.2%: not 'still', not starved
    verdict = judge(with_shrunk_weights(h))
    assert verdict.verdict == "dead_policy_gradient"
    dead = verdict.findings[0]
    assert dead.certain and dead.evidence["weights_norm_over_start"] == pytest.approx(0.04)
    assert "shrank to 0.04 of their norm at the start" in dead.causes[0]
    h.context["param_norm_start"] = 0.5  # the same norms against a start they never left by tenfold
    assert "dead_policy_gradient" not in _kinds(h)
    # a Gaussian's entropy measures only its std: its std decides. One the gradients' noise jitters
    # by 3.5% about its first value (an entropy that moves 5% over the window: not frozen) is
    # held where it started; one that moved by a quarter is learning something
    jitter = [1.0 + 0.035 * (0, 1, -1, 0)[i % 4] for i in range(n)]
    noisy = with_shrunk_weights(_a2c_history([1.4189 + math.log(s) for s in jitter], continuous=True, std=jitter))
    dead = judge(noisy).findings[0]
    assert dead.kind == "dead_policy_gradient" and dead.evidence["std_max_drift"] == pytest.approx(0.035)
    assert dead.summary.startswith("the policy has stayed where it started")
    falling = [1.0 - 0.0025 * i for i in range(n)]
    moving = with_shrunk_weights(_a2c_history([1.4189 + math.log(s) for s in falling], continuous=True, std=falling))
    assert "dead_policy_gradient" not in _kinds(moving)
    # a discrete policy's entropy decides for it: one that moves is not held
    logits = with_shrunk_weights(_a2c_history([0.6931 - 0.002 * i for i in range(n)], continuous=False))
    assert "dead_policy_gradient" not in _kinds(logits)
    # PPO-style: no clipping, a KL of 1e-3 (over the bar of a policy that does not move) and a
    # frozen entropy beside weights at a tenth of their start
    flat = [-600.0 + i % 3 for i in range(n)]
    ppo = ppo_history(n, kl=1e-3, clip=0.0, entropy=entropy, param_norm=shrunk, ep_return=flat)
    ppo.context.update(param_norm_start=16.4, continuous=True)
    assert "dead_policy_gradient" in _kinds(ppo)
    ppo.context["param_norm_start"] = 0.5
    assert "dead_policy_gradient" not in _kinds(ppo)


def test_a_plain_a2c_log_read_with_a_config_whose_weight_decay_pins_the_weights_is_dead():
    """The same A2C Gaussian without the callback's weights' norm (a plain log): its config's weight
    decay of 0.5 through RMSprop stands for the norm (each step pulls a weight about the learning
    rate towards 0), beside a std that jitters 3.5% about its first value. Not a decay under
    weight_decay_pins, nor AdamW's decoupled decay, nor an unknown optimizer, nor a std that moved
    by a quarter; not a PPO-style log either, whose approx_kl decides."""
    n = 100
    jitter = [1.0 + 0.035 * (0, 1, -1, 0)[i % 4] for i in range(n)]
    entropy = [1.4189 + math.log(s) for s in jitter]

    def plain(std: list[float] = jitter, **context: object) -> History:
        h = _a2c_history([1.4189 + math.log(s) for s in std], continuous=True, std=std)
        h.context.update(context)
        return h

    # the config unknown, and a critic whose explained variance is not pinned at 0 (0.001 each
    # update, the bar's edge): nothing says where the weights are
    assert "dead_policy_gradient" not in _kinds(plain())
    verdict = judge(plain(weight_decay=0.5, optimizer="RMSprop"))
    assert verdict.verdict == "dead_policy_gradient"
    dead = verdict.findings[0]
    assert dead.certain and dead.evidence["weight_decay_pins"] == 0.5
    assert dead.summary.endswith("a weight decay of 0.5 in RMSprop pulls its weights to about 0")
    assert {"weight_decay": 0.0} in [p["patch"] for p in dead.patches]
    for context in (
        dict(weight_decay=0.003, optimizer="RMSprop"),
        dict(weight_decay=0.5, optimizer="AdamW"),
        dict(weight_decay=0.5),
    ):
        assert "dead_policy_gradient" not in _kinds(plain(**context)), context
    falling = [1.0 - 0.0025 * i for i in range(n)]
    assert "dead_policy_gradient" not in _kinds(plain(falling, weight_decay=0.5, optimizer="RMSprop"))
    flat = [-600.0 + i % 3 for i in range(n)]
    ppo = ppo_history(n, kl=1e-3, clip=0.0, entropy=entropy, ep_return=flat)
    ppo.context.update(continuous=True, weight_decay=0.5, optimizer="Adam")
    assert "dead_policy_gradient" not in _kinds(ppo)


def test_a_plain_a2c_gaussian_log_whose_critic_is_a_constant_beside_a_held_std_is_dead():
    """No weights' norm and no config: a critic whose explained variance is within ev_pinned of 0
    at every update of the window predicts one value everywhere (each value is one short rollout's,
    noisy about 0 for a critic that computes anything that varies), and beside a std that jitters
    3.5% about its first value the network is held near 0. Not where the critic's values vary, nor
    a std that moved by a quarter, nor a discrete policy (its entropy is read), nor a PPO-style log."""
    n = 100
    jitter = [1.0 + 0.035 * (0, 1, -1, 0)[i % 4] for i in range(n)]

    def plain(ev: list[float], std: list[float] = jitter, continuous: bool = True) -> History:
        h = _a2c_history([1.4189 + math.log(s) for s in std], continuous=continuous, std=std)
        for i, value in enumerate(ev):
            h.series["explained_variance"][1][i] = value
        return h

    constant = [0.0 if i % 5 else 1e-6 for i in range(n)]
    verdict = judge(plain(constant))
    assert verdict.verdict == "dead_policy_gradient"
    dead = verdict.findings[0]
    assert dead.certain and dead.evidence["critic_constant"] and "weight_decay_pins" not in dead.evidence
    assert "its critic a constant" in dead.summary
    assert any("set it to 0 if it has one" in c for c in dead.causes)
    noisy = [0.2 * math.sin(i) for i in range(n)]
    assert "dead_policy_gradient" not in _kinds(plain(noisy))
    falling = [1.0 - 0.0025 * i for i in range(n)]
    assert "dead_policy_gradient" not in _kinds(plain(constant, std=falling))
    assert not any(
        f.kind == "dead_policy_gradient" and f.evidence.get("critic_constant")
        for f in judge(plain(constant, std=[1.0 + 0.02 * math.sin(i) for i in range(n)], continuous=False)).findings
    )


def test_updates_that_move_the_weights_by_more_than_their_size_are_exploding_updates():
    n = 40
    # an A2C-style log (no KL), gradients and value loss quiet: only the weights' own movement shows it
    steady = [0.03] * n
    assert judge(_without_kl(ppo_history(n, update_ratio=steady))).verdict == "healthy"
    blown = [0.03] * 30 + [1.5, 0.03] * 5
    verdict = judge(_without_kl(ppo_history(n, update_ratio=blown)))
    assert verdict.verdict == "exploding_updates"
    assert "update_ratio" in verdict.findings[0].summary
    # two such updates are a warning, not a verdict
    twice = [0.03] * 36 + [1.5, 0.03, 1.5, 0.03]
    finding = next(
        f for f in judge(_without_kl(ppo_history(n, update_ratio=twice))).findings if f.kind == "exploding_updates"
    )
    assert not finding.certain
    # one update that moved the weights by 11 times their norm multiplied it by 10: certain alone,
    # even in a run of four updates (a learning rate starting at 0.2)
    short = _without_kl(ppo_history(4, update_ratio=[13.6, 0.6, 0.2, 0.0]))
    assert judge(short).verdict == "exploding_updates"
    assert judge(_without_kl(ppo_history(4, update_ratio=[4.6, 0.6, 0.2, 0.0]))).verdict != "exploding_updates"


def test_where_the_weights_norm_is_recorded_it_decides_exploding_updates():
    """Tenfold over the start is certain from the update that got there; large moves that leave
    the weights under tenfold are a warning; a start under the unit-gain norm is not the scale."""
    n = 40
    blown = [0.03] * 30 + [1.5, 0.03] * 5  # exploding_updates by its moves alone (the test above)
    grew = [16.0 * (1 + 0.5 * max(0, i - 29)) for i in range(n)]  # 16 -> 96: 6-fold
    h = _without_kl(ppo_history(n, update_ratio=blown, param_norm=grew))
    h.context.update(param_norm_start=16.0, param_norm_unit=11.0)
    finding = next(f for f in judge(h).findings if f.kind == "exploding_updates")
    assert not finding.certain and judge(h).verdict == "healthy"
    assert finding.evidence["param_norm_growth"] == pytest.approx(6.0)
    assert "grew 6-fold at most" in finding.causes[0]
    # the same run whose weights went on to 11 times their start: certain, from that update on
    tenfold = grew[:36] + [176.0] * 4  # update 36 (step 37000)
    h = _without_kl(ppo_history(n, update_ratio=blown, param_norm=tenfold))
    h.context.update(param_norm_start=16.0, param_norm_unit=11.0)
    verdict = judge(h)
    assert verdict.verdict == "exploding_updates"
    assert verdict.findings[0].summary == "the weights' norm grew 11-fold over its start"
    # and alone, with no other hit (quiet gradients, small moves), in a run that is still going
    quiet = ppo_history(n, update_ratio=[0.03] * n, param_norm=tenfold)
    quiet.context.update(param_norm_start=16.0, param_norm_unit=11.0)
    live = classify(quiet)
    assert live.verdict == "exploding_updates" and live.findings[0].onset_step == 37000
    # weights that start at a hundredth of the unit-gain scale and grow 11-fold are learning
    quiet.context.update(param_norm_start=16.0, param_norm_unit=100.0)
    assert "exploding_updates" not in {f.kind for f in judge(quiet).findings}
    # an infinite norm is past any growth; a NaN one is nan_scale's, never a growth
    nan = ppo_history(n, param_norm=[16.0] * 39 + [math.nan])
    assert "exploding_updates" not in {f.kind for f in judge(nan).findings}
    inf = ppo_history(n, param_norm=[16.0] * 39 + [math.inf])
    assert judge(inf).verdict == "exploding_updates"  # the first record is the start here


def _without_kl(h):
    """The history as an A2C-style run logs it: no approx_kl, no clip_fraction."""
    del h.series["approx_kl"], h.series["clip_fraction"]
    return h


@pytest.mark.parametrize("callback", [True, False], ids=["sweep", "plain_log"])
def test_a_policy_saturated_from_its_first_update_that_never_moves_is_dead_on_both_paths(callback):
    n = 40
    entropy = [0.004 + 1e-6 * (i % 2) for i in range(n)]  # saturated logits from the start, frozen
    # CartPole's episodes still end at different steps (an exactly constant return would be
    # degenerate_reward's: see the test below)
    h = ppo_history(n, kl=1e-7, clip=0.0, entropy=entropy, ep_return=[9.4 + 0.1 * (i % 3) for i in range(n)])
    h.context["continuous"] = False
    if callback:  # the callback knows the uniform policy's entropy; a plain log does not
        h.context["entropy_max"] = math.log(2)
    assert judge(h).verdict == "dead_policy_gradient"


@pytest.mark.parametrize("callback", [True, False], ids=["sweep", "plain_log"])
def test_rewards_that_never_varied_are_degenerate_on_both_paths_even_when_the_policy_froze(callback):
    n = 40
    # Acrobot's -500 of an agent that never reached the goal, under a policy that also never moved
    extra = {"reward_std": [0.0] * n, "reward_mean": [-1.0] * n} if callback else {}
    h = ppo_history(n, kl=1e-7, clip=0.0, entropy=[1.0986] * n, ep_return=[-500.0] * n, **extra)
    verdict = judge(h)
    assert verdict.verdict == "degenerate_reward"
    assert {f.kind for f in verdict.findings if f.certain} == {"degenerate_reward", "dead_policy_gradient"}


@pytest.mark.parametrize("callback", [True, False], ids=["sweep", "plain_log"])
def test_a_reward_that_varies_later_withdraws_a_certain_degenerate_reward(callback):
    """Acrobot's untrained policy returns -500 for its first rollouts (-1 every step), which is
    certain degenerate_reward then; from update 25 on, some episodes reach the goal. The env did pay
    a signal: the verdict is then the frozen policy it left (dead), not the reward. A dead gradient
    stays in the verdict once certain; a "constant since the first rollout" does not."""
    n = 40
    returns = [-500.0] * 25 + [-490.0 + (i % 3) for i in range(15)]
    extra = {"reward_std": [0.0] * 25 + [0.04] * 15, "reward_mean": [-1.0] * 25 + [-0.998] * 15} if callback else {}
    h = ppo_history(n, kl=1e-7, clip=0.0, entropy=[1.0986] * n, ep_return=returns, **extra)
    live = Judge()
    assert live.check(h.prefix(24)).verdict == "degenerate_reward"
    assert judge(h).verdict == "dead_policy_gradient"
    assert "degenerate_reward" not in {f.kind for f in judge(h).findings if f.certain}


def test_a_dead_gradient_under_a_tiny_target_kl_names_it_and_lifts_the_early_stop():
    """PPO at target_kl 1e-7 stops every update after its first minibatch: the finding names it
    and its first patch removes the early stop (SB3's default); a usual target_kl is no cause."""
    n = 40
    h = ppo_history(n, kl=1e-7, clip=0.0, entropy=[1.386] * n, ep_return=[20.0 + 0.5 * (i % 3) for i in range(n)])
    h.context["target_kl"] = 1e-7
    finding = next(f for f in judge(h).findings if f.kind == "dead_policy_gradient")
    assert any("target_kl 1e-07 stops every update" in c for c in finding.causes)
    assert finding.patches[0]["patch"] == {"target_kl": None}
    h.context["target_kl"] = 0.02
    finding = next(f for f in judge(h).findings if f.kind == "dead_policy_gradient")
    assert not any("target_kl" in c for c in finding.causes) and {"target_kl": None} not in [
        p["patch"] for p in finding.patches
    ]


def test_a_short_run_whose_policy_never_moved_is_dead_once_it_has_ended():
    n = 8  # a 16k-step budget of 2048-step rollouts
    h = ppo_history(n, kl=0.0, clip=0.0, entropy=[1.4189] * n, ep_return=[-1200.0 + 7 * (i % 3) for i in range(n)])
    h.total_steps = n * 2048
    h.steps = [2048 * (i + 1) for i in range(n)]
    h.context["continuous"] = True
    live = Judge()
    assert all(live.check(h.prefix(k)).verdict == "healthy" for k in range(1, n))  # too few updates mid-run
    assert judge(h).verdict == "dead_policy_gradient"  # judged at the end
    assert judge(h.prefix(3)).verdict == "healthy"  # three updates are too few even then


@pytest.mark.parametrize("callback", [True, False], ids=["sweep", "plain_log"])
def test_few_return_records_that_span_enough_long_episodes_are_a_constant_reward(callback):
    """MountainCar paid 0 on every step: 12 rollouts of 1024 steps, whose 999-step episodes first
    end after ~4000 steps, log 9 returns over 12 episodes. The episodes count, not the records."""
    n, every = 12, 1024
    h = History(total_steps=n * every)
    for i in range(n):
        values = {"entropy": 1.4, "value_loss": 1e-3, "explained_variance": 0.0, "approx_kl": 1e-3, "pg_loss": 0.0}
        if i >= 3:
            values |= {"ep_return": 0.0, "ep_length": 999.0}
        if callback:
            values |= {"reward_std": 0.0, "reward_mean": 0.0}
        h.add((i + 1) * every, values)
    assert judge(h).verdict == "degenerate_reward"
    # eight rollouts are 8 episodes at most: too few to call the reward constant
    assert "degenerate_reward" not in {f.kind for f in judge(h.prefix(8)).findings}


@pytest.mark.parametrize("callback", [True, False], ids=["sweep", "diagnose_config"])
def test_a_constant_reward_whose_every_episode_ran_out_the_time_limit_needs_two_episodes(callback):
    """CartPole cut at 2000 steps and paid 0.2 on every step, never ending early: 12 rollouts of
    1024 steps (4 envs) end 4 episodes at once, all returning 400. Episodes that ran out the clock
    carry no signal in their ends, so two of them are enough; below a longer limit the same lengths
    ended on something the policy did, and ten are needed again."""
    n, every = 12, 1024

    def run(limit: int | None) -> History:
        h = History(total_steps=n * every, context={} if limit is None else {"time_limit": limit})
        for i in range(n):
            values = {"entropy": 0.69, "value_loss": 1e-3, "explained_variance": 0.0, "approx_kl": 1e-3}
            if (i + 1) * every >= 8000:
                values |= {"ep_return": 400.0, "ep_length": 2000.0}
            if callback:
                values |= {"reward_std": 0.0, "reward_mean": 0.2}
            h.add((i + 1) * every, values)
        return h

    assert judge(run(2000)).verdict == "degenerate_reward"
    assert "degenerate_reward" not in {f.kind for f in judge(run(None)).findings}
    assert "degenerate_reward" not in {f.kind for f in judge(run(2500)).findings}


def _plain_long_episodes(returns: list[float], every: int = 200, lengths: list[float] | None = None) -> History:
    """A plain SB3 log of a run whose 999-step episodes end in waves: ``ep_return`` is the
    logger's running mean, re-logged at every update whether or not an episode ended."""
    n = len(returns)
    lengths = lengths or [999.0] * n
    h = History(total_steps=n * every)
    for i, value in enumerate(returns):
        h.add(
            (i + 1) * every,
            {
                "ep_return": value,
                "ep_length": lengths[i],
                "entropy": 1.4,
                "value_loss": 1.0 / (1 + i),
                "explained_variance": 0.5,
                "learning_rate": 7e-4,
                "pg_loss": -0.1,
            },
        )
    return h


def test_a_plain_log_repeating_one_wave_of_long_episodes_is_not_a_constant_reward():
    # one wave of 4 episodes, re-logged for 20 updates, then the next waves' means: the mean return
    # that never changed for 20 records held 4 episodes, not 20
    returns = [-51.5] * 20 + [-49.3] * 20 + [-47.1] * 20 + [-44.6] * 20
    verdict = judge(_plain_long_episodes(returns))
    assert "degenerate_reward" not in {f.kind for f in verdict.findings}


def test_a_plain_log_whose_every_episode_returned_the_same_is_degenerate_once_enough_ended():
    # 60 updates of 200 steps: 12 episodes of 999 steps, all returning the same total
    assert judge(_plain_long_episodes([499.5] * 60)).verdict == "degenerate_reward"
    # the same for 40 updates is 8 episodes: too few to tell a constant reward
    assert "degenerate_reward" not in {f.kind for f in judge(_plain_long_episodes([499.5] * 40)).findings}


def test_a_plain_log_whose_episodes_all_paid_one_success_of_varying_length_is_not_degenerate():
    """A sparse corridor pays 1 on reaching its end: a policy that always gets there returns 1 in
    every episode, in more or fewer steps. One reward on every step would have paid in proportion
    to the length, so the steps paid different rewards and the rollouts carry a signal."""
    sooner = [40.0 - 0.3 * i for i in range(60)]  # it gets there sooner as it learns
    found = judge(_plain_long_episodes([1.0] * 60, lengths=sooner))
    assert "degenerate_reward" not in {f.kind for f in found.findings}
    # the same lengths with a total of 0: a reward of 0 on every step pays that, whatever the length
    assert judge(_plain_long_episodes([0.0] * 60, lengths=sooner)).verdict == "degenerate_reward"


def test_a_first_gradient_after_an_early_level_of_about_zero_is_not_exploding():
    """An A2C paid a constant 0: its critic fits the zero returns exactly (value loss ~1e-14) and
    its gradient is ~1e-7, until a few updates give it 0.01 and 3e-6. Ratios over such a start
    are in the thousands, but nothing is large."""
    n = 40

    def run(late_grad: float, late_value_loss: float) -> History:
        h = History(total_steps=n * 160, context={"continuous": False, "algo": "A2C"})
        for i in range(n):
            spike = i in (20, 25, 30, 35)
            h.add(
                160 * (i + 1),
                {
                    "entropy": 1.0 - 0.005 * i,
                    "ep_return": 0.0 if i % 2 else 1.0,
                    "value_loss": late_value_loss if spike else 1e-14,
                    "explained_variance": 0.5,
                    "learning_rate": 7e-4,
                    "grad_norm": late_grad if spike else 5e-7,
                },
            )
        return h

    tiny = run(0.011, 3.5e-6)
    assert "exploding_updates" not in {f.kind for f in judge(tiny).findings}
    # the same start with gradients and errors that are large in themselves
    blown = judge(run(50.0, 30.0))
    finding = next(f for f in blown.findings if f.kind == "exploding_updates")
    assert finding.certain and finding.evidence["grad_norm_max"] == 50.0


def test_collapse_means_under_a_tenth_of_uniform_once_and_under_a_fifth_since():
    n = 40
    stalled = [20.0] + [9.4] * (n - 1)
    ln2 = math.log(2)
    # hovering at 15% of uniform from early on: near-deterministic by neither bar's reading
    # (the helper's approx_kl of 1e-6 makes the policy gradient dead, a separate finding)
    assert "entropy_collapse" not in _kinds(_discrete_history([ln2] * 3 + [0.15 * ln2] * (n - 3), stalled))
    # under 10% once, then back up to 15% (under the stay bar of 20%) for the rest: collapsed
    dipped = [ln2] * 3 + [0.05 * ln2] * 5 + [0.15 * ln2] * (n - 8)
    finding = next(f for f in judge(_discrete_history(dipped, stalled)).findings if f.kind == "entropy_collapse")
    assert finding.evidence["entropy_stay_limit"] == pytest.approx(0.2 * ln2)
    # under 10% once, then back over 20%: the policy explores again
    recovered = [ln2] * 3 + [0.05 * ln2] * 5 + [0.3 * ln2] * (n - 8)
    assert "entropy_collapse" not in _kinds(_discrete_history(recovered, stalled))


def test_a_gaussian_std_that_reached_the_bar_and_stays_near_it_is_a_collapse():
    n = 30

    def run(stds: list[float]) -> str:
        h = History(total_steps=n * 1024, context={"continuous": True})
        for i, std in enumerate(stds):
            h.add(
                1024 * (i + 1),
                {
                    "std": std,
                    "entropy": math.log(std),
                    "ep_return": -1200.0 + (i % 3),
                    "value_loss": 5.0,
                    "explained_variance": 0.5,
                },
            )
        return judge(h).verdict

    assert run([1.0] * 3 + [0.03] * 4 + [0.08] * (n - 7)) == "entropy_collapse"
    assert run([1.0] * 3 + [0.08] * (n - 3)) == "healthy"  # never under 0.05
    assert run([1.0] * 3 + [0.03] * 4 + [0.3] * (n - 7)) == "healthy"  # grew back


def test_returns_that_never_varied_cannot_stall():
    n = 40
    collapsed = [0.69 * 0.9**i for i in range(n)]
    # a goal reached in every episode from the first record on (a task the untrained policy solves):
    # the policy sharpening towards it is no collapse
    assert "entropy_collapse" not in _kinds(_discrete_history(collapsed, [1.0] * n))


def _kinds(history: History) -> set[str]:
    return {f.kind for f in judge(history).findings}


def _gaussian_run(
    stds: list[float], returns: list[float], spread: float | None = None, dims: int = 1, **context: object
) -> History:
    """A Gaussian policy's run; its entropy is that of ``dims`` dimensions of std ``spread`` (the
    logged std unless given: SB3's state-independent Gaussian)."""
    h = History(total_steps=len(stds) * 4096, context={"continuous": True, **context})
    for i, (std, r) in enumerate(zip(stds, returns, strict=True)):
        entropy = dims * (UNIT_GAUSSIAN_ENTROPY + math.log(spread if spread is not None else std))
        h.add(4096 * (i + 1), {"std": std, "entropy": entropy, "ep_return": r, "value_loss": 5.0})
    return h


def test_a_policy_that_never_explored_needs_a_real_rise_in_its_returns():
    n = 16
    capped = [0.0067] * n
    # the action penalty of a settling mean: returns rise 25% of their size, and 100x their noise
    creeping = [-0.005 + 0.00008 * i for i in range(n)]
    finding = next(f for f in judge(_gaussian_run(capped, creeping)).findings if f.kind == "entropy_collapse")
    assert finding.certain and finding.evidence["never_explored"] is True
    # the same returns from a policy that explored first and collapsed later: the usual stall test
    # reads that rise as learning
    explored = [1.0] * 3 + [0.0067] * (n - 3)
    assert "entropy_collapse" not in _kinds(_gaussian_run(explored, creeping))
    # a policy that never explored but learnt: returns up by more than 40% of their size
    learnt = [-1300.0 + 60.0 * i for i in range(n)]
    assert "entropy_collapse" not in _kinds(_gaussian_run(capped, learnt))


def test_a_short_run_that_never_explored_is_judged_on_its_few_records():
    verdict = judge(_gaussian_run([0.0067] * 4, [-1231.0, -1233.0, -1284.0, -1359.0]))
    assert verdict.verdict == "entropy_collapse"
    assert any("short run" in note for note in verdict.notes)
    # four records of a policy that explored and then collapsed are too few to call a collapse
    explored = _gaussian_run([1.0, 0.0067, 0.0067, 0.0067], [-1231.0, -1233.0, -1284.0, -1359.0])
    assert judge(explored).verdict == "healthy"


def test_a_gaussian_is_near_deterministic_only_when_its_entropy_agrees_with_its_std():
    n = 30
    stds, flat = [0.03] * n, [-1200.0 + (i % 3) for i in range(n)]
    assert judge(_gaussian_run(stds, flat)).verdict == "entropy_collapse"
    # gSDE logs its noise weights' scale as std; the entropy says the actions spread by 0.15
    assert "entropy_collapse" not in _kinds(_gaussian_run(stds, flat, spread=0.15, use_sde=True))
    # and where the actions really are near-deterministic, gSDE or not, the entropy agrees
    assert judge(_gaussian_run(stds, flat, spread=0.01, use_sde=True)).verdict == "entropy_collapse"
    # several small dimensions: their summed entropy never undoes the std
    assert judge(_gaussian_run(stds, flat, dims=4)).verdict == "entropy_collapse"


def test_a_gaussian_that_never_explored_is_told_to_start_its_std_at_one():
    flat = [-0.005] * 8 + [-0.0049] * 8
    capped = _gaussian_run([0.0067] * 16, flat, log_std_init=-5.0, log_std_bounds=[-20.0, -5.0])
    finding = next(f for f in judge(capped).findings if f.kind == "entropy_collapse")
    assert finding.patches[0]["patch"] == {"log_std_init": 0.0, "log_std_bounds": [-5, 2]}
    assert "first update" in finding.summary
    # bounds that already hold log std 0: only the start moves
    low_start = _gaussian_run([0.0067] * 16, flat, log_std_init=-5.0, log_std_bounds=[-5.0, 2.0])
    finding = next(f for f in judge(low_start).findings if f.kind == "entropy_collapse")
    assert finding.patches[0]["patch"] == {"log_std_init": 0.0}


def test_a_gaussian_started_low_by_its_config_is_told_to_start_at_one_though_it_first_logged_above_the_bar():
    """gSDE's first logged spread can sit just over the bar while its config started it at log std -6."""
    n = 30
    stds = [0.052] + [0.03] * (n - 1)
    flat = [-1200.0 + (i % 3) for i in range(n)]
    started_low = _gaussian_run(stds, flat, log_std_init=-6.0)
    finding = next(f for f in judge(started_low).findings if f.kind == "entropy_collapse")
    assert not finding.evidence.get("never_explored")
    assert finding.patches[0]["patch"] == {"log_std_init": 0.0}
    assert any("started near 0" in c for c in finding.causes)
    # started at SB3's log std 0 and collapsed later: the start is not the fix
    started_at_one = _gaussian_run(stds, flat, log_std_init=0.0)
    finding = next(f for f in judge(started_at_one).findings if f.kind == "entropy_collapse")
    assert all("log_std_init" not in p["patch"] for p in finding.patches)


def test_a_plain_gaussian_a2c_critic_that_never_explained_half_its_targets_is_stuck_once_the_run_ends():
    """A plain A2C-style log of a Gaussian policy whose std moves (the policy learns), its returns
    flat, its critic's explained variance noisy about 0 and never over gaussian_ev_best_max at any
    update (a vf_coef of 1e-6 on Pendulum with normalised rewards: a loss of 0.04 against episodes
    of -800): stuck, certain, once the run has ended. Not where one update explained 0.7 of the
    targets (the critic learnt their worth), nor for a discrete policy (a mastered survival env's
    critic explains ~0 of targets that barely vary), nor while the returns rise or with none logged,
    nor mid-run."""
    n = 100

    def plain(ev: list[float], continuous: bool = True, rising: bool = False) -> History:
        h = History(total_steps=n * 160, context={"continuous": continuous, "algo": "A2C"})
        for i in range(n):
            std = 1.0 - 0.004 * i  # a quarter smaller by the end: the policy moves
            values = {
                "entropy": 1.4189 + math.log(std),
                "ep_return": -800.0 + (300.0 * i / n if rising else 15.0 * math.sin(i)),
                "ep_length": 200.0,
                "value_loss": 0.04 + 0.005 * math.cos(i),
                "explained_variance": ev[i],
                "learning_rate": 7e-4,
            }
            if continuous:
                values["std"] = std
            h.add(160 * (i + 1), values)
        return h

    noisy = [0.45 * math.sin(1.7 * i) - 0.1 for i in range(n)]  # -0.55 .. 0.35, median ~ -0.1
    verdict = judge(plain(noisy))
    assert verdict.verdict == "stuck_value_loss"
    stuck = verdict.findings[0]
    assert stuck.certain and stuck.evidence["never_fit_gaussian"] and stuck.evidence["ev_best"] <= 0.5
    assert "never over" in stuck.summary
    once = list(noisy)
    once[40] = 0.7
    assert "stuck_value_loss" not in _kinds(plain(once))
    assert "stuck_value_loss" not in _kinds(plain(noisy, continuous=False))
    assert "stuck_value_loss" not in _kinds(plain(noisy, rising=True))
    unseen = plain(noisy)  # no episode logged: nothing says the returns did not rise
    del unseen.series["ep_return"]
    assert "stuck_value_loss" not in _kinds(unseen)
    live = Judge().check(plain(noisy))  # mid-run: no finding of this rule is certain
    assert not any(f.kind == "stuck_value_loss" and f.certain for f in live.findings)
