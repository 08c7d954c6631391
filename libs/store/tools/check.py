"""`petrel store check`: verify a store directory record by record and unit by unit, without changing it.

What is checked, in this order; problems are listed in the same order, so the first is the earliest:

1. CommitLog segments: one size, each named by its start offset on a segment boundary, no gaps.
2. Every record from the first: magic, length, CRC, the physical offset stamped in it, the
   queue offsets of each queue dense (n, n + 1, ...); a blank filler reaches exactly to its
   segment's end; the log ends at the first all-zero header and nothing after it is non-zero.
3. Every ConsumeQueue: files named by byte offset, of whole 20-byte units, with no gaps; every
   unit (above the CommitLog's minimum) points at a record of its queue with its size, queue
   offset and tags code; every record of the queue from its first unit on is pointed at.
4. The checkpoint: readable, on a record boundary, not past the end of the log (after a clean
   stop, at its end). 5. Every index file opens, and (after a clean stop) ends inside the log.

After an unclean stop (an abort file, or no checkpoint) recovery will truncate the log at the
first invalid record past the checkpoint and rebuild the ConsumeQueues from the checkpoint's
dispatch offset on: what it will repair is a warning, not an error. But only a torn tail: a
damaged record that records of the log follow (see libs.store.recovery) is an error, naming
`petrel store repair`, and the walk goes on at the next record. A quarantine filler (what a
repair left) is no problem: its records are counted as lost, and units may point at it.

Problem offsets are CommitLog offsets for commitlog/ files and queue offsets (unit indexes)
for consumequeue/ files.
"""

from __future__ import annotations

import mmap
import zlib
from pathlib import Path
from typing import Final

from libs.codec import (
    BLANK_MAGIC,
    BLANK_MIN_SIZE,
    FRAME_SIZE,
    MESSAGE_MAGIC,
    QUARANTINE_MAGIC,
    RecordHead,
    computed_crc,
    peek_frame,
    peek_head,
    peek_offsets,
    record_size,
    stored_crc,
)
from libs.errors import CorruptRecord
from libs.store.checkpoint import BODY, LAYOUT, Checkpoint
from libs.store.commitlog import next_record_in, segment_name, surely_ours
from libs.store.config import StoreConfig
from libs.store.index_file import FILE_NAME, CorruptIndexFile, IndexFile, file_name_ms
from libs.store.message_store import unit_code
from libs.store.tools.check_queues import LogFacts, QueueTally, check_queues, queue_tallies
from libs.store.tools.shared import (
    CheckReport,
    Findings,
    Kind,
    SegmentFile,
    SegmentMaps,
    common_size,
    segment_files,
    store_config,
)

ZEROS: Final = bytes(1024 * 1024)


def check_store(root: Path, *, max_problems: int = 20) -> CheckReport:
    """Check the store in `root` without changing it; stop at `max_problems` (0: never).

    Raises StoreToolError when `root` is not a store directory.
    """
    config = store_config(root)
    with SegmentMaps() as maps:
        checker = _Checker(config, maps, Findings(config, max_problems))
        checker.run()
        return checker.report()


