"""The lifecycle events a live cluster's services exported under `<data>/export/events`, read back by a test.

The services buffer their events and write them about every second, so a test waits
for the ones it needs (`tests.support.waiting`) before it reads a figure from them.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from libs.events.contract import events_of


def exported_events(data_dir: Path) -> list[dict[str, Any]]:
    """Every event written so far, by every service, in no particular order (a line being written is skipped;
    a batch line gives each of its events)."""
    found = []
    for path in (data_dir / "export" / "events").rglob("*.jsonl"):
        for text in path.read_text().splitlines():
            try:
                found.extend(events_of(json.loads(text)))
            except json.JSONDecodeError:  # its writer is between two writes of the line
                continue
    return found


def missing_events(data_dir: Path, wanted: Counter[tuple[str, str]]) -> Counter[tuple[str, str]]:
    """Of `wanted` ((event, message_id) -> at least how many), what is not written yet."""
    written = Counter((e["event"], e.get("message_id")) for e in exported_events(data_dir))
    return Counter({key: count - written[key] for key, count in wanted.items() if written[key] < count})
