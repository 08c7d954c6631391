"""`petrel bench memory`: memory by role after each round, and what the last round added per 100,000 messages."""

from __future__ import annotations

import os

from bench.scenarios.memory import anonymous_kib, memory_figures


def test_the_last_round_is_what_a_leak_shows_per_100000_messages() -> None:
    before = {"gateway": 70.0, "broker": 70.0}
    after = [
        {"gateway": 100.0, "broker": 150.0},
        {"gateway": 104.0, "broker": 220.0},
        {"gateway": 104.5, "broker": 230.0},
    ]

    found = {f.name: (f.ours, f.unit) for f in memory_figures(before, after, count=20_000)}

    assert found["anonymous memory, broker, after round 1"] == (150.0, "MB")
    assert found["anonymous memory, broker, after round 3"] == (230.0, "MB")
    assert found["memory the last round added, broker"] == (50.0, "MB per 100,000 msgs")  # 10 MB per 20,000
    assert found["memory the last round added, gateway"] == (2.5, "MB per 100,000 msgs")


def test_one_round_is_measured_against_the_start() -> None:
    found = {f.name: f.ours for f in memory_figures({"broker": 70.0}, [{"broker": 95.0}], count=100_000)}
    assert found["memory the last round added, broker"] == 25.0
    assert found["memory the last round added, gateway"] == 0.0


def test_a_processs_anonymous_memory_is_read_and_a_gone_one_is_none() -> None:
    mine = anonymous_kib(os.getpid())
    assert mine is not None
    assert mine > 1024  # this test process holds more than a MiB of heap
    assert anonymous_kib(2**22 + 12345) is None
