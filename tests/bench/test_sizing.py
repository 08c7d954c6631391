"""The sizing scenario's arithmetic: CPU read from /proc per process, divided by the messages a load moved."""

import json
import os
from pathlib import Path

from bench.cluster import Cluster
from bench.scenarios.sizing import cpu_seconds, per_message


def cluster_of(tmp_path: Path, processes: dict[str, int]) -> Cluster:
    (tmp_path / "run").mkdir()
    listing = {"processes": [{"name": name, "pid": pid} for name, pid in processes.items()]}
    (tmp_path / "run" / "cluster.json").write_text(json.dumps(listing))
    return Cluster("http://127.0.0.1:1", tmp_path)


def test_cpu_is_read_per_named_process_and_a_gone_one_is_left_out(tmp_path: Path) -> None:
    cluster = cluster_of(tmp_path, {"gateway": os.getpid(), "broker-a": 2**22 + 12345})
    seen = cpu_seconds(cluster)
    assert list(seen) == ["gateway"]
    assert seen["gateway"] > 0  # this test process has run for a while


def test_a_message_costs_the_cpu_spent_over_the_messages_moved(tmp_path: Path) -> None:
    cluster = cluster_of(tmp_path, {"gateway": os.getpid()})

    def busy_load() -> int:
        deadline = cpu_seconds(cluster)["gateway"] + 0.2
        while cpu_seconds(cluster)["gateway"] < deadline:
            sum(range(10_000))
        return 1000

    costs = per_message(cluster, busy_load)
    assert set(costs) == {"gateway", "broker-a", "others"}
    assert 150 <= costs["gateway"] <= 400  # at least 0.2 s over 1,000 messages: 200 us each, give or take a tick
    assert costs["broker-a"] == 0.0
