"""The Ray backend, on a real local Ray instance (2 CPUs, as on CI).

Each test that starts Ray also proves that nothing of it is left running afterwards: the test
process is made a subreaper, so whatever a sweep leaves behind is re-parented here and seen.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import optuna
import pytest

from tests.helpers import REPO, become_subreaper, descendants, split_runs, stores, tiny_spec

ray = pytest.importorskip("ray")

_RAY_NAMES = ("raylet", "gcs_server", "ray::", "default_worker", "dashboard", "log_monitor", "runtime_env_agent")


@pytest.fixture(scope="module", autouse=True)
def _subreaper() -> None:
    become_subreaper()


def _ray_left() -> list[str]:
    """Ray processes still alive below this test process (they get a few seconds to exit)."""
    deadline = time.monotonic() + 15
    while True:
        left = [cmd for cmd in descendants().values() if any(name in cmd for name in _RAY_NAMES)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def _grid_spec(name: str, marker: Path, **backend) -> dict:
    """2 grid trials x 2 seeds; the first job to reach step 300 has its worker killed (once)."""
    return tiny_spec(
        name,
        env={
            "id": "tests.helpers:faulty_cartpole",
            "n_envs": 2,
            "kwargs": {"fail_at_step": 150, "how": "kill", "once_marker": str(marker)},
        },
        space={"learning_rate": {"type": "choice", "values": [0.001, 0.003]}},
        sampler={"kind": "grid"},
        trials=2,
        backend={"max_failures": 1, **backend},
    )


def _client():
    import mlflow

    return mlflow.MlflowClient(f"sqlite:///{Path('results/mlflow.db').resolve()}")


def _runs(name: str) -> list:
    client = _client()
    experiment = client.get_experiment_by_name(name)
    return client.search_runs([experiment.experiment_id], max_results=1000)


@pytest.mark.slow
def test_ray_runs_the_sweep_like_local_and_retries_a_killed_worker(cli, write_spec, workdir: Path) -> None:
    results = {}
    for kind in ("local", "ray"):
        path = write_spec(_grid_spec(f"grid_{kind}", workdir / f"killed_{kind}"), name=f"{kind}.yaml")
        done = cli("run", str(path), "--backend", kind)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "1 job(s) ran again after their worker died" in done.stdout
        assert (workdir / f"killed_{kind}").exists()  # a worker really was killed
        study = optuna.load_study(
            study_name=f"grid_{kind}", storage=f"sqlite:///{workdir}/results/grid_{kind}/optuna.db"
        )
        trials = study.get_trials(deepcopy=False)
        assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
        results[kind] = {t.params["learning_rate"]: (t.value, t.user_attrs["rlsweep.returns"]) for t in trials}
        runs = _runs(f"grid_{kind}")
        seeds = [r for r in runs if "rlsweep.seed" in r.data.tags]
        assert len(runs) == 6 and len(seeds) == 4  # 2 trial runs + 2 x 2 seed runs: no duplicate from the retry
        retried = [r for r in seeds if r.data.tags.get("rlsweep.attempts") == "2"]
        assert len(retried) == 1 and "died" in retried[0].data.tags["rlsweep.retried_after"]
        assert {r.data.tags["stability.verdict"] for r in seeds} == {"healthy"}
        assert all(r.data.tags["rlsweep.device"] == "cpu" for r in seeds)
        import mlflow

        history = mlflow.MlflowClient(f"sqlite:///{workdir}/results/mlflow.db").get_metric_history(
            retried[0].info.run_id, "rollout/ep_rew_mean"
        )
        steps = [m.step for m in history]
        assert steps and len(steps) == len(set(steps))  # the retry's repeated steps were not logged twice
        results[kind + "_schema"] = (
            sorted({k for r in seeds for k in r.data.metrics}),
            sorted({k for r in seeds for k in r.data.tags if k != "rlsweep.worker"}),
        )
    # same configs, same seeds: the same returns, whichever backend ran them
    assert results["ray"] == results["local"]
    assert results["ray_schema"] == results["local_schema"]
    assert (workdir / "results" / "grid_ray" / "ray").is_dir()  # Tune's experiment state, inside the sweep folder
    assert _ray_left() == []


def test_impossible_resources_are_refused_before_anything_is_written(cli, write_spec, workdir: Path) -> None:
    spec = tiny_spec("gpu_wanted", backend={"kind": "ray", "resources_per_trial": {"cpu": 1, "gpu": 0.25}})
    done = cli("run", str(write_spec(spec)))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "gpu 0.25" in done.stderr and "no node of the Ray cluster" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (workdir / "results").exists()
    assert _ray_left() == []


# --- in this process, on a Ray instance started by the tests with one *logical* GPU -------------
# (these come last: the instance lives from the first of them to the end of the module)
@pytest.fixture(scope="module")
def logical_gpu_ray():
    ray.init(
        address="local",  # as the backend starts its own: never a cluster another test started
        num_cpus=2,
        num_gpus=1,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}},
    )  # workers import tests.helpers' envs
    yield
    ray.shutdown()
    assert _ray_left() == []


@pytest.mark.slow
def test_fractional_gpu_shares_on_a_logical_gpu_and_cancel(workdir: Path, logical_gpu_ray) -> None:
    """Four trials at gpu 0.25 run at once, each told CUDA_VISIBLE_DEVICES, and each trains on
    the CPU because torch finds no CUDA here."""
    from sweeps import configs
    from sweeps import spec as spec_module
    from sweeps.backends._ray import RayBackend, RaySettings
    from sweeps.errors import UsageError

    # long enough that the four overlap even when their actors start seconds apart on a loaded
    # 2-core machine (at 4096 steps, the first finished before the fourth started in CI once):
    # each step waits 4 ms, so a seed lasts over 8 s while using little CPU (trained for 16384
    # steps instead, the four filled both cores for a minute and slowed every test beside them)
    env = {"id": "tests.helpers:waiting_cartpole", "n_envs": 2, "kwargs": {"step_seconds": 0.004}}
    spec = spec_module.from_dict(tiny_spec("shares", env=env, total_timesteps=2048))
    jobs = configs.trial_configs(spec, 0, {"learning_rate": 1e-3}, [0, 1, 2, 3], configs.stability_settings(spec))[1]
    for cpu, gpu in ((1, 2), (4, 0.25)):
        with pytest.raises(UsageError, match="no node of the Ray cluster"):
            RayBackend(RaySettings(cpu=cpu, gpu=gpu))
    started, finished = {}, {}
    with RayBackend(RaySettings(cpu=0.5, gpu=0.25, storage=workdir / "tune")) as backend:
        assert backend.capacity == 4
        for job in jobs:
            backend.submit(job)
        deadline = time.monotonic() + 240
        while len(finished) < 4 and time.monotonic() < deadline:
            for event in backend.poll(0.5):
                if event.kind == "started":
                    started[event.key] = (time.monotonic(), event.payload)
                elif event.kind in ("finished", "failed"):
                    assert event.kind == "finished", event.payload
                    finished[event.key] = time.monotonic()
        assert len(finished) == 4
        # all four held their share at the same time
        assert max(t for t, _ in started.values()) < min(finished.values())
        for _, payload in started.values():
            assert payload.cuda_visible_devices == "0" and payload.gpu_ids == ("0",)
            assert payload.device == "cpu"
        # a cancelled job (its trial was proved doomed by a sibling) is stopped by Tune
        long_job = configs.trial_configs(
            spec_module.from_dict(tiny_spec("shares", total_timesteps=200_000)),
            1,
            {"learning_rate": 1e-3},
            [0],
            configs.stability_settings(spec),
        )[1][0]
        backend.submit(long_job)
        ended, asked = None, None
        deadline = time.monotonic() + 120
        while ended is None and time.monotonic() < deadline:
            for event in backend.poll(0.5):
                if event.kind == "started":
                    asked = time.monotonic()
                    backend.cancel([long_job.key], "seed 1 of this trial was found nan_scale")
                elif event.kind in ("finished", "failed", "cancelled"):
                    ended = event
        assert ended is not None and ended.kind == "cancelled", ended
        assert ended.payload.reason == "seed 1 of this trial was found nan_scale"
        assert time.monotonic() - asked < 10  # stopped at its next report, not at the end of 200k steps


@pytest.mark.parametrize("backend", ["ray", "local"])
def test_a_doomed_trial_stops_its_running_seeds(backend: str, workdir: Path, request: pytest.FixtureRequest) -> None:
    """One seed's observations turn to NaN: its verdict (nan_scale) ends it, and the trial's other
    seed, still training, is stopped with that verdict as the reason (Ray: by Tune's stopper;
    local: by its worker, at its next update)."""
    if backend == "ray":
        request.getfixturevalue("logical_gpu_ray")
    import io

    from rich.console import Console

    from sweeps import spec as spec_module
    from sweeps.runner import run_sweep

    spec = spec_module.from_dict(
        tiny_spec(
            "doomed_ray",
            env={
                "id": "tests.helpers:faulty_env",
                "n_envs": 1,
                "kwargs": {
                    "env_id": "Pendulum-v1",
                    "fail_at_step": 300,
                    "how": "nan",
                    "once_marker": str(workdir / "nan_once"),
                },
            },
            total_timesteps=100_000,
            seeds=[0, 1],
            trials=1,
            space={"learning_rate": 3e-4},
            stability={"stop_on": ["nan_scale"]},
            backend={"kind": backend},
        )
    )
    run_sweep(spec, Console(file=io.StringIO()), workers=2)
    study = optuna.load_study(study_name="doomed_ray", storage=f"sqlite:///{workdir}/results/doomed_ray/optuna.db")
    (trial,) = study.get_trials()
    assert trial.state.name == "PRUNED" and trial.user_attrs["rlsweep.outcome"] == "unstable", trial.user_attrs
    assert trial.user_attrs["rlsweep.verdict"] == "nan_scale"
    seeds = {r.data.tags["rlsweep.outcome"]: r for r in _runs("doomed_ray") if "rlsweep.seed" in r.data.tags}
    assert set(seeds) == {"unstable", "skipped"}
    assert seeds["unstable"].data.tags["stability.stopped_by"] == "nan_scale"
    assert "found nan_scale" in seeds["skipped"].data.tags["rlsweep.cancelled"]
    # neither seed trained its 100k steps: read from the steps its metrics were logged at, not from
    # the wall clock (which a busy machine stretches)
    assert max(_last_step(run) for run in seeds.values()) < 100_000


def _last_step(run) -> int:
    """The last env step any metric of an MLflow run was logged at (0 when it logged none)."""
    client = _client()
    steps = [m.step for key in run.data.metrics for m in client.get_metric_history(run.info.run_id, key)]
    return max(steps, default=0)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["ray", "local"])
def test_median_pruning_ends_the_trials_that_fall_behind(backend: str, workdir: Path, request) -> None:
    """CartPole with one good and two useless learning rates: the good one runs first (grid seed 1)
    and finishes; each useless one is behind it at the first evaluation past the warm-up, so it is
    pruned there and both its seeds are stopped, on either backend.

    The evaluations are stochastic: the deterministic policy of an untrained CartPole net can
    balance the pole for hundreds of steps by chance (CI saw a useless trial evaluate at 362
    throughout, pruned only once the good one passed it), while its stochastic policy cannot.

    On either backend one worker runs the seeds in turn: the median pruner judges only against
    finished trials, so no useless seed runs before the good trial has finished (with two local
    workers, a useless seed started beside the good trial's last one, reported 2048 before the good
    trial was told complete, and was pruned a step late, at 3072: right by the pruner, not the step
    this test can name; the driver's rule of waiting for every running seed is tested against a
    fake backend); a pruned trial's second seed is stopped while queued; and on Ray each job after
    a pruned one starts right after Tune stopped a job mid-training, in the actor that job ran in
    (when a stopped job reported again from its clean-up, it kept the actor and the next job waited
    for ever)."""
    if backend == "ray":
        request.getfixturevalue("logical_gpu_ray")
    import io

    from rich.console import Console

    from sweeps import spec as spec_module
    from sweeps.runner import run_sweep

    name = f"prune_{backend}"
    # a Ray job learns of its cancellation at its next batched report and a local worker at its next
    # update: the seeds train long enough for the stop to land well before the end (a seed that
    # ended first is 'complete'; on a loaded 2-core machine a job once ran a few evaluations on)
    total = 8192 if backend == "local" else 12288
    spec = spec_module.from_dict(
        tiny_spec(
            name,
            env={"id": "CartPole-v1", "n_envs": 1},
            total_timesteps=total,
            hyperparams={"n_steps": 256, "batch_size": 64, "n_epochs": 4},
            space={"learning_rate": {"type": "choice", "values": [3e-3, 2e-8, 1e-8]}},
            sampler={"kind": "grid", "seed": 1},
            objective={"eval_every": 1024, "eval_episodes": 3, "deterministic": False},
            pruner={"kind": "median", "n_startup_trials": 1, "n_warmup_steps": 1500},
            backend={"kind": backend},
        )
    )
    run_sweep(spec, Console(file=io.StringIO()), workers=1)
    client, experiment, study = stores(workdir, name)
    good, *useless = study.get_trials()
    assert good.params["learning_rate"] == 3e-3 and good.state.name == "COMPLETE"  # the grid order relied on
    assert sorted(good.intermediate_values) == list(range(1024, total, 1024))
    for trial in useless:
        assert trial.state.name == "PRUNED" and trial.user_attrs["rlsweep.outcome"] == "pruned", trial.user_attrs
        # pruned at the first evaluation past the warm-up (which spared 1024) where its best value so
        # far (Optuna's median pruner reads that) is behind the good trial's (the median of one
        # finished trial), and told nothing after it: usually 2048, but 3 stochastic episodes can
        # put the good trial below a useless one there (seen once, under load)
        values, best = trial.intermediate_values, good.intermediate_values
        so_far = {step: max(v for at, v in values.items() if at <= step) for step in values}
        behind = [step for step in sorted(values) if step > 1500 and so_far[step] < best[step]]
        assert behind and sorted(values) == list(range(1024, behind[0] + 1, 1024)), (values, best)
        assert behind[0] <= 4096  # a useless rate is behind within a few evaluations
        assert trial.user_attrs["rlsweep.pruned"].startswith(f"pruned by the median pruner at step {behind[0]}")
    _, seed_runs = split_runs(client, experiment.experiment_id)
    stopped = [r for r in seed_runs if r.data.tags["rlsweep.trial"] != str(good.number)]
    assert len(stopped) == 4 and {r.data.tags["rlsweep.outcome"] for r in stopped} == {"skipped"}
    assert all(r.info.status == "KILLED" and "pruned by" in r.data.tags["rlsweep.cancelled"] for r in stopped)
    # stopped, not trained to the end: a local worker at its next update after the driver's
    # decision, Ray at the job's next batched report (at most a second apart, a few evaluations on a
    # loaded machine); the second seed of a pruned trial is stopped while queued
    last = total - 2048
    for run in stopped:
        history = client.get_metric_history(run.info.run_id, "eval/periodic_return")  # none if stopped queued
        assert max((m.step for m in history), default=0) <= last


def test_backend_section_is_checked(write_spec) -> None:
    from sweeps import spec as spec_module
    from sweeps.errors import SpecError

    for backend, where in (
        ({"kind": "local", "resources_per_trial": {"gpu": 0.5}}, "backend.resources_per_trial.gpu"),
        ({"kind": "local", "address": "auto"}, "backend.address"),
        ({"kind": "ray", "resources_per_trial": {"gpu": 1.5}}, "backend.resources_per_trial.gpu"),
        ({"kind": "ray", "address": "nowhere"}, "backend.address"),
        ({"kind": "slurm"}, "backend.kind"),
    ):
        with pytest.raises(SpecError) as info:
            spec_module.load(write_spec(tiny_spec("b", backend=backend)))
        assert where in str(info.value), (backend, str(info.value))
    ok = spec_module.load(
        write_spec(
            tiny_spec(
                "b",
                backend={
                    "kind": "ray",
                    "address": "ray://head:10001",
                    "resources_per_trial": {"cpu": 0.5, "gpu": 0.25},
                },
            )
        )
    )
    assert json.loads(json.dumps(ok.resolved()))["backend"]["resources_per_trial"] == {"cpu": 0.5, "gpu": 0.25}


@pytest.mark.slow
def test_auto_repair_runs_on_ray_within_the_sweeps_budget(workdir: Path, logical_gpu_ray) -> None:
    """stability.repair.auto on the Ray backend: the failing trial's repair attempt is Ray jobs like
    any trial's; a one-trial, one-seed sweep has room for that attempt but not for its confirmation."""
    import io

    from rich.console import Console

    from sweeps import spec as spec_module
    from sweeps.runner import run_sweep

    spec = spec_module.from_dict(
        tiny_spec(
            "repair_ray",
            env={"id": "sweeps.repro_envs:make_spiky_targets", "n_envs": 1},
            algo="A2C",
            total_timesteps=6000,
            seeds=[0],
            trials=1,
            space={},
            hyperparams={"n_steps": 5, "learning_rate": 0.1, "max_grad_norm": "off", "log_std_bounds": [-103, 88]},
            stability={"stop_on": ["nan_scale"], "repair": {"auto": True, "max_attempts": 2}},
            backend={"kind": "ray"},
        )
    )
    run_sweep(spec, Console(file=io.StringIO()), workers=1)
    study = optuna.load_study(study_name="repair_ray", storage=f"sqlite:///{workdir}/results/repair_ray/optuna.db")
    first, attempt = study.get_trials()
    assert first.user_attrs["rlsweep.verdict"] == "nan_scale"
    assert attempt.user_attrs["rlsweep.repair_of"] == 0 and attempt.user_attrs["rlsweep.repair_patch"] == {
        "log_std_bounds": [-5, 2]
    }
    runs = {r.info.run_name: r for r in _runs("repair_ray")}
    assert runs["trial-0-repair-1-seed-0"].data.tags["rlsweep.worker"]  # it ran on a Ray worker
    import yaml

    (item,) = yaml.safe_load((workdir / "results" / "repair_ray" / "repairs.yaml").read_text())["repairs"]
    assert item["status"] in ("budget", "failed") and item["attempts_used"] == 1, item


