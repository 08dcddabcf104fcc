"""The GPU check: run on a machine with an NVIDIA GPU (``tests/gpu/check.sh``), in at most ~8 minutes.

PPO on Pendulum with a 256x256 MLP, as sweeps of N trials x 1 seed on the local backend with
``backend.gpus: [0]`` and ``jobs_per_gpu: N`` (N = 1, 2, 4, 8), each N > 1 twice: with the sweep's
own CUDA MPS daemon (``backend.mps: auto``, the default) and without it (``off``); then on Ray with
``gpu: 0.25`` per trial where Ray is installed. Asserts that every seed trained on ``cuda`` (its MLflow tag
``rlsweep.device``) and writes ``results/benchmarks/gpu.md`` after each row, so that a run cut
short keeps the rows it finished: the throughput, env steps per second summed over the jobs, with
each row's ratio to N = 1 measured in the same run, and the GPU memory per job, as torch's
allocator held it (the seed run's tag ``rlsweep.gpu_peak_mib``) and as ``nvidia-smi`` saw each
worker process, its CUDA context included, where it can list them.

    python tests/gpu/check.py [--steps 20000] [--jobs 1,2,4,8] [--mps auto,off] [--allow-cpu] [--copy-to DIR]

``--allow-cpu`` runs the same script where no GPU is (workers told no GPU, trials on the CPU): a
smoke test of the script itself, whose figures say nothing about GPUs.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

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


class GpuMemory:
    """Polls ``nvidia-smi`` for the memory each process holds on the GPU, keeping each one's peak."""

    def __init__(self) -> None:
        self.peak: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> GpuMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        query = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
        while not self._stop.wait(0.5):
            try:
                lines = subprocess.run(query, capture_output=True, text=True, timeout=10).stdout.splitlines()
            except (OSError, subprocess.SubprocessError):
                return  # no nvidia-smi: the column reads n/a
            for line in lines:
                pid, _, used = (part.strip() for part in line.partition(","))
                try:
                    self.peak[pid] = max(self.peak.get(pid, 0.0), float(used))
                except ValueError:  # [N/A] where the driver will not say
                    continue


def run(folder: Path, doc: dict) -> dict[str, Any]:
    """One ``rlsweep run``: its wall seconds; per seed its device, training seconds and torch's peak
    GPU memory; and the peak of each process nvidia-smi saw meanwhile."""
    from mlflow.tracking import MlflowClient

    (folder / f"{doc['name']}.yaml").write_text(yaml.safe_dump(doc))
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    started = time.monotonic()
    with GpuMemory() as memory:
        done = subprocess.run(
            [sys.executable, "-m", "sweeps", "run", f"{doc['name']}.yaml"],
            cwd=folder,
            env=dict(os.environ, PYTHONPATH=path),
            capture_output=True,
            text=True,
        )
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{doc['name']} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'results' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(doc["name"])
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`rlsweep.seed` != ''")
    seeds = [
        {
            "device": r.data.tags.get("rlsweep.device", "?"),
            "gpu_mib": float(r.data.tags.get("rlsweep.gpu_peak_mib", "nan")),
            "train_s": r.data.metrics.get("time/train_seconds", math.nan),
            "mps": r.data.tags.get("rlsweep.cuda_mps", "no"),
        }
        for r in runs
    ]
    return {"wall": wall, "seeds": seeds, "smi_mib": max(memory.peak.values(), default=math.nan)}


def measured(backend: str, jobs: int, steps: int, ran: dict[str, Any]) -> dict[str, Any]:
    seeds = ran["seeds"]
    return {
        "backend": backend,
        "jobs": jobs,
        "wall": ran["wall"],
        # each seed's steps over its own training seconds, summed: the rate while all trained at once
        "train_rate": sum(steps / s["train_s"] for s in seeds),
        "command_rate": jobs * steps / ran["wall"],
        "gpu_mib": sum(s["gpu_mib"] for s in seeds) / len(seeds),
        "smi_mib": ran["smi_mib"],
    }


def _mib(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.0f}"


