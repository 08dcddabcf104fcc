"""The GPU check: run on a machine with an NVIDIA GPU (``tests/gpu/check.sh``), in at most ~8 minutes.

PPO on Pendulum with a 256x256 MLP, as sweeps of N trials x 1 seed on the local backend with
``backend.gpus: [0]`` and ``jobs_per_gpu: N`` (N = 1, 2, 4, 8), then on Ray with ``gpu: 0.25`` per
trial where Ray is installed. Asserts that every seed trained on ``cuda`` (its MLflow tag
``rlsweep.device``) and writes the throughput, env steps per second summed over the jobs, to
``results/benchmarks/gpu.md``, with each row's ratio to N = 1 measured in the same run.

    python tests/gpu/check.py [--steps 20000] [--jobs 1,2,4,8] [--allow-cpu]

``--allow-cpu`` runs the same script where no GPU is (workers told no GPU, trials on the CPU): a
smoke test of the script itself, whose figures say nothing about GPUs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def spec(name: str, jobs: int, steps: int, backend: dict) -> dict:
    return {
        "name": name,
        "env": {"id": "Pendulum-v1", "n_envs": 8},
        "algo": "PPO",
        "total_timesteps": steps,
        "hyperparams": {
            "n_steps": 256,
            "batch_size": 256,
            "n_epochs": 4,
            "policy_kwargs": {"net_arch": [256, 256]},
        },
        "space": {"learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-3}},
        "seeds": 1,
        "trials": jobs,
        "workers": jobs,
        "sampler": {"kind": "random", "seed": 0},
        "objective": {"eval_episodes": 2},
        "backend": backend,
    }


def run(folder: Path, doc: dict) -> tuple[float, list[str]]:
    """Wall seconds of ``rlsweep run``, and the device each seed trained on."""
    from mlflow.tracking import MlflowClient

    (folder / f"{doc['name']}.yaml").write_text(yaml.safe_dump(doc))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "sweeps", "run", f"{doc['name']}.yaml"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{doc['name']} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'results' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(doc["name"])
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`rlsweep.seed` != ''")
    return wall, [r.data.tags.get("rlsweep.device", "?") for r in runs]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--jobs", default="1,2,4,8")
    parser.add_argument("--allow-cpu", action="store_true")
    args = parser.parse_args()
    import torch

    gpu = torch.cuda.is_available()
    if not gpu and not args.allow_cpu:
        print("no CUDA GPU here: nothing to check (pass --allow-cpu for a smoke test of this script)")
        raise SystemExit(77)
    want = "cuda" if gpu else "cpu"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for jobs in (int(j) for j in args.jobs.split(",")):
            backend = {"gpus": [0], "jobs_per_gpu": jobs} if gpu else {}
            wall, devices = run(folder, spec(f"gpu_local_{jobs}", jobs, args.steps, backend))
            assert devices == [want] * jobs, f"local x{jobs}: seeds trained on {devices}, not {want}"
            rows.append(("local", jobs, wall, jobs * args.steps / wall))
        try:
            import ray  # noqa: F401

            has_ray = True
        except ImportError:
            has_ray = False
        if has_ray and gpu:
            jobs = 4
            backend = {"kind": "ray", "resources_per_trial": {"cpu": 1, "gpu": 0.25}}
            wall, devices = run(folder, spec("gpu_ray_4", jobs, args.steps, backend))
            assert devices == [want] * jobs, f"ray x{jobs}: seeds trained on {devices}, not {want}"
            rows.append(("ray gpu 0.25", jobs, wall, jobs * args.steps / wall))
    base = rows[0][3]
    name = torch.cuda.get_device_name(0) if gpu else "no GPU (smoke test on the CPU)"
    lines = [
        f"# GPU check: PPO on Pendulum, 256x256 MLP, {args.steps} steps per job, on {name}",
        "",
        f"Every seed trained on `{want}` (MLflow tag rlsweep.device). Throughput = env steps per second",
        "summed over the jobs that ran at once; the ratio is to one job on the local backend, same run.",
        "",
        "| backend | jobs at once | wall s | env steps/s | ratio to 1 job |",
        "| --- | --- | --- | --- | --- |",
        *[f"| {b} | {j} | {w:.1f} | {r:.0f} | {r / base:.2f} |" for b, j, w, r in rows],
    ]
    out = REPO / "results" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    (out / ("gpu.md" if gpu else "gpu_smoke_cpu.md")).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
