"""A generated day of lifecycle events, as Petrel's services export them, for `petrel bench etl`.

What happens in the day is `bench.etl_traffic`'s; this module writes it out. Each
line is what `libs.events.writer` writes (orjson's compact form, the common fields
first) in the exporter's layout, `<root>/dt=D/hour=HH/<service>-<pid>.jsonl`, by the
hour of its `ts`: events after midnight go to D+1's folder, and gateway events of D's
last 300 ms are written late, to D+1's (the writer flushes once a second).

Lines are formatted with plain string templates and written in chunks, so ten
million take about a minute. `cached_day` keeps a generated day in a folder named by
its size and seed: every run after the first reads the same files.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from bench.etl_traffic import GATEWAYS, HOUR_MS, PROCESSES, Traffic

GENERATOR_VERSION = 2
"""Part of the cache key: a change to what is generated must not reuse older files."""
DAY = date(2026, 11, 22)
BYTES_PER_LINE = 260
"""Somewhat above the average line, for the free-disk check."""

HOURLY = (2, 1.5, 1.2, 1, 1, 1.2, 2, 3, 4.5, 5.5, 6, 6.2, 6, 6, 6.3, 6.5, 6.2, 5.8, 5, 4.5, 4, 3.5, 3, 2.5)
"""The day's shape: relative traffic of each UTC hour."""


@dataclass(frozen=True, slots=True)
class GeneratedDay:
    events: Path
    """The events root (`<events>/dt=D/hour=HH/...`)."""
    day: date
    lines: int
    """Every line written, in D's folder and the late ones in D+1's, a batch line counted once per event (as the
    job's `lines_read` counts it)."""
    seconds: float
    """How long generating took (0 when the files were already there)."""


def cached_day(cache: Path, count: int, seed: int, *, day: date = DAY) -> GeneratedDay:
    """The day of about `count` lines for `seed` under `cache`, generated unless a complete one is there."""
    folder = cache / f"v{GENERATOR_VERSION}-{day.isoformat()}-n{count}-s{seed}"
    manifest = folder / "manifest.json"
    if manifest.exists():
        written = json.loads(manifest.read_text())
        return GeneratedDay(folder / "events", day, written["lines"], 0.0)
    shutil.rmtree(folder, ignore_errors=True)  # an interrupted generation
    folder.mkdir(parents=True)
    refuse_if_short_of_disk(folder, count * BYTES_PER_LINE)
    started = time.monotonic()
    lines = generate_day(folder / "events", day, count, seed)
    seconds = time.monotonic() - started
    manifest.write_text(json.dumps({"lines": lines, "count": count, "seed": seed, "seconds": seconds}) + "\n")
    return GeneratedDay(folder / "events", day, lines, seconds)


def refuse_if_short_of_disk(where: Path, needed: int) -> None:
    free = shutil.disk_usage(where).free
    if free < needed:
        raise SystemExit(
            f"not enough free disk under {where}: {needed / 1e9:.1f} GB needed, {free / 1e9:.1f} GB free "
            "(ask for fewer events with BENCH_ETL_EVENTS, or free some space)"
        )


def generate_day(root: Path, day: date, count: int, seed: int) -> int:
    """Write about `count` lines of `day` under `root`; how many were written."""
    files = DayFiles(root, day)
    traffic = Traffic(random.Random(seed), files.add, files.written)
    total = sum(HOURLY)
    for hour, weight in enumerate(HOURLY):
        traffic.hour(int(files.start_ms + hour * HOUR_MS), round(count * weight / total))
    traffic.calls.finish()
    files.flush()
    return files.lines


class DayFiles:
    """Lines by the file they go to (hour folder and process), written out every few hundred thousand."""

    def __init__(self, root: Path, day: date) -> None:
        self.root = root
        self.day = day
        self.start_ms = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)
        self.late_from = self.start_ms + 24 * HOUR_MS - 300
        self.buffers: defaultdict[tuple[int, int], list[str]] = defaultdict(list)
        self.buffered = 0
        self.lines = 0

    def add(self, ts: int, process: int, line: str, events: int = 1) -> None:
        slot = (ts - self.start_ms) // HOUR_MS
        if process in GATEWAYS and self.late_from <= ts < self.late_from + 300:
            slot += 1  # written after midnight, to the next day's file
        self.buffers[(slot, process)].append(line)
        self.buffered += events
        if self.buffered >= 500_000:
            self.flush()

    def written(self) -> int:
        """Events in the lines added (a batch line's count once per event)."""
        return self.lines + self.buffered

    def flush(self) -> None:
        for (slot, process), lines in self.buffers.items():
            moment = datetime(self.day.year, self.day.month, self.day.day) + timedelta(hours=slot)
            folder = self.root / f"dt={moment:%Y-%m-%d}" / f"hour={moment:%H}"
            folder.mkdir(parents=True, exist_ok=True)
            with (folder / f"{PROCESSES[process]}.jsonl").open("a") as out:
                out.write("\n".join(lines) + "\n")
        self.lines += self.buffered
        self.buffers.clear()
        self.buffered = 0


def main(argv: list[str] | None = None) -> None:
    """`python -m bench.etl_events CACHE COUNT SEED`: make sure the day is there; its GeneratedDay as JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.etl_events", description=main.__doc__)
    parser.add_argument("cache", type=Path)
    parser.add_argument("count", type=int)
    parser.add_argument("seed", type=int)
    args = parser.parse_args(argv)
    generated = cached_day(args.cache, args.count, args.seed)
    print(json.dumps({"events": str(generated.events), "lines": generated.lines, "seconds": generated.seconds}))


if __name__ == "__main__":
    main()