class _Checker:
    def __init__(self, config: StoreConfig, maps: SegmentMaps, findings: Findings) -> None:
        self.config = config
        self.maps = maps
        self.findings = findings
        self.add = findings.add
        self.segments = segment_files(config)
        self.segment_size = common_size(self.segments)
        self.log_min = self.segments[0].start if self.segments else 0
        self.checkpoint = cp = Checkpoint.read(config.checkpoint_path)
        self.clean_stop = not config.abort_path.exists() and (cp is not None or not self.segments)
        # After an unclean stop recovery scans the log from the checkpoint's dispatch offset, truncates
        # it at the first invalid record and dispatches again what it passed (libs.store.recovery).
        self.repair_from = None if self.clean_stop else (cp.commitlog_offset if cp else self.log_min)
        self.redispatch_from = None if self.clean_stop else max(self.log_min, cp.dispatch_offset if cp else 0)
        self.end: int | None = None
        self.reached = self.log_min
        self.cut = False
        self.losses = 0
        """Records or parts of segments the walk could not read: a queue's offsets may skip over them."""
        self.on_boundary = False
        self.records = self.blanks = self.quarantined = self.queues = self.units = self.index_files = 0
        self.tallies: dict[tuple[str, int], QueueTally] = {}

    def run(self) -> None:
        for phase in (self.check_commitlog, self.check_queues, self.check_checkpoint, self.check_index):
            if self.findings.full:
                return
            phase()

    def report(self) -> CheckReport:
        return CheckReport(
            root=self.config.root,
            clean_stop=self.clean_stop,
            redispatch_from=self.redispatch_from,
            segment_size=self.segment_size,
            segments=len(self.segments),
            records=self.records,
            blanks=self.blanks,
            quarantined=self.quarantined,
            log_min=self.log_min,
            log_end=self.reached if self.end is None else self.end,
            queues=self.queues,
            units=self.units,
            index_files=self.index_files,
            checkpoint=self.checkpoint,
            problems=tuple(self.findings.problems),
            max_problems=self.findings.limit,
        )

    # ---- CommitLog ---------------------------------------------------------------------

    def check_commitlog(self) -> None:
        self.tallies = queue_tallies(self.config, self.log_min)
        expected: int | None = None
        for segment in self.segments:
            if self.findings.full:
                return
            self._check_segment_file(segment, expected)
            expected = segment.start + (self.segment_size or segment.size)
            if self.end is None:
                self._walk(segment)
            elif not self.cut:
                detail = f"lies past the end of the log at offset {self.end}"
                self.add(Kind.SEGMENT_PAST_END, segment.path, None, detail, warning=self._repair("delete it", self.end))
        if self.end is None:
            self.end = self.reached

    def _repair(self, what: str, offset: int) -> str:
        """Why a problem at `offset` is only a warning (recovery will do `what`), or '' when it is an error."""
        if self.repair_from is None or offset < self.repair_from:
            return ""
        return f"the store was not closed cleanly, and recovery will {what}"

    def _check_segment_file(self, segment: SegmentFile, expected: int | None) -> None:
        size = self.segment_size or segment.size
        if segment.size != size:
            self.add(Kind.SEGMENT_SIZE, segment.path, None, f"{segment.size} bytes, but the other segments are {size}")
        if segment.start % size:
            self.add(Kind.SEGMENT_NAME, segment.path, None, f"does not start on a {size}-byte boundary")
        if expected is not None and segment.start > expected:
            detail = f"missing: the log jumps from offset {expected} to {segment.start}"
            self.losses += 1
            self.add(Kind.SEGMENT_MISSING, f"commitlog/{segment_name(expected)}", None, detail)
        elif expected is not None and segment.start < expected:
            detail = f"overlaps the segment before it, which ends at offset {expected}"
            self.add(Kind.SEGMENT_NAME, segment.path, None, detail)

    def _walk(self, segment: SegmentFile) -> None:
        view = self.maps.view(segment)
        checkpoint_at = self.checkpoint.commitlog_offset if self.checkpoint else -1
        pos = 0
        while pos < len(view) and not self.findings.full:
            if segment.start + pos == checkpoint_at:
                self.on_boundary = True
            step = self._step(segment, view, pos)
            if step is None:
                self.losses += self.end is None
                return
            pos += step
            self.reached = segment.start + pos

    def _step(self, segment: SegmentFile, view: memoryview, pos: int) -> int | None:
        """Check what is at `pos`: its size, or None when the walk cannot go on in this segment."""
        offset = segment.start + pos
        left = len(view) - pos
        if left < FRAME_SIZE:
            if segment.size == self.segment_size:
                self._bad(Kind.BAD_BLANK, segment, offset, f"{left} bytes left at the segment's end, no blank filler")
            return None
        total, magic = peek_frame(view, pos)
        if total == 0 and magic == 0:
            self._log_ends(segment, view, pos)
            return None
        if magic in (BLANK_MAGIC, QUARANTINE_MAGIC):
            return self._filler(segment, offset, int(total), blank=magic == BLANK_MAGIC)
        if magic != MESSAGE_MAGIC:
            return self._bad(Kind.BAD_MAGIC, segment, offset, f"bad magic code 0x{magic:08x}")
        return self._record(segment, view, pos)

    def _filler(self, segment: SegmentFile, offset: int, total: int, *, blank: bool) -> int | None:
        """A blank filler (to the segment's end) or a quarantine filler (a record a repair took out)."""
        left = segment.start + segment.size - offset
        if not blank and BLANK_MIN_SIZE <= total <= left:
            self.quarantined += 1
            self.losses += 1
            return total
        if blank and total == left and segment.size == self.segment_size:
            self.blanks += 1
            return total
        kind = "blank" if blank else "quarantine"
        return self._bad(
            Kind.BAD_BLANK, segment, offset, f"{kind} filler of {total} bytes; the segment has {left} left"
        )

    def _record(self, segment: SegmentFile, view: memoryview, pos: int) -> int | None:
        offset = segment.start + pos
        try:
            total, _ = record_size(view, pos)
        except CorruptRecord as exc:
            return self._bad(Kind.BAD_LENGTH, segment, offset, exc.reason)
        stored, actual = stored_crc(view, pos), computed_crc(view, pos, total)
        queue_offset, physical = peek_offsets(view, pos)
        if actual != stored:
            detail = f"CRC mismatch: stored 0x{stored:08x}, computed 0x{actual:08x}"
            return self._bad(Kind.CRC_MISMATCH, segment, offset, detail, total)
        try:
            if physical != offset:
                raise CorruptRecord(offset, f"the record says it is at offset {physical}")
            head = peek_head(view, pos)
        except CorruptRecord as exc:
            self.add(Kind.BAD_FRAMING if physical == offset else Kind.WRONG_OFFSET, segment.path, offset, exc.reason)
            self.losses += 1
            return total
        self.records += 1
        self._tally(segment, head, queue_offset, offset)
        return total

    def _bad(self, kind: Kind, segment: SegmentFile, offset: int, detail: str, size: int = 0) -> int | None:
        """Report a record recovery would stop at; the step to the next record of the log, or None to stop here.

        A torn tail (nothing of the log after it) recovery will cut: a warning after an unclean stop.
        Damage that records of the log follow recovery refuses to cut: an error, which a repair mends.
        `size`, when the record's length is sound, steps to the record after it even if that one is damaged too.
        """
        self.losses += 1
        view = self.maps.view(segment)
        pos = offset - segment.start
        mapped = view.obj if isinstance(view.obj, mmap.mmap) else None
        resume = None if mapped is None else next_record_in(mapped, segment.start, pos + 1)
        follows = resume is not None or self._later_segment_starts_well(segment)
        warning = "" if follows else self._repair("truncate the log here", offset)
        if follows and segment.size == self.segment_size:
            detail += f"; records follow it: `petrel store repair {self.config.root}` quarantines it and keeps them"
        self.add(kind, segment.path, offset, detail, warning=warning)
        if warning:
            self.end, self.cut = offset, True
        if resume is None:
            return None
        return size if 0 < size <= resume - pos else resume - pos

    def _later_segment_starts_well(self, segment: SegmentFile) -> bool:
        for later in self.segments:
            if later.start > segment.start and later.size == self.segment_size:
                view = self.maps.view(later)
                return isinstance(view.obj, mmap.mmap) and surely_ours(view.obj, later.start, 0)
        return False

    def _log_ends(self, segment: SegmentFile, view: memoryview, pos: int) -> None:
        self.end = segment.start + pos
        garbage = _first_nonzero(view, pos)
        if garbage is not None:
            detail = f"garbage after the end of the log, which ends at offset {self.end}"
            warning = self._repair("zero it", self.end)
            self.add(Kind.GARBAGE, segment.path, segment.start + garbage, detail, warning=warning)

    def _tally(self, segment: SegmentFile, head: RecordHead, queue_offset: int, offset: int) -> None:
        key = (head.topic, head.queue_id)
        tally = self.tallies.get(key)
        if tally is None:
            tally = self.tallies[key] = QueueTally([], self.log_min, has_queue=False)
        dispatched = self.redispatch_from is None or offset < self.redispatch_from
        if tally.first_live is None or offset < tally.first_live:
            if dispatched:
                tally.orphan(offset)
            return
        if tally.last is not None and not _follows(queue_offset, tally.last[0], self.losses > tally.last[2]):
            detail = (
                f"the record of {head.topic}/{head.queue_id} has queue offset {queue_offset}, "
                f"but the one before it, at offset {tally.last[1]}, has {tally.last[0]}"
            )
            self.add(Kind.QUEUE_OFFSET_GAP, segment.path, offset, detail)
        tally.last = (queue_offset, offset, self.losses)
        if dispatched:
            tally.saw(queue_offset, offset, head.total_size, unit_code(head))

    # ---- ConsumeQueues, checkpoint, index ------------------------------------------------

    def check_queues(self) -> None:
        facts = LogFacts(
            segments={s.start: s for s in self.segments},
            segment_size=self.segment_size or 1,
            log_min=self.log_min,
            end=self.reached if self.end is None else self.end,
            redispatch_from=self.redispatch_from,
        )
        self.queues, self.units = check_queues(self.config, self.maps, facts, self.tallies, self.findings)

    def check_checkpoint(self) -> None:
        path = self.config.checkpoint_path
        if not path.exists():
            if self.records:
                self.add(
                    Kind.CHECKPOINT, path, None, "missing", warning="the next start will re-dispatch the whole log"
                )
            return
        cp, end = self.checkpoint, self.end or 0
        if cp is None:
            self.add(Kind.CHECKPOINT, path, None, _checkpoint_damage(path.read_bytes()))
        elif cp.dispatch_offset > cp.commitlog_offset:
            detail = f"dispatch offset {cp.dispatch_offset} is past the commitlog offset {cp.commitlog_offset}"
            self.add(Kind.CHECKPOINT, path, None, detail)
        elif cp.commitlog_offset > end:
            detail = f"says the log is durable up to offset {cp.commitlog_offset}, but the log ends at {end}"
            self.add(Kind.CHECKPOINT, path, None, detail)
        elif self.clean_stop and cp.commitlog_offset != end:
            detail = f"the store was closed cleanly at offset {cp.commitlog_offset}, but the log goes on to {end}"
            self.add(Kind.CHECKPOINT, path, None, f"{detail}: the next start would write over the records there")
        elif self.log_min <= cp.commitlog_offset < end and not self.on_boundary:
            detail = f"commitlog offset {cp.commitlog_offset} is not a record boundary"
            self.add(Kind.CHECKPOINT, path, None, detail)

    def check_index(self) -> None:
        directory = self.config.index_dir
        paths = sorted(p for p in directory.iterdir() if FILE_NAME.fullmatch(p.name)) if directory.is_dir() else []
        for path in paths:
            if self.findings.full:
                return
            self.index_files += 1
            try:
                file_name_ms(path)
                index_file = IndexFile.open(path)
            except CorruptIndexFile as exc:
                self.add(Kind.INDEX, path, None, exc.reason)
                continue
            except OSError as exc:
                self.add(Kind.INDEX, path, None, f"cannot be opened: {exc.strerror}")
                continue
            end_phy, entries = index_file.end_phy_offset, index_file.entry_count
            index_file.close()
            if self.clean_stop and entries and end_phy >= (self.end or 0):
                detail = f"has entries up to offset {end_phy}, past the end of the log at {self.end}"
                self.add(Kind.INDEX, path, None, detail)


def _follows(queue_offset: int, previous: int, lost_between: bool) -> bool:
    """Whether a queue's record may come after its record at `previous` (records lost between may be its)."""
    return queue_offset == previous + 1 or (lost_between and queue_offset > previous)


def _first_nonzero(view: memoryview, start: int) -> int | None:
    position = start
    while position < len(view):
        chunk = view[position : position + len(ZEROS)].tobytes()
        if chunk != ZEROS[: len(chunk)]:
            return position + len(chunk) - len(chunk.lstrip(b"\0"))
        position += len(chunk)
    return None


def _checkpoint_damage(raw: bytes) -> str:
    if len(raw) != LAYOUT.size:
        return f"{len(raw)} bytes; a checkpoint is {LAYOUT.size}"
    stored = LAYOUT.unpack(raw)[3]
    return f"CRC mismatch: stored 0x{stored:08x}, computed 0x{zlib.crc32(raw[: BODY.size]):08x}"
