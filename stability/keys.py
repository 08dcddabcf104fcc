"""The names under which rlsweep records runs: Optuna trial user attributes and MLflow tags.

One home for them. It lives in the leaf library so that its readers (``stability.diagnose`` reads
a run back from MLflow) and the engine that writes them (``sweeps``) share one spelling.
"""

from __future__ import annotations

# --- Optuna trial user attributes (and MLflow tags where both carry the same fact) --------------------
OUTCOME = "rlsweep.outcome"  # one of OUTCOMES, or interrupted (| skipped on a seed run)
# How a trial that ran to its end (its own end, or one rlsweep chose) ended: told to Optuna as
# COMPLETE, PRUNED (by its verdict, stability.stop_on), PRUNED (by the pruner) and FAIL.
OUTCOMES = ("complete", "unstable", "pruned", "crashed")
PRUNED = "rlsweep.pruned"  # why and at which step the pruner stopped the trial
WARM_START = "rlsweep.warm_start"  # the sweep a trial's config or knowledge came from (warm_start.from)
VERDICT = "rlsweep.verdict"  # the trial's verdict
VERDICTS = "rlsweep.verdicts"  # {seed: verdict}
RETURNS = "rlsweep.returns"  # {seed: mean evaluation return}
PARAMS = "rlsweep.params"  # the sampled values, decoded, by dotted name
ERROR = "rlsweep.error"  # "Type: message" of the crash
FINGERPRINT = "rlsweep.fingerprint"  # study attribute: the spec a sweep was run from
PATCHES = "rlsweep.patches"  # a failed trial's candidate knob patches, in repair's order
ENV_BROKE = "rlsweep.env_broke"  # a failed trial whose findings say its env handed back non-finite values
REPAIR_OF = "rlsweep.repair_of"  # a repair attempt: the failing trial it repairs
REPAIR_ATTEMPT = "rlsweep.repair_attempt"
REPAIR_PATCH = "rlsweep.repair_patch"
REPAIR_RESULT = "rlsweep.repair_result"  # why an attempt passed or not
CONFIRM = "rlsweep.confirm"  # a repair's scores on fresh seeds

# --- MLflow run tags ---------------------------------------------------------------------------------------
SWEEP = "rlsweep.sweep"
TRIAL = "rlsweep.trial"
SEED = "rlsweep.seed"
KIND = "rlsweep.kind"  # "report": the run holding a sweep's report
WORKER = "rlsweep.worker"
NODE = "rlsweep.node"  # where a seed ran: the hostname (local) or its Ray node as IP/node id
ATTEMPTS = "rlsweep.attempts"  # a job run again after its worker died: how many times it ran
RETRIED_AFTER = "rlsweep.retried_after"
METRICS_THINNED = "rlsweep.metrics_thinned"  # the driver fell behind: the run's curves keep 1 point in N
CANCELLED = "rlsweep.cancelled"  # why a seed was stopped
RESTORED = "rlsweep.restored"  # a finished trial's run made on resume from the study; the value says what it lacks
RUN_KEY = "rlsweep.run_key"  # unique per run: creating it twice (a tracking outage) finds the first
REPAIR = "rlsweep.repair"  # on a failing trial's run: how its repair ended
REPAIRED_BY = "rlsweep.repaired_by"  # ... and the run that repaired it
REPAIR_CONFIRM = "rlsweep.repair_confirm"  # on a confirmation run: the attempt's run
REPAIR_CONFIRMED = "rlsweep.repair_confirmed"
STABILITY_VERDICT = "stability.verdict"
STABILITY_ONSET = "stability.onset_step"
STABILITY_STOPPED_BY = "stability.stopped_by"
STABILITY_CONTEXT = "stability.context"  # the run's config as the stability callback recorded it

# --- a finding's evidence, read outside the detectors --------------------------------------------------------
# stuck_value_loss beside returns that rose, with no reference return to tell a lagging critic (a warning) from
# a failing one: a sweep's summary names the trials whose verdict rests on it
UNREFERENCED_RISE = "returns_rose_without_reference"
