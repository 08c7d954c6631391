"""`petrel bench replication`: its figures and aims, the slave's lag as the master tells it, and one replicated
cluster measured at a tiny size (the lag sampled under a load, first reads from the slave)."""

from __future__ import annotations

import pytest

from bench.replication_lag import LagSample, LagSummary, slave_lag
from bench.scenarios.gateway import Timing
from bench.scenarios.replication import Measured, Replicated, figures, replicated
from bench.slave_reads import FirstReads

LAG = LagSummary(
    samples=160,
    p50_bytes=1_000,
    p99_bytes=2_000_000,
    max_bytes=3_000_000,
    p50_ms=5,
    p99_ms=40,
    max_ms=90,
    out_of_sync=0,
    failures=0,
    ms_unknown=0,
)
READS = FirstReads(slave_ms=[float(n) for n in range(1, 101)], master_ms=[n / 2 for n in range(1, 101)])
MEASURED = Measured(
    no_replica=20_000,
    async_master=Replicated(batches=18_000, lag=LAG, reads=READS, failover_s=4.0),
    sync_master=Replicated(batches=8_000, lag=LAG, reads=READS, failover_s=12.0),
)


def test_async_and_sync_sends_are_judged_against_no_replica_in_the_same_run_with_the_issues_aims() -> None:
    asynchronous, synchronous = figures(MEASURED)[:2]

    assert (asynchronous.name, asynchronous.target_ratio, asynchronous.ratio) == (
        "replication ASYNC + 1 slave: batches of 32",
        0.8,
        0.9,
    )
    assert (synchronous.name, synchronous.target_ratio, synchronous.ratio) == (
        "replication SYNC + 1 slave: batches of 32",
        0.5,
        0.4,
    )
    assert synchronous.verdict == "BELOW"
    assert asynchronous.reference == synchronous.reference == 20_000


def test_lag_p99_in_ms_and_bytes_and_first_reads_p50_p99_beside_the_masters_are_reported_for_both() -> None:
    named = {f.name: f for f in figures(MEASURED)[2:] if "failover" not in f.name}

    assert [(n, f.ours, f.unit) for n, f in named.items() if "lag" in n] == [
        ("replication ASYNC: slave lag p99", 40, "ms"),
        ("replication ASYNC: slave lag p99, bytes", 2_000_000, "bytes"),
        ("replication SYNC: slave lag p99", 40, "ms"),
        ("replication SYNC: slave lag p99, bytes", 2_000_000, "bytes"),
    ]
    p99 = named["replication SYNC: first read on slave p99"]
    assert (p99.ours, p99.reference, p99.reference_name) == (99.0, 49.5, "same read on the master, p99")
    assert not p99.higher_is_better
    assert named["replication ASYNC: first read on slave p50"].ours == 51.0  # the 51st of 1..100
    assert all(f.target_ratio is None for f in named.values())


def test_failover_time_is_judged_against_the_issues_10_s_aim() -> None:
    fast, slow = [f for f in figures(MEASURED) if "failover" in f.name]

    assert (fast.name, fast.ours, fast.unit, fast.reference) == (
        "replication ASYNC: failover, kill -9 to first send",
        4.0,
        "s",
        10.0,
    )
    assert (fast.verdict, slow.verdict) == ("meets", "BELOW")


def slave_entry(slave_id: int, lag_bytes: int, lag_ms: int | None, in_sync: bool) -> dict[str, object]:
    """A slave as GET /internal/replication lists it (libs.broker_api.replication.SlaveState)."""
    return {
        "slave_id": slave_id,
        "address": f"127.0.0.1:{10_000 + slave_id}",
        "acked_offset": 4096,
        "lag_bytes": lag_bytes,
        "lag_ms": lag_ms,
        "in_sync": in_sync,
        "heard_seconds_ago": 0.1,
    }


def test_a_slaves_lag_is_read_from_its_entry_in_the_masters_status() -> None:
    slaves = [slave_entry(1, 512, 7, in_sync=True), slave_entry(2, 521, None, in_sync=False)]
    status = {"role": "SYNC_MASTER", "commitlog_end": 4608, "slaves": slaves, "in_sync": [1]}

    assert slave_lag(status, 1) == LagSample(512, 7, True)
    assert slave_lag(status, 2) == LagSample(521, None, False)
    assert slave_lag(status, 3) is None
    assert slave_lag({"role": "ASYNC_MASTER", "slaves": []}, 1) is None


def test_the_lag_summary_leaves_unknown_ms_out_of_its_percentiles_and_counts_samples_out_of_sync() -> None:
    samples = [LagSample(n * 1000, n, in_sync=n % 25 != 0) for n in range(101)] + [LagSample(7, None, True)]

    lag = LagSummary.of(samples, failures=2)

    assert (lag.samples, lag.failures, lag.ms_unknown, lag.out_of_sync) == (102, 2, 1, 5)
    assert (lag.p50_ms, lag.p99_ms, lag.max_ms) == (50, 99, 100)
    assert (lag.p99_bytes, lag.max_bytes) == (99_000, 100_000)


def test_a_load_with_no_lag_sample_fails_rather_than_report_a_figure() -> None:
    with pytest.raises(RuntimeError, match=r"^no replication lag sample was taken \(3 failed\)$"):
        LagSummary.of([], failures=3)


@pytest.mark.e2e
@pytest.mark.timeout(180)  # 76 s with the CPU at a quarter (a cgroup quota of half a core of two): twice that
def test_a_sync_master_with_a_slave_is_measured_lag_sampled_under_load_and_every_read_found_on_the_slave() -> None:
    measured = replicated(Timing(warmup=0.2, seconds=0.6), reads=3, async_replication=False)

    assert measured.batches > 0
    assert measured.lag.samples > 0, "the master's replication status was never sampled during the load"
    assert (measured.lag.failures, measured.lag.out_of_sync) == (0, 0)
    assert len(measured.reads.slave_ms) == len(measured.reads.master_ms) == 3
    assert all(ms > 0 for ms in measured.reads.slave_ms + measured.reads.master_ms)
