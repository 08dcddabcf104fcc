"""Ray backend against local workers, on this machine's CPUs (``make bench`` runs it).

1. Whole commands: ``rlsweep run ray.yaml --backend local`` and ``--backend ray`` (a local Ray
   instance started and stopped by the command), alternated ``repeat`` times; wall-time ratio.
2. Per-job overhead after warm-up, from the backends' own events: for every job after the first
   wave, (its end - its submission, made as soon as a slot freed) - (its train + eval seconds); and
   the median train + eval seconds of a job on each backend (the same 4096-step job).

    python tests/bench/ray_compare.py REPEAT   -> one JSON line on stdout
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "tests" / "bench" / "ray.yaml"


def whole_command(kind: str) -> float:
    cwd = Path(tempfile.mkdtemp(prefix="rlsweep-bench-ray-"))
    try:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "sweeps", "run", str(SPEC), "--backend", kind, "--workers", "2"],
            cwd=cwd,
            capture_output=True,
            text=True,
            env=dict(os.environ, COLUMNS="200"),
        )
        if done.returncode != 0:
            raise RuntimeError(done.stdout[-3000:] + done.stderr[-3000:])
        return round(time.perf_counter() - started, 2)
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


def job_overheads(kind: str, n_jobs: int = 12) -> dict:
    from sweeps import backends, configs
    from sweeps import spec as spec_module
    from sweeps.spec import BackendSpec

    spec = spec_module.from_dict(spec_module.load(SPEC).model_dump(mode="json") | {"total_timesteps": 4096})
    jobs = []
    for number in range(n_jobs):
        jobs += configs.trial_configs(
            spec, number, {"learning_rate": 1e-3, "gamma": 0.99}, [0], configs.stability_settings(spec)
        )[1]
    folder = Path(tempfile.mkdtemp(prefix="rlsweep-bench-ray-"))
    made = time.perf_counter()
    backend = backends.make(BackendSpec(kind=kind), 2, warm_imports=("stable_baselines3",), storage=folder)
    startup = time.perf_counter() - made
    submitted, ended, worker, busy = {}, {}, {}, {}
    pending, running = list(jobs), 0
    try:
        while pending or running:
            while pending and running < backend.capacity:
                job = pending.pop(0)
                backend.submit(job)
                submitted[job.key] = time.perf_counter()
                running += 1
            for event in backend.poll(0.1):
                now = time.perf_counter()
                if event.kind == "started":
                    worker[event.key] = str(event.payload.pid)
                elif event.kind in ("finished", "failed", "cancelled"):
                    if event.kind != "finished":
                        raise RuntimeError(f"job {event.key}: {event.payload}")
                    ended[event.key] = now
                    busy[event.key] = event.payload.train_seconds + event.payload.eval_seconds
                    running -= 1
        closing = time.perf_counter()
    finally:
        backend.close()
        shutil.rmtree(folder, ignore_errors=True)
    shutdown = time.perf_counter() - closing
    # Every job after the first wave (whose imports a warm worker has already paid, or, where each
    # job gets a fresh process as on Ray, does not): the time from its submission, made as soon as
    # a slot freed, to its end, less its training and evaluation.
    first_wave = sorted(submitted, key=submitted.get)[: backend.capacity]
    overheads = [ended[k] - submitted[k] - busy[k] for k in submitted if k not in first_wave]
    return {
        "startup_s": round(startup, 2),
        "shutdown_s": round(shutdown, 2),
        "jobs": n_jobs,
        "overhead_median_s": round(statistics.median(overheads), 3),
        "overhead_max_s": round(max(overheads), 3),
        "workers": len(set(worker.values())),
        "train_eval_s_per_job": round(statistics.median(busy.values()), 3),
    }


def main() -> None:
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    per_job = {kind: job_overheads(kind) for kind in ("local", "ray")}  # the quick part first
    local, ray = [], []
    for _ in range(repeat):
        local.append(whole_command("local"))
        ray.append(whole_command("ray"))
    # what the gap is made of: fixed costs, and training itself running slower beside Ray's processes
    slower = per_job["ray"]["train_eval_s_per_job"] / per_job["local"]["train_eval_s_per_job"]
    print(
        json.dumps(
            {
                "sweep": "8 configs x 2 seeds x 20k steps, PPO CartPole, 2 at once",
                "local_s": local,
                "ray_s": ray,
                "ratio_ray_over_local": round(statistics.median(ray) / statistics.median(local), 3),
                "target_ratio": "<= 1.15",
                "per_job": per_job,
                "train_eval_ratio_ray_over_local": round(slower, 3),
                "target_overhead": "<= 1 s after warm-up",
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
