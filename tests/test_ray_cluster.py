"""A Ray cluster of two nodes on this machine (Ray's own cluster utilities: a head and a worker
node, one CPU each), a sweep run against its address, and the worker node killed mid-sweep."""

from __future__ import annotations

import contextlib
import io
import sqlite3
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from tests.helpers import split_runs, stores, tiny_spec  # noqa: E402

pytestmark = pytest.mark.slow


def test_seeds_spread_over_the_nodes_and_a_lost_node_s_seeds_run_again_on_the_other(workdir: Path) -> None:
    from rich.console import Console

    from sweeps import spec as spec_module
    from sweeps.runner import run_sweep

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    worker = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    killed: list[float] = []

    worker_id = worker.node_id[:12]  # as seed runs name their node: "IP/node id"
    seen: list[str] = []

    def kill_worker_node() -> None:
        """Once the worker node has finished a seed (its next one is then starting), kill it. The
        store is read with sqlite3, read-only: an MLflow client here could race the sweep's own
        tracker creating the store's tables."""
        db = workdir / "results" / "mlflow.db"
        finished = "SELECT t.value FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
        finished += "WHERE r.status = 'FINISHED' AND t.key = 'rlsweep.node'"
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as con:
                    nodes = [row[0] for row in con.execute(finished)]
            except sqlite3.Error as exc:  # not created yet, or busy: look again
                seen[:] = [repr(exc)]
                nodes = []
            if any(n.endswith(worker_id) for n in nodes) and len(nodes) < 4:
                time.sleep(1.5)
                cluster.remove_node(worker, allow_graceful=False)
                killed.append(time.monotonic())
                return
            time.sleep(0.5)

    spec = spec_module.from_dict(
        tiny_spec(
            "cluster",
            trials=6,
            seeds=1,
            total_timesteps=4096,
            backend={"kind": "ray", "address": cluster.address, "max_failures": 2},
        )
    )
    killer = threading.Thread(target=kill_worker_node, daemon=True)
    try:
        killer.start()
        run_sweep(spec, Console(file=io.StringIO()), workers=2)
        killer.join()
    finally:
        ray.shutdown()
        cluster.shutdown()
    client, experiment, study = stores(workdir, "cluster")
    assert killed, f"the worker node was never killed (the last error seen: {seen})"
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE"] * 6  # nothing lost
    trials, seeds = split_runs(client, experiment.experiment_id)
    assert sorted(r.info.run_name for r in seeds) == sorted(f"trial-{n}-seed-0" for n in range(6))  # none twice
    nodes = {r.data.tags["rlsweep.node"] for r in seeds}
    assert len({n.split("/")[1] for n in nodes}) == 2, nodes  # both nodes trained seeds
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
