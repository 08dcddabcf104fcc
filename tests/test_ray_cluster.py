"""A Ray cluster on this machine (Ray's own cluster utilities: a head and a worker node, one CPU
each), a sweep run against its address, the worker node killed mid-sweep and another node joining
through ``ray start``."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from tests.helpers import split_runs, stores, subprocess_env, tiny_spec  # noqa: E402

pytestmark = pytest.mark.slow


def test_seeds_spread_over_the_nodes_a_lost_node_s_seeds_run_again_and_a_joining_node_is_used(
    workdir: Path,
) -> None:
    """Two nodes train the first seeds; once the worker node has finished one and trains the next,
    a third node joins through ``ray start``, as an operator adds one, and the worker node is killed
    (its seed is retried); the jobs still to run are placed on the new node too."""
    from rich.console import Console

    from sweeps import spec as spec_module
    from sweeps.runner import run_sweep

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    worker = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    killed: list[float] = []
    joined: list[float] = []
    joiner: list[subprocess.Popen] = []
    logs: list[Any] = []

    head_id, worker_id = cluster.head_node.node_id[:12], worker.node_id[:12]  # seed runs name "IP/node id"
    seen: list[str] = []

    def seed_nodes() -> list[tuple[str, str]]:
        """(status, node) of the seed runs that name their node: a seed's run is tagged with it
        when the seed starts. The store is read with sqlite3, read-only: an MLflow client here
        could race the sweep's own tracker creating the store's tables."""
        db = workdir / "results" / "mlflow.db"
        query = "SELECT r.status, t.value FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
        query += "WHERE t.key = 'rlsweep.node'"
        try:
            with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as con:
                return [(row[0], row[1]) for row in con.execute(query)]
        except sqlite3.Error as exc:  # not created yet, or busy: look again
            seen[:] = [repr(exc)]
            return []

    def join_then_kill() -> None:
        """Once the worker node has finished a seed and holds a running one, start a new node (its
        own raylet, one CPU) that joins the cluster mid-sweep, and kill the worker node. (Killed on
        a timer after its first seed instead, it sometimes lay idle between two seeds, and nothing
        was lost to retry. A joining node that ran nothing, once in CI, was up within 3 s: Tune
        had handed the head's cached actor to every job, see ``reuse_actors`` in the Ray backend.)"""
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            on_worker = [status for status, node in seed_nodes() if node.endswith(worker_id)]
            if "FINISHED" in on_worker and "RUNNING" in on_worker:
                break
            time.sleep(0.5)
        else:
            return
        ray_cli = Path(sys.executable).with_name("ray")
        logs.append((workdir / "joiner.log").open("w"))  # what `ray start` said, for a failure's message
        command = [str(ray_cli), "start", f"--address={cluster.address}", "--num-cpus=1", "--block"]
        joiner.append(
            subprocess.Popen(
                command,
                env=subprocess_env(),
                stdout=logs[-1],
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its raylet and workers share its process group: ended together
            )
        )
        joined.append(time.monotonic())
        cluster.remove_node(worker, allow_graceful=False)
        killed.append(time.monotonic())

    spec = spec_module.from_dict(
        tiny_spec(
            "cluster",
            # enough seeds left after the join for it to count: a joining node needs a while to
            # start, pass the version check and start an actor, while the head's reused actor
            # finishes a seed every few seconds (with 12 trials the sweep often ended first)
            trials=24,
            seeds=1,
            total_timesteps=1024,  # a few seconds a seed: 4096 cost a minute more of both cores
            backend={"kind": "ray", "address": cluster.address, "max_failures": 2},
        )
    )
    operator = threading.Thread(target=join_then_kill, daemon=True)
    try:
        operator.start()
        run_sweep(spec, Console(file=io.StringIO()), workers=2)
        operator.join()
    finally:
        ray.shutdown()
        for process in joiner:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        for log in logs:
            log.close()
        cluster.shutdown()
    client, experiment, study = stores(workdir, "cluster")
    assert killed, f"the worker node was never killed (the last error seen: {seen})"
    assert joined, "no node was started to join the cluster"
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE"] * 24  # nothing lost
    trials, seeds = split_runs(client, experiment.experiment_id)
    assert sorted(r.info.run_name for r in seeds) == sorted(f"trial-{n}-seed-0" for n in range(24))  # none twice
    node_of = {r.info.run_name: r.data.tags["rlsweep.node"].split("/")[1] for r in seeds}
    assert {head_id, worker_id} <= set(node_of.values()), node_of  # both first nodes trained seeds
    newcomers = [r for r in seeds if node_of[r.info.run_name] not in (head_id, worker_id)]
    assert newcomers, (
        f"the node that joined mid-sweep ran nothing: {node_of}; `ray start` said: "
        + (workdir / "joiner.log").read_text()[-2000:]
    )
    assert len({node_of[r.info.run_name] for r in newcomers}) == 1  # the one that joined, after its start
    retried = [r for r in seeds if r.data.tags.get("rlsweep.attempts") == "2"]
    assert retried and all(r.info.status == "FINISHED" for r in seeds)
    assert all(
        "died" in r.data.tags["rlsweep.retried_after"] or "failed" in r.data.tags["rlsweep.retried_after"]
        for r in retried
    )


def test_a_node_with_other_versions_is_named_and_refused() -> None:
    from sweeps.backends._ray import version_mismatches

    mine = {"rlsweep": "0.1.0", "stable-baselines3": "2.9.0"}
    nodes = [mine | {"node": "10.0.0.1"}, {"rlsweep": "0.1.0", "stable-baselines3": "2.8.1", "node": "10.0.0.2"}]
    assert version_mismatches(mine, nodes) == ["node 10.0.0.2 has stable-baselines3 2.8.1 (driver: 2.9.0)"]
    assert version_mismatches(mine, [mine | {"node": "a"}]) == []