def table(rows: list[dict[str, Any]], steps: int, name: str, want: str) -> str:
    base = rows[0]
    lines = [
        f"# GPU check: PPO on Pendulum (8 envs), 256x256 MLP, {steps} steps per job, on {name}",
        "",
        f"Every seed trained on `{want}` (MLflow tag rlsweep.device). Training rate: each seed's env steps",
        "over its own training seconds, summed over the jobs that ran at once. Command rate: all jobs'",
        "steps over the whole `rlsweep run`, start-up, evaluation and stores included. Ratios are to one",
        "job on the local backend in the same run. GPU MiB per job: torch's peak reserved memory (tag",
        "rlsweep.gpu_peak_mib, mean over the jobs), and the largest worker process as nvidia-smi saw it",
        "(its CUDA context included; n/a where nvidia-smi could not list processes). mps auto: the",
        "workers share the GPU through the sweep's own CUDA MPS daemon; mps off: they take turns on it.",
        "",
        "| backend | jobs at once | wall s | training env steps/s | ratio | command env steps/s | ratio "
        "| torch MiB/job | nvidia-smi MiB/process |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['jobs']} | {r['wall']:.1f} | {r['train_rate']:.0f} | "
            f"{r['train_rate'] / base['train_rate']:.2f} | {r['command_rate']:.0f} | "
            f"{r['command_rate'] / base['command_rate']:.2f} | {_mib(r['gpu_mib'])} | {_mib(r['smi_mib'])} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--jobs", default="1,2,4,8")
    parser.add_argument("--mps", default="auto,off", help="backend.mps settings to run each N > 1 with")
    parser.add_argument("--allow-cpu", action="store_true")
    parser.add_argument("--copy-to", help="also write the table into this folder")
    args = parser.parse_args()
    import torch

    gpu = torch.cuda.is_available()
    if not gpu and not args.allow_cpu:
        print("no CUDA GPU here: nothing to check (pass --allow-cpu for a smoke test of this script)")
        raise SystemExit(77)
    want = "cuda" if gpu else "cpu"
    name = torch.cuda.get_device_name(0) if gpu else "no GPU (smoke test on the CPU)"
    targets = [REPO / "results" / "benchmarks"] + ([Path(args.copy_to)] if args.copy_to else [])
    filename = "gpu.md" if gpu else "gpu_smoke_cpu.md"
    rows: list[dict[str, Any]] = []

    def record(backend: str, jobs: int, ran: dict[str, Any], mps: str = "no") -> None:
        devices = [s["device"] for s in ran["seeds"]]
        assert devices == [want] * jobs, f"{backend} x{jobs}: seeds trained on {devices}, not {want}"
        told = [s["mps"] for s in ran["seeds"]]
        assert told == [mps] * jobs, f"{backend} x{jobs}: workers told of an MPS daemon: {told}, not {mps}"
        rows.append(measured(backend, jobs, args.steps, ran))
        text = table(rows, args.steps, name, want)
        for folder in targets:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / filename).write_text(text)
        print(text, flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for jobs in (int(j) for j in args.jobs.split(",")):
            for mode in args.mps.split(",") if jobs > 1 and gpu else ["off"]:
                backend = {"gpus": [0], "jobs_per_gpu": jobs, "mps": mode} if gpu else {}
                name = f"gpu_local_{jobs}_{mode}"
                # auto starts a daemon where it can: the workers must have been told of it
                told = "told" if mode != "off" and gpu and jobs > 1 else "no"
                label = "local" if jobs == 1 else f"local, mps {mode}"
                record(label, jobs, run(folder, spec(name, jobs, args.steps, backend)), told)
        try:
            import ray  # noqa: F401

            has_ray = True
        except ImportError:
            has_ray = False
        if has_ray and gpu:
            backend = {"kind": "ray", "resources_per_trial": {"cpu": 1, "gpu": 0.25}}
            record("ray gpu 0.25", 4, run(folder, spec("gpu_ray_4", 4, args.steps, backend)))
        elif gpu:
            print("Ray is not installed here: the Ray row was not run", flush=True)


if __name__ == "__main__":
    main()