def test_a_constructor_that_fails_after_starting_ray_shows_its_error_and_stops_ray(workdir: Path, monkeypatch) -> None:
    """Tune refusing to start (after Ray is up and the channel exists, before Tune's thread) gives
    that error, not one from cleaning up, and the Ray instance the backend started is shut down."""
    from sweeps.backends import _ray as backend_module

    def refuse(*args, **kwargs):
        raise RuntimeError("tune refused to start (injected)")

    monkeypatch.setattr(backend_module.tune, "Tuner", refuse)
    if ray.is_initialized():  # the logical-GPU tests leave this process connected (noted, not yet fixed)
        ray.shutdown()
    with pytest.raises(RuntimeError, match="injected"):
        backend_module.RayBackend(backend_module.RaySettings(storage=workdir / "ray"), limit=1)
    assert not ray.is_initialized()
    assert _ray_left() == []


def test_a_null_address_starts_a_local_instance_whatever_ray_address_names(workdir: Path, monkeypatch) -> None:
    """`backend.address: null` starts an instance of the sweep's own, as the spec says: not the
    cluster RAY_ADDRESS names (nor one a `ray start` on this machine left behind), which a bare
    ray.init() would join, and then refuse the num_cpus it is given."""
    from sweeps.backends import _ray as backend_module

    if ray.is_initialized():
        ray.shutdown()
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")  # nothing listens there
    backend = backend_module.RayBackend(backend_module.RaySettings(storage=workdir / "ray"), limit=1)
    try:
        assert ray.is_initialized() and [n for n in ray.nodes() if n.get("Alive")]
    finally:
        backend.close()
    assert not ray.is_initialized()
    assert _ray_left() == []
