"""The corpus figures for ``results/benchmarks/stability.md`` (called by ``make bench``)."""

from __future__ import annotations

import datetime
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2]), str(HERE)]

import calibrate  # noqa: E402
import labels  # noqa: E402
import score  # noqa: E402

from stability.thresholds import Thresholds  # noqa: E402

# The splits also scored without their Acrobot cases (see evaluate). The result, fresh45, is all
# Acrobot (with a Dict observation): nothing would be left of it.
WITHOUT_ACROBOT = ("fresh42", "fresh39")
ACROBOT_ENVS = ("acrobot", "acrobot_dict")

# The scored splits, the result first (see conf/corpus/cases.yaml for how each was fixed).
SECTIONS = {
    "unseen": "Fresh71 to fresh75 splits (the result: each written before the split before it was read and "
    "before any of its runs were read; held out from the rule on a first update that saturated the untrained "
    "policy, which moved 3 of fresh71's plain-log verdicts, 2 to their labels, none of fresh72's, and 3 of "
    "fresh73's, all to their labels; fresh74 and fresh75 each scored once, with no detector change since)",
    "fresh70": "Fresh70 split (held out from the plain Gaussian A2C critic rule, which moved 3 of its verdicts, "
    "all to their labels; the first-update rule was made with it in view: in-sample now)",
    "fresh69": "Fresh69 split (held out from the plain Gaussian A2C critic rule, which moved none of its "
    "verdicts; the first-update rule was made with it in view, and moved 3: in-sample now)",
    "fresh68": "Fresh68 split (held out from the plain-log constant-critic rules, which moved 6 of its verdicts, "
    "all to their labels; the Gaussian A2C rule was made with it in view: in-sample now)",
    "fresh67": "Fresh67 split (held out from the plain-log constant-critic rules, which moved none of its "
    "verdicts; the Gaussian A2C rule was made with it in view: in-sample now)",
    "fresh66": "Fresh66 split (held out from the sweep path's reading of the sweep's reward_scale, which moved "
    "none of its verdicts; the constant-critic rules were made with it in view: in-sample now)",
    "fresh65": "Fresh65 split (written before fresh64 was read; the detectors as they were, no verdict changed "
    "since fresh63; the reward_scale change was made with it in view)",
    "fresh64": "Fresh64 split (written before fresh63 was read; the detectors as they are, no change made since)",
    "fresh63": "Fresh63 split (held out from the last-window change a second time; no change made since)",
    "fresh62": "Fresh62 split (held out from the reward_scale, config weight-decay and last-window changes; no "
    "change made since)",
    "fresh61": "Fresh61 split (held out from the reward_scale and config weight-decay changes, no verdict moved; the "
    "last-window change was made with it in view: in-sample now)",
    "fresh60": "Fresh60 split (held out from the A2C n-step reading and the untrained-critic rule; the three changes "
    "after them were made with it in view: in-sample now)",
    "fresh59": "Fresh59 split (held out from the A2C n-step reading and the one-length condition: in-sample now)",
    "fresh58": "Fresh58 split (held out from the change that reads a PPO-style plain log's value loss against the "
    "lambda-returns' size: in-sample now)",
    "fresh57": "Fresh57 split (held out from the time-limit episodes change and the per-step-cost bound change; "
    "written before the lambda-returns change, not in view for it)",
    "fresh56": "Fresh56 split (held out from the time-limit episodes change, no verdict moved; the per-step-cost "
    "bound change was made with it in view: in-sample now)",
    "fresh55": "Fresh55 split (held out from the slow-learner drift change and, a second time, from the change that "
    "lets the survival bound condemn; the time-limit episodes change was made with it in view: in-sample now)",
    "fresh54": "Fresh54 split (held out from the change that lets the survival bound condemn, no verdict moved; the "
    "drift change was made with it in view: in-sample now)",
    "fresh53": "Fresh53 split (held out from the survival-bound change; the change after it was made with it in "
    "view: in-sample now)",
    "fresh52": "Fresh52 split (scored once with the detectors as they were; the survival-bound changes were made "
    "with it in view: in-sample now)",
    "fresh51": "Fresh51 split (scored once with the detectors as they are, which fresh52 holds out: in-sample now)",
    "fresh50": "Fresh50 split (held out from the Gaussian-std shrink change, no verdict moved: in-sample now)",
    "fresh49": "Fresh49 split (scored once with no change since fresh48: in-sample now)",
    "fresh48": "Fresh48 split (held out from the weights'-shrink change a second time: in-sample now)",
    "fresh47": "Fresh47 split (held out from the weights'-shrink change, no verdict moved: in-sample now)",
    "fresh46": "Fresh46 split (held out from the weights'-norm change a second time: in-sample now)",
    "fresh45": "Fresh45 split (held out from the weights'-norm change, no verdict moved: in-sample now)",
    "fresh44": "Fresh44 split (held out from the recent-return change: in-sample now)",
    "fresh43": "Fresh43 split (held out from the explained-variance change: in-sample now)",
    "fresh42": "Fresh42 split (held out from the reference-return change: in-sample now)",
    "fresh41": "Fresh41 split (held out from the reference-return change; no threshold on its env: in-sample now)",
    "fresh40": "Fresh40 split (held out from the degenerate_reward change a third time: in-sample now)",
    "fresh39": "Fresh39 split (held out from the last detector change a second time: in-sample now)",
    "fresh38": "Fresh38 split (held out from the last detector change: in-sample now)",
    "fresh37": "Fresh37 split (held out from the change before the last: in-sample now)",
    "fresh36": "Fresh36 split (held out in an earlier round: in-sample now)",
    "fresh35": "Fresh35 split (held out in an earlier round: in-sample now)",
    "fresh34": "Fresh34 split (held out from the change before the last: in-sample now)",
    "fresh33": "Fresh33 split (held out in an earlier round: in-sample now)",
    "fresh32": "Fresh32 split (held out in an earlier round: in-sample now)",
    "fresh31": "Fresh31 split (held out from every change before it: in-sample now)",
    "fresh30": "Fresh30 split (held out in an earlier round: in-sample now)",
    "fresh29": "Fresh29 split (held out in an earlier round: in-sample now)",
    "fresh28": "Fresh28 split (held out in an earlier round: in-sample now)",
    "fresh27": "Fresh27 split (held out in an earlier round: in-sample now)",
    "fresh26": "Fresh26 split (held out in an earlier round: in-sample now)",
    "fresh25": "Fresh25 split (held out in an earlier round: in-sample now)",
    "fresh24": "Fresh24 split (held out in an earlier round: in-sample now)",
    "fresh23": "Fresh23 split (held out in an earlier round: in-sample now)",
    "fresh22": "Fresh22 split (held out in an earlier round: in-sample now)",
    "fresh21": "Fresh21 split (held out in an earlier round, with a revision: in-sample now)",
    "fresh20": "Fresh20 split (held out in an earlier round, read for a revision: in-sample now)",
    "fresh19": "Fresh19 split (held out in an earlier round: in-sample now)",
    "fresh18": "Fresh18 split (held out in an earlier round: in-sample now)",
    "fresh17": "Fresh17 split (held out in an earlier round: in-sample now)",
    "fresh16": "Fresh16 split (held out in an earlier round: in-sample now)",
    "fresh15": "Fresh15 split (held out in an earlier round: in-sample now)",
    "fresh14": "Fresh14 split (held out in an earlier round: in-sample now)",
    "fresh13": "Fresh13 split (held out in an earlier round: in-sample now)",
    "fresh12": "Fresh12 split (held out in an earlier round: in-sample now)",
    "fresh11": "Fresh11 split (held out in an earlier round: in-sample now)",
    "fresh10": "Fresh10 split (held out in an earlier round: in-sample now)",
    "fresh9": "Fresh9 split (held out in an earlier round: in-sample now)",
    "fresh8": "Fresh8 split (held out in an earlier round: in-sample now)",
    "fresh7": "Fresh7 split (held out in an earlier round: in-sample now)",
    "fresh6": "Fresh6 split (held out in an earlier round: in-sample now)",
    "fresh5": "Fresh5 split (read before the last change: in-sample now)",
    "fresh4": "Fresh4 split (in-sample)",
    "fresh3": "Fresh3 split (in-sample)",
    "fresh2": "Fresh2 split (in-sample)",
    "fresh": "Fresh split (in-sample)",
    "heldout": "Original held-out half (in-sample)",
    "calib": "Calibration half (in-sample)",
}


