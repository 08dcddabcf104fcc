"""A Ray cluster on this machine (Ray's own cluster utilities: a head and a worker node, one CPU
each), a sweep run against its address, the worker node joining mid-sweep and then killed."""

from __future__ import annotations

import contextlib
import io
import itertools
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from tests.helpers import split_runs, stores, tiny_spec  # noqa: E402

pytestmark = pytest.mark.slow


def test_a_node_that_joins_mid_sweep_is_used_and_a_lost_node_s_seeds_run_again(workdir: Path) -> None:
    from rich.console import Console

    from sweeps import spec as spec_module
    from sweeps.runner import run_sweep

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.wait_for_nodes()
    joined: list[Any] = []
    killed: list[float] = []
    seen: list[str] = []

    def finished_on() -> list[str]:
        """The nodes of the finished seed runs. The store is read with sqlite3, read-only: an
        MLflow client here could race the sweep's own tracker creating the store's tables."""
        db = workdir / "results" / "mlflow.db"
        query = "SELECT t.value FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
        query += "WHERE r.status = 'FINISHED' AND t.key = 'rlsweep.node'"
        try:
            with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as con:
                return [row[0] for row in con.execute(query)]
        except sqlite3.Error as exc:  # not created yet, or busy: look again
            seen[:] = [repr(exc)]
            return []

    def join_then_kill() -> None:
        """A worker node joins once the head (one CPU, so one seed at a time) has finished a seed;
        once the joined node has finished a seed too (its next one is then starting), it is killed."""
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            nodes = finished_on()
            if not joined and nodes:
                joined.append(cluster.add_node(num_cpus=1))
                cluster.wait_for_nodes()
            elif joined and any(n.endswith(joined[0].node_id[:12]) for n in nodes) and len(nodes) < 7:
                time.sleep(1.5)
                cluster.remove_node(joined[0], allow_graceful=False)
                killed.append(time.monotonic())
                return
            time.sleep(0.5)

    spec = spec_module.from_dict(
        tiny_spec(
            "cluster",
            trials=8,
            seeds=1,
            total_timesteps=4096,
            backend={"kind": "ray", "address": cluster.address, "max_failures": 2},
        )
    )
    nodes_thread = threading.Thread(target=join_then_kill, daemon=True)
    try:
        nodes_thread.start()
        run_sweep(spec, Console(file=io.StringIO()), workers=2)
        nodes_thread.join()
    finally:
        ray.shutdown()
        cluster.shutdown()
    client, experiment, study = stores(workdir, "cluster")
    assert joined and killed, f"the worker node never joined or was never killed (the last error seen: {seen})"
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE"] * 8  # nothing lost
    trials, seeds = split_runs(client, experiment.experiment_id)
    assert sorted(r.info.run_name for r in seeds) == sorted(f"trial-{n}-seed-0" for n in range(8))  # none twice
    nodes = {r.data.tags["rlsweep.node"] for r in seeds}
    assert len({n.split("/")[1] for n in nodes}) == 2, nodes  # the joined node trained seeds
    # Two seeds ran at once: only possible once the capacity grew with the joined node (the head
    # has one CPU). Retried seeds are left out: their run spans both attempts.
    once = sorted((r.info.start_time, r.info.end_time) for r in seeds if "rlsweep.attempts" not in r.data.tags)
    assert any(later[0] < earlier[1] for earlier, later in itertools.pairwise(once)), once
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
