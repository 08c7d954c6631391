"""The ConsumeQueue half of `petrel store check` (see libs.store.tools.check), read-only.

Each queue's files must be named by byte offset and hold whole 20-byte units with
no gaps. Each unit at or above the CommitLog's minimum (units below it point at
records retention deleted) must point at a record of its queue with the unit's
size, its index as queue offset, and its tags code. And every record of the queue
from its first such unit on must be pointed at: the CommitLog walk counts them in
a `QueueTally`. After an unclean stop, units and records from the re-dispatch
offset on are left alone: recovery writes those units again.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from libs.codec import (
    FRAME_SIZE,
    QUARANTINE_MAGIC,
    RecordHead,
    crc_matches,
    peek_frame,
    peek_head,
    peek_offsets,
    record_size,
)
from libs.errors import CorruptRecord
from libs.message import Prop
from libs.names import SCHEDULE_TOPIC, TIMER_TOPIC
from libs.store.commitlog import segment_name
from libs.store.config import StoreConfig
from libs.store.consume_queue import UNIT, Unit
from libs.store.message_store import unit_code
from libs.store.tools.shared import (
    Findings,
    Kind,
    QueueFile,
    SegmentFile,
    SegmentMaps,
    queue_dirs,
    queue_files,
    read_units,
)

CHUNK_UNITS: Final = 512
DELETED_TOPIC: Final = "a deleted topic leaves its records to age out of the CommitLog"


class QueueTally:
    """One (topic, queue id) as the CommitLog walk sees it: its records matched with their units.

    From the queue's first live unit on, the walk hands `saw` every record of the queue in
    CommitLog order, and the unit at the record's queue offset must point at it. Units are read
    a chunk at a time, so a queue costs a few kilobytes however long it is.
    """

    def __init__(self, files: list[QueueFile], log_min: int, *, has_queue: bool = True) -> None:
        self.files = files
        self.has_queue = has_queue
        self.records = self.unreferenced = self.orphans = 0
        self.first_unreferenced = self.first_orphan = -1
        self.last: tuple[int, int, int] | None = None
        """(queue offset, physical offset, losses then) of the queue's record before, from `first_live` on."""
        self.matched: list[list[int]] = []
        """Runs [first, end) of queue offsets whose unit points at the record the walk saw."""
        self._starts = [f.first_unit for f in files]
        self._chunk_start, self._chunk = 0, b""
        first = (u[0] for f in files for u in read_units(f.path) if u[0] >= log_min)
        self.first_live = next(first, None)
        """The physical offset of the queue's first unit at or above the CommitLog's minimum."""

    def saw(self, n: int, physical: int, size: int, code: int) -> None:
        """A record of the queue at queue offset `n`, from its first live unit on."""
        self.records += 1
        if self._unit_at(n) == (physical, size, code):
            if self.matched and self.matched[-1][1] == n:
                self.matched[-1][1] = n + 1
            else:
                self.matched.append([n, n + 1])
        else:
            self.unreferenced += 1
            self.first_unreferenced = physical if self.first_unreferenced < 0 else self.first_unreferenced

    def orphan(self, physical: int) -> None:
        """A record before the queue's first live unit (or of a queue without one)."""
        self.orphans += 1
        self.first_orphan = physical if self.first_orphan < 0 else self.first_orphan

    def _unit_at(self, n: int) -> Unit | None:
        at = (n - self._chunk_start) * UNIT.size
        if not 0 <= at < len(self._chunk):
            self._read_chunk(n)
            at = 0
        return UNIT.unpack_from(self._chunk, at) if at + UNIT.size <= len(self._chunk) else None

    def _read_chunk(self, n: int) -> None:
        self._chunk_start, self._chunk = n, b""
        index = bisect.bisect_right(self._starts, n) - 1
        if index < 0:
            return
        queue_file = self.files[index]
        within = n - queue_file.first_unit
        count = min(CHUNK_UNITS, queue_file.size // UNIT.size - within)
        if count > 0:
            with queue_file.path.open("rb") as f:
                f.seek(within * UNIT.size)
                self._chunk = f.read(count * UNIT.size)


@dataclass(frozen=True, slots=True)
class LogFacts:
    """What the CommitLog walk found that the ConsumeQueue check needs."""

    segments: dict[int, SegmentFile]
    """By start offset."""
    segment_size: int
    log_min: int
    end: int
    redispatch_from: int | None


def queue_tallies(config: StoreConfig, log_min: int) -> dict[tuple[str, int], QueueTally]:
    """A tally for every queue on disk, for the CommitLog walk to fill."""
    return {(t, q): QueueTally(queue_files(directory), log_min) for t, q, directory in queue_dirs(config)}


def check_queues(
    config: StoreConfig, maps: SegmentMaps, facts: LogFacts, tallies: dict[tuple[str, int], QueueTally], f: Findings
) -> tuple[int, int]:
    """Check every ConsumeQueue after the CommitLog walk: (queues, units) checked."""
    queues = units = 0
    for topic, queue_id, directory in queue_dirs(config):
        if f.full:
            break
        tally = tallies.get((topic, queue_id)) or QueueTally(queue_files(directory), facts.log_min)
        check = _QueueCheck(topic, queue_id, maps, facts, f)
        check.files(tally.files)
        check.units(tally)
        check.settle(directory, tally)
        queues += 1
        units += sum(queue_file.size // UNIT.size for queue_file in tally.files)
    for (topic, queue_id), tally in sorted(tallies.items()):
        if not tally.has_queue and tally.orphans:
            detail = f"no ConsumeQueue, but the CommitLog holds {tally.orphans} records of {topic}/{queue_id}"
            f.add(Kind.CQ_COUNT, f"consumequeue/{topic}/{queue_id}", None, detail, warning=DELETED_TOPIC)
    return queues, units


class _QueueCheck:
    def __init__(self, topic: str, queue_id: int, maps: SegmentMaps, facts: LogFacts, findings: Findings) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.maps = maps
        self.facts = facts
        self.findings = findings
        self.previous = -1
        self.bad = 0
        self.first_bad = -1

    def files(self, files: list[QueueFile]) -> None:
        # Every file but the last holds units_per_file units, a number kept nowhere but in their size.
        full = files[0].size // UNIT.size if len(files) > 1 else None
        previous_end: int | None = None
        for number, queue_file in enumerate(files, 1):
            path, size, add = queue_file.path, queue_file.size, self.findings.add
            units = size // UNIT.size
            if queue_file.start % UNIT.size:
                add(Kind.CQ_FILE, path, None, f"the name is not a multiple of {UNIT.size}, the unit size")
            if size % UNIT.size:
                add(Kind.CQ_FILE, path, None, f"{size} bytes: a partial unit of {size % UNIT.size} bytes at the end")
            if full is not None and (units > full or (number < len(files) and units != full)):
                add(Kind.CQ_FILE, path, None, f"{units} units, but the first file holds {full} and is full")
            if previous_end is not None and queue_file.first_unit != previous_end:
                detail = f"starts at unit {queue_file.first_unit}, but the file before it ends at unit {previous_end}"
                add(Kind.CQ_FILE, path, None, detail)
            previous_end = queue_file.first_unit + units

    def units(self, tally: QueueTally) -> None:
        """Every unit the walk did not match with its record: what is wrong with it, if anything."""
        runs = sorted(tally.matched)
        run = 0
        for queue_file in tally.files:
            for index, unit in enumerate(read_units(queue_file.path)):
                n = queue_file.first_unit + index
                while run < len(runs) and runs[run][1] <= n:
                    run += 1
                if run < len(runs) and runs[run][0] <= n:
                    self.previous = unit[0]
                else:
                    self.unit(queue_file.path, n, unit)

    def unit(self, path: Path, n: int, unit: Unit) -> None:
        physical, size, code = unit
        problem = self._problem(n, physical, size, code)
        self.previous = physical
        if problem is not None:
            self.bad += 1
            if self.bad == 1:
                self.first_bad = n
                self.findings.add(Kind.CQ_UNIT, path, n, problem)

    def _problem(self, n: int, physical: int, size: int, code: int) -> str | None:
        facts = self.facts
        if physical < 0:
            return f"points at offset {physical}, which is negative"
        # recovery points every unit of a quarantined run at its filler: those may repeat an offset
        if physical <= self.previous and not (physical == self.previous and self._quarantined(physical)):
            return f"points at offset {physical}, not after the unit before it ({self.previous})"
        if physical < facts.log_min or (facts.redispatch_from is not None and physical >= facts.redispatch_from):
            return None  # deleted by retention, or left to recovery to write again
        if physical >= facts.end:
            return f"points at offset {physical}, past the end of the log at {facts.end}"
        start = physical - (physical - facts.log_min) % facts.segment_size
        segment = facts.segments.get(start)
        if segment is None:
            return f"points at offset {physical}, in segment {segment_name(start)}, which is missing"
        return None if self._quarantined(physical) else self._mismatch(n, segment, physical, size, code)

    def _quarantined(self, physical: int) -> bool:
        """Is a quarantine filler (a record a repair took out) at `physical`?"""
        facts = self.facts
        segment = facts.segments.get(physical - (physical - facts.log_min) % facts.segment_size)
        if segment is None or physical < facts.log_min:
            return False
        view, pos = self.maps.view(segment), physical - segment.start
        return pos + FRAME_SIZE <= len(view) and peek_frame(view, pos)[1] == QUARANTINE_MAGIC

    def _mismatch(self, n: int, segment: SegmentFile, physical: int, size: int, code: int) -> str | None:
        """How the record at `physical` differs from what unit `n` says of it."""
        found = self._read(segment, physical)
        if isinstance(found, str):
            return found
        head, total, queue_offset = found
        if (head.topic, head.queue_id) != (self.topic, self.queue_id):
            return f"points at offset {physical} which holds a record of {head.topic}/{head.queue_id}"
        if total != size:
            return f"says the record at offset {physical} is {size} bytes; it is {total}"
        if queue_offset != n:
            return f"points at offset {physical}, whose record has queue offset {queue_offset}"
        if code != (expected := unit_code(head)):
            return f"tags code {code}, but the record at offset {physical} has {_code_source(head)}, code {expected}"
        return None

    def _read(self, segment: SegmentFile, physical: int) -> tuple[RecordHead, int, int] | str:
        """(head, size, queue offset) of the valid record at `physical`, or what is there instead."""
        view, pos = self.maps.view(segment), physical - segment.start
        if pos >= len(view):
            return f"points at offset {physical}, past the end of {segment.path.name}, which is {len(view)} bytes"
        try:
            total, blank = record_size(view, pos)
            queue_offset, stamped = peek_offsets(view, pos)
            if blank or stamped != physical:
                return f"points at offset {physical}, where no record starts"
            if not crc_matches(view, pos, total):
                return f"points at offset {physical}, whose record is corrupt (CRC mismatch)"
            return peek_head(view, pos), total, queue_offset
        except CorruptRecord as exc:
            return f"points at offset {physical}, where no valid record is ({exc.reason})"

    def settle(self, directory: Path, tally: QueueTally) -> None:
        """After the last unit: the bad units not shown, and the records no unit points at."""
        name, add = f"{self.topic}/{self.queue_id}", self.findings.add
        if self.bad > 1:
            add(Kind.CQ_UNIT, directory, None, f"{self.bad - 1} more bad units after unit {self.first_bad}")
        if tally.unreferenced:
            detail = f"{tally.unreferenced} of the {tally.records} records of {name} from the queue's first unit on"
            detail += f" have no unit pointing at them, the first at offset {tally.first_unreferenced}"
            add(Kind.CQ_COUNT, directory, None, detail)
        if tally.orphans and tally.first_live is None:
            detail = f"the CommitLog holds {tally.orphans} records of {name} from offset {tally.first_orphan} on"
            add(Kind.CQ_COUNT, directory, None, f"{detail}, but no unit points at them")
        elif tally.orphans:
            detail = f"{tally.orphans} records of {name}, the first at offset {tally.first_orphan}, come before"
            add(Kind.CQ_COUNT, directory, None, f"{detail} the queue's first unit", warning=DELETED_TOPIC)


def _code_source(head: RecordHead) -> str:
    due = head.properties.get(Prop.TIMER_DELIVER_MS)
    if head.topic in (SCHEDULE_TOPIC, TIMER_TOPIC) and due is not None and due.isdigit():
        return f"{Prop.TIMER_DELIVER_MS} {due}"
    tag = head.properties.get(Prop.TAGS)
    return "no tag" if tag is None else f"tag {tag!r}"