def evaluate(root: Path, lomo: bool = True) -> dict[str, Any]:
    cases = score.load_cases()
    # the splits written after the held-out one are kept for the next changes: not even their
    # labels are counted here
    shown = {c["id"] for c in cases if c["split"] in (*score.SPLITS["seen"], *score.SPLITS["unseen"])}
    runs = [r for r in score.load_runs(root) if r["case"] in shown]
    refs = score.references(runs)
    out: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "runs": len(runs),
        "cases": len({r["case"] for r in runs}),
        "references": refs,
    }
    out["labels"] = Counter(labels.label(r, refs.get(r["env"])) for r in runs)
    for split in SECTIONS:
        result = score.score(runs, Thresholds(), split)
        if result["rows"]:
            out[split] = result["paths"]
            out[f"{split}_distinct"] = result["distinct"]
            out[f"{split}_rows"] = result["rows"]
            # a split only partly run (e.g. only its reference cases) is scored on what ran, and says so
            out[f"{split}_coverage"] = (
                len({r["case"] for r in result["rows"]}),
                sum(c["split"] in score.SPLITS[split] for c in cases),
            )
    # Acrobot pays -1 per step until the goal: a policy that never reaches it (random, or any
    # failed run) sees one reward value, so the label rule for degenerate_reward claims those runs.
    # The same figures without Acrobot, for comparison (the rules themselves were not changed).
    for split in WITHOUT_ACROBOT:
        if split in out:
            out[f"{split}_without_acrobot"] = score.score(runs, Thresholds(), split, ACROBOT_ENVS)["paths"]
    if lomo:
        out["lomo"] = calibrate.leave_one_mechanism_out(root)
    return out


