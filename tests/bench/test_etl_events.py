"""The generated day `petrel bench etl` reads: contract-true lines in the exporter's layout, made once per seed."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from bench.etl_events import DAY, cached_day
from libs.events.contract import BATCH, COMMON_FIELDS, EVENTS, events_of


def _lines(events: Path) -> list[tuple[Path, str]]:
    return [(path, line) for path in sorted(events.rglob("*.jsonl")) for line in path.read_text().splitlines()]


def test_every_line_but_the_corrupt_few_is_an_event_of_the_contract_in_the_folder_of_its_hour(tmp_path: Path) -> None:
    day = cached_day(tmp_path, 30_000, seed=5)
    kinds: Counter[str] = Counter()
    batched: Counter[str] = Counter()
    corrupt = 0
    for path, text in _lines(day.events):
        try:
            line = json.loads(text)
        except json.JSONDecodeError:
            corrupt += 1
            continue
        if BATCH in line:
            batched[line["event"]] += 1
            assert len(line[BATCH]) > 1, text  # a call of one message is a plain line
        for event in events_of(line):
            spec = EVENTS.get(event["event"])
            if spec is None or not isinstance(event["ts"], int) or spec.required - event.keys():
                corrupt += 1
                continue
            assert event.keys() <= spec.fields | set(COMMON_FIELDS), text
            moment = datetime.fromtimestamp(event["ts"] / 1000, tz=UTC)
            assert (path.parent.parent.name, path.parent.name) == (f"dt={moment:%Y-%m-%d}", f"hour={moment:%H}"), text
            assert path.name.startswith(event["service"] + "-"), text
            kinds[event["event"]] += 1

    assert day.lines == sum(kinds.values()) + corrupt >= 30_000
    assert 1 <= corrupt <= 5
    expected = {"sent", "stored", "delivered", "acked", "nacked", "retried", "dead_lettered", "delay_scheduled"}
    expected |= {"delay_fired", "delay_cancelled", "transaction_half", "transaction_commit", "transaction_rollback"}
    expected |= {"transaction_check", "transaction_abandoned", "delay_rolled"}
    assert expected <= kinds.keys()
    assert batched.keys() == {"sent", "stored", "delivered", "acked"}, "a line per call, as the services write them"


def test_a_day_is_generated_once_per_size_and_seed(tmp_path: Path) -> None:
    first = cached_day(tmp_path, 2_000, seed=1)
    again = cached_day(tmp_path, 2_000, seed=1)
    other = cached_day(tmp_path, 2_000, seed=2)

    assert (again.events, again.lines, again.seconds) == (first.events, first.lines, 0.0)
    assert other.events != first.events
    assert first.events.parent.name == f"v2-{DAY.isoformat()}-n2000-s1"