def _f(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"


def markdown(d: dict[str, Any]) -> list[str]:
    lines = [
        f"## Verdict quality on the labelled corpus ({d['date']})",
        "",
        f"{d['runs']} runs of {d['cases']} cases (3 seeds each; `conf/corpus/`). Labels come from privileged "
        "measurements (policy snapshots on probe states, critic fit on fresh rollouts, returns, crashes). "
        f"{len(score.SPLITS['all'])} splits written, each fixed by case before its "
        "runs existed (conf/corpus/README.md): thresholds were set "
        "on the calibration half and the held-out half scored; detector changes were then made with both in "
        "view and tested on the fresh split; further changes with the fresh split in view were tested on "
        "fresh2, then fresh3, fresh4, fresh5 (a change tried with fresh4 in view was withdrawn) and fresh6; "
        "fresh7 was a second held-out split for that round; the next change was made with fresh7's errors "
        "in view and tested on fresh8, the next with fresh8's errors in view and tested on fresh9, and "
        "the next with fresh9's errors in view; fresh10 held them out. A change then made with fresh10's errors "
        "in view was scored on fresh11 and withdrawn; fresh11 held out the detectors as they were. The next "
        "change (the critic measured against its episodes' returns) was made with fresh10 and fresh11 in view "
        "and held out by fresh12. The next (the critic's bars narrowed about the label's, and entropy_collapse's "
        "stall test read against the early returns' spread) was made with fresh10 to fresh12 in view and held "
        "out by fresh13. The next (entropy_collapse's near-determinism read with the label's two bars, and "
        "returns that never varied no longer a stall) was made with fresh10 to fresh13 in view and held out by "
        "fresh14. The next (stuck_value_loss reading a critic's sparse records over the second half, and not "
        "judging a plain log whose episodes all returned 0) was made with fresh14 in view and held out by "
        "fresh15. The next (stuck_value_loss from A2C-style plain logs whose explained variance sits at -0.2 or "
        "less) was made with fresh13 to fresh15 in view and held out by fresh16; a second rule committed with it "
        "was withdrawn after fresh16 (it broke three runs there and fixed none). The next (exploding_updates "
        "counting an approx_kl hit only where the update moved the weights, or a Gaussian's std) was made with "
        "fresh13 to fresh16 in view and held out by fresh17; the next (dead_policy_gradient for A2C-style "
        "Gaussians whose std never moved) with fresh13 to fresh17 in view; fresh18 held out both. The next "
        "(a plain log without a std read as a Gaussian policy's when its entropy says so: CleanRL's) was made "
        "with fresh13 to fresh18 in view and held out by fresh19 (no verdict moved). The next (stuck_value_loss "
        "from plain PPO-style logs: explained variance does not call a critic stuck whose loss is under 0.01 of "
        "the episodes' squared discounted return) was made with fresh13 to fresh19 in view and held out by "
        "fresh20, which it made worse (two runs broken, none fixed); its revision (not below 1e-6 of it) was "
        "made with fresh20 in view; fresh21 held out both (no verdict moved). The next (degenerate_reward "
        "from a plain log: one non-zero total over episodes of varying length is not one reward per step) was "
        "made with fresh13 to fresh21 in view, and held out by fresh22 and then fresh23 (no verdict of either "
        "moved with it), and by fresh24, scored with no change since. The next (nan_scale certain once a std "
        "leaves about [1e-20, 1e10], the label's bars, instead of only past e^44: fresh24's Gaussians started "
        "at log_std 24 were all missed) was made with fresh13 to fresh24 in view and held out by fresh25, "
        "fresh26 and fresh27 (each scored once with no change since). The next (a PPO clip fraction near 1 "
        "read as movement only above a clip range of 1e-3: fresh27's policy clip of 1e-6 was missed on all "
        "six runs) was made with fresh26 and fresh27 in view and held out by fresh28. The next (entropy_collapse "
        "for a policy near-deterministic from its first update to its last, judged at its end on a rise of 40% "
        "of its returns' size, and gSDE's logged std not read as its actions': capped log stds were called "
        "healthy whenever their returns moved a little) was made with fresh26 to fresh28 in view and held out by "
        "fresh29. The next two (a Gaussian's near-determinism read from its entropy as well as its logged "
        "std, in place of an exception for gSDE; and exploding_updates certain on one update that moved the "
        "weights by 11 times their norm) were made with fresh26 to fresh29 in view and held out by fresh30; "
        "fresh31 held out the detectors as they were then. The next (stuck_value_loss from a plain log: "
        "explained variance alone, against a loss under 0.1 of the episodes' squared discounted return, is a "
        "warning, not a verdict) was made with fresh26 to fresh31 in view and held out by fresh32. The next "
        "(dead_policy_gradient: a small actor share of the gradient starves the actor only through a clip that "
        "scales every gradient) was made with fresh26 to fresh32 in view; fresh33 held out both. The next "
        "(stuck_value_loss certain only once the run has ended, and the callback's critic error under the "
        "label's own bar, 0.6, clearing the loss rules) was made with fresh26 to fresh33 in view and held out "
        "by fresh34. The last (stuck_value_loss from a plain log: a loss over ten times the episodes' squared "
        "discounted return, with explained variance above -0.2, is not in the episodes' units, and gives no "
        "certain verdict) was made with fresh26 to fresh34 in view and held out by fresh35 (no verdict moved). "
        "Then the labels' measurement rollouts were fixed (they had kept one draw of a gSDE policy's noise "
        "for 3000 steps) and every kept gSDE run trained and measured again. "
        "Fresh36, written after fresh35 was scored, was scored once with no detector change since, on the fixed "
        "labels. The last change (stuck_value_loss from a plain log: a critic pinned at explained variance ~0 "
        "beside a policy near-deterministic throughout the window is a warning, the collapse the verdict) was "
        "made with fresh26 to fresh36 in view and held out by fresh37 (no verdict moved). The last "
        "(degenerate_reward certain because no rollout since the first paid a signal is withdrawn when a later "
        "rollout pays one) was made with fresh26 to fresh37 in view and held out by fresh38 (it moved one run "
        "on each path, a break: an Acrobot policy that never moved, whose training paid a goal twice but whose "
        "label's rollouts never did). "
        "Fresh39, written after fresh38 was scored and before any of its cases ran, was scored once with no "
        "detector change since (held out from the last change a second time: of the verdicts it moved, 3 "
        "were fixed and 2 broken, the breaks of the same kind). "
        "Fresh40, written after fresh39 was scored and before any of its cases ran, on an env no earlier "
        "split has (pendulum_dict), was scored once with no detector change since fresh38 (held out from "
        "that change a third time). Then the label rule for stuck_value_loss changed (a run whose policy "
        "learned is not stuck, whatever its critic) and the detector with it (a run whose returns got a fifth "
        "of the way to its env's reward_threshold is not certain), made with fresh37 to fresh40 in view; "
        "fresh41 (written before, on an env with no threshold the callback can use) and "
        "fresh42 (written after the change and before any of its cases ran, every case on an env with a "
        "registered threshold) held it out. The next change (with the returns short of that reference, "
        "explained variance alone decides stuck_value_loss) was made with fresh37 to fresh42 in view; "
        "fresh43 (written after fresh42 was scored and before that change, on a new env, CartPole-v0) "
        "held out both. The next change (the return at a run's end read from the episodes of its last records, "
        "the callback's ep_return_recent, not SB3's 100-episode mean; a run of under 10 updates that ended short "
        "of its reference judged on them) was made with fresh37 to fresh43 in view; "
        "fresh44 (written after fresh43 was scored and before that change, on a new env, CartPole-v0 with a "
        "Dict observation; trained again with the new callback once the change was committed) held it out. "
        "The next change (exploding_updates decided by the weights' own growth, tenfold over their start, "
        "where the callback records their norm) was made with fresh37 to fresh44 in view; "
        "fresh45 (written after fresh44 was trained and before that change, on a new env, Acrobot-v1 with a "
        "Dict observation; trained again with the callback that records the norm once the change was "
        "committed, never scored before) held it out, and no verdict of it moved; "
        "fresh46 (written after that change was committed and before any of its cases ran, on a new env, "
        "Pendulum-v1 cut to 100-step episodes, three of its cases built to explode) held it out a second time. "
        "The last change (dead_policy_gradient also read from weights shrunk to a tenth of their start beside "
        "a frozen entropy, where the callback records their norm) was made with fresh37 to fresh46 in view; "
        "fresh47 (written after fresh46 was trained and before that change, on a new env, "
        "MountainCarContinuous-v0 with a Dict observation) held it out, and no verdict of it moved; "
        "fresh48 (written after that change was committed and before any of its cases ran, on a new env, "
        "CartPole-v1 cut at 1000 steps, two of its cases with a large weight decay) held it out a second time; "
        "fresh49 (Pendulum-v1 with noisy rewards) was scored once with no change since. The next change (the "
        "same rule reading a Gaussian's std, within 10% of its first value, where its entropy is not frozen) "
        "was made with fresh49 in view; fresh50 (Acrobot-v1 cut at 1000 steps, written before fresh49 was "
        "scored) held it out, and no verdict of it moved. A change then made with fresh50 in view (a sweep's "
        "best healthy return as the reference for its later trials) was scored on fresh51 and withdrawn; "
        "fresh51 (Pendulum-v1 cut at 400 steps, written after fresh50 was read) was then scored with the "
        "detectors as they are; fresh52 (CartPole-v0 with noisy rewards, written after fresh51 was read) was "
        "scored once with no change since. A change then made with fresh52 in view (a time limit times a steady "
        "reward per step survived as a bound on the reference return, where none is known) was held out by "
        "fresh53 (CartPole-v1 cut at 300 steps with noisy rewards). The next (that bound standing for "
        "the reference both ways: short of a fifth of the way to it, a run did not learn) was made with fresh41 "
        "to fresh53 in view and held out by fresh54 (CartPole-v1 cut at 400 steps, its reward scaled by 0.1 "
        "with noise; no verdict moved) and fresh55. The next (a discrete policy's steady entropy drift "
        "spares it a mid-run dead verdict) was made with fresh41 to fresh54 in view and held out by fresh55 "
        "(CartPole-v1 cut at 2000 steps with noisy rewards; no verdict moved). The next (episodes that all ran "
        "out the time limit need two, not ten, to call a reward constant) was made with fresh55 in view and "
        "held out by fresh56 (Acrobot-v1 cut at 700 steps with noisy rewards; no verdict moved). The next (an "
        "env that charges a steady cost per step until the episode ends is bounded by 0, which stands for the "
        "reference) was made with fresh50 and fresh56 in view; fresh57 (Acrobot-v1 cut at 1500 steps, written "
        "before fresh56 was scored, before both changes and before any of its runs) held out both. The last "
        "(from a PPO-style plain log, a critic that never fit whose value loss is the lambda-returns' own size "
        "is stuck) was made with fresh47 and fresh51 in view; fresh58 (Pendulum-v1 cut at 150 steps with "
        "noisy rewards, written before fresh57 was scored and before any of its runs) held it out. The last "
        "(the same reading for A2C's n-step returns, and for both styles only where every episode lasted one "
        "length) was made with fresh47, fresh51, fresh58 and the A2C runs of fresh52 and fresh53 in view; "
        "fresh59 (CartPole-v1 cut at 250 steps, reward x4 with noise, written before fresh58 was trained and "
        "before any of its runs) held it out. The last (read with the run's config, a vf_coef under 1e-4 leaves "
        "the critic untrained) was made with fresh47, fresh51, fresh58 and fresh59 in view; fresh60 "
        "(Pendulum-v1 cut at 300 steps, reward x0.5 with noise, written before fresh59 was scored, before both "
        "changes and before any of its runs) held out both. The next three (a config's reward_scale puts the "
        "critic's targets in its units; from an A2C-style log, a config's weight decay of 0.1 or more through "
        "Adam or RMSprop stands for the weights' norm; a PPO-style critic has not fit when no update of the "
        "last window explained over 0.2) were made with fresh60 and the splits before it in view; fresh61 "
        "(CartPole-v1 cut at 350 steps, reward x0.5 with noise) held out the first two, fresh62 (Pendulum-v1 cut "
        "at 250 steps, reward x1.5 with noise, written before fresh61 was scored, before the three changes and "
        "before any of its runs) held out all three, and **fresh63 (CartPole-v1 cut at 450 steps, reward x2 with "
        "noise, written before fresh62 was scored and before any of its runs) held out the last a second time; "
        "no verdict changed after it, and fresh64 (Pendulum-v1 cut at 350 steps, reward x0.75 with noise) and "
        "**fresh65 (CartPole-v1 cut at 400 steps, reward x3 with noise, written before fresh64 was scored and "
        "before any of its runs) held out the detectors as they were; the sweep's reward_scale then reached the "
        "callback's context, and fresh66 (Pendulum-v1 cut at 400 steps, reward x1.25 with noise, written before "
        "fresh65 was scored and before any of its runs) held that out; two plain-log rules on a critic that "
        "predicts a constant were then made with the seen runs and fresh66 in view, and **fresh67 (CartPole-v1 at "
        "500 steps, reward x0.25 with noise, written before fresh66 was scored) and fresh68 (Pendulum-v1 at 200 "
        "steps, reward x0.6 with noise, written before fresh67 was trained or scored), both before any of their "
        "runs, held them out; a plain-log rule on a Gaussian A2C critic that never explained half its targets "
        "was then made with the seen runs and both in view, and **fresh69 (CartPole-v1 cut at 325 steps, reward "
        "x1.75 with noise, written before fresh67 or fresh68 was scored) and fresh70 (Pendulum-v1 cut at 150 "
        "steps, reward x0.9 with noise, written before fresh69 was scored), both before any of their runs, held "
        "it out; the labels of three envs whose reference runs were missing were then corrected (such a run is "
        "unmeasured until its reference is trained), a plain-log rule on a first update that saturated the "
        "untrained policy was made with the seen runs and both in view, and **fresh71 (CartPole-v1 cut at 275 "
        "steps, reward x1.5 with noise, written before fresh69 or fresh70 was scored) and fresh72 (Pendulum-v1 "
        "cut at 175 steps, reward x1.1 with noise, written before fresh71 was scored) and fresh73 (CartPole-v1 cut "
        "at 225 steps, reward x2.25 with noise, written before fresh71 or fresh72 was scored) and fresh74 (Pendulum-v1 "
        "cut at 225 steps, reward x0.8 with noise, written before fresh73 was trained) and fresh75 (CartPole-v1 "
        "cut at 260 steps, reward x0.6 with noise, written before fresh74 was trained), all before any of "
        "their runs were read, held it out and are the result**; "
        "the others are in-sample for the current detectors and shown for comparison. 'Of which learned': "
        "the healthy-labelled runs flagged among those whose fresh rollouts got at least half way from the "
        "untrained policy's return to the env's reference (the false stops that cost a sweep its good configs). "
        "Paths: sweep (the callback's signals), diagnose (the plain TensorBoard log alone), diagnose_config "
        "(the same log with the case's config, as `rlsweep diagnose --hyperparams` reads it).",
        "",
        "Labels: " + ", ".join(f"{k} {v}" for k, v in sorted(d["labels"].items())),
        "",
    ]
    for split, title in SECTIONS.items():
        if split not in d:
            continue
        ran, total = d.get(f"{split}_coverage", (0, 0))
        partial = f" (only {ran} of its {total} cases have runs)" if ran < total else ""
        for path in score.PATHS:
            m = d[split][path]
            lines += [
                f"### {title}, {path} path: accuracy {m['accuracy']:.3f} over {m['runs']} runs{partial}; "
                f"healthy runs flagged {m['healthy_flagged']}/{m['healthy_runs']}, "
                f"of which learned {m['learned_flagged']}/{m['learned_runs']}; knob patches advised "
                f"{m['patches_advised']}, of which set a value the run already had {m['patches_repeating_the_config']}",
                "",
                "| class | precision | recall | labelled | given | false-stop rate on healthy runs |",
                "|-|-|-|-|-|-|",
            ]
            for c, v in m["per_class"].items():
                stop = m["false_stop_rate"].get(c)
                lines.append(
                    f"| {c} | {_f(v['precision'])} | {_f(v['recall'])} | {v['support']} | {v['predicted']} | "
                    f"{'-' if stop is None else f'{stop:.3f}'} |"
                )
            lines += [
                "",
                "Confusion (label -> verdict): " + "; ".join(f"{k}: {v}" for k, v in m["confusion"].items()),
                "",
                "Recall by mechanism: " + "; ".join(f"{k} {v:.2f}" for k, v in m["mechanism_recall"].items()),
            ]
            distinct = d.get(f"{split}_distinct", {}).get(path)
            if distinct and distinct["runs"] < m["runs"]:
                lines.append(
                    f"\nOver the distinct runs only ({m['runs'] - distinct['runs']} repeat the training of an "
                    f"earlier run, see score.trajectory): accuracy {distinct['accuracy']:.3f} over {distinct['runs']}."
                )
            if m.get("onset_to_verdict_budget_fraction"):
                q, r = m["onset_to_verdict_budget_fraction"], m["verdict_at_budget_fraction"]
                lines.append(
                    f"\nFrom onset to verdict (live checks), as a fraction of the budget: median {q['median']}, "
                    f"p90 {q['p90']} (n={q['n']}); verdict reached at median {r['median']} of the budget."
                )
            lines.append("")
    for split in WITHOUT_ACROBOT:
        if not d.get(f"{split}_without_acrobot"):
            continue
        lines += [
            f"### {SECTIONS[split]} without the Acrobot cases (see the note on the degenerate_reward label rule)",
            "",
            "| path | accuracy | runs | healthy flagged | " + " | ".join(f"{c} P/R" for c in score.TARGETS) + " |",
            "|-|-|-|-|" + "-|" * len(score.TARGETS),
        ]
        for path, m in d[f"{split}_without_acrobot"].items():
            cells = [
                f"{_f(m['per_class'].get(c, {}).get('precision'))}/{_f(m['per_class'].get(c, {}).get('recall'))}"
                for c in score.TARGETS
            ]
            lines.append(
                f"| {path} | {m['accuracy']:.3f} | {m['runs']} | {m['healthy_flagged']}/{m['healthy_runs']} | "
                + " | ".join(cells)
                + " |"
            )
        lines.append("")
    if d.get("lomo"):
        lines += [
            "### Leave one mechanism out",
            "",
            "Each failure mechanism's runs (both halves, both paths) scored with thresholds calibrated "
            "without any of its cases.",
            "",
            "| mechanism | recall | runs x paths |",
            "|-|-|-|",
        ]
        lines += [f"| {k} | {v['recall']:.2f} | {v['runs']} |" for k, v in d["lomo"].items()]
        lines.append("")
    return lines


if __name__ == "__main__":
    paths = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = Path(paths[0]) if paths else score.REPO / "results" / "corpus" / "runs"
    print("\n".join(markdown(evaluate(root, lomo="--no-lomo" not in sys.argv))))
