"""IndexFile: find CommitLog messages by key within a time range (RocketMQ's IndexFile).

An index file is a hash table of fixed size whose slots head chains of entries,
newest first, like a HashMap laid out on disk. `IndexService` (index_service.py) keeps a directory
of them, named by the 17-digit UTC time of their creation (yyyyMMddHHmmssSSS),
and writes to the newest; when it is full a new one is started.

Format of one index file, big-endian; the sizes are asserted below:

    header, 52 bytes (the first 40 are RocketMQ's IndexHeader)
       0  begin_timestamp   q   8  ms; the base of every entry's time_diff
       8  end_timestamp     q   8  ms; the latest store timestamp put (an upper bound)
      16  begin_phy_offset  q   8  CommitLog offset of the first entry
      24  end_phy_offset    q   8  CommitLog offset of the last entry
      32  hash_slot_count   I   4  slots in use (informational)
      36  index_count       I   4  the number the next entry gets: entries written + 1,
                                   so that entry number 0 means "no entry"
      40  magic             4s  4  b"PIDX"
      44  slot_count        I   4  } the geometry, so that a file opens without settings
      48  max_entries       I   4  } and keeps working when the settings change
    hash slots, slot_count x 4 bytes from byte 52
          head              I   4  number of the newest entry in the slot's chain, 0 = empty
    entries, max_entries x 20 bytes; entry n (1-based) at 52 + 4 * slot_count + 20 * (n - 1)
       0  key_hash          I   4  zlib.crc32 of the UTF-8 key (unsigned); slot = key_hash % slot_count
       4  phy_offset        q   8  the message's CommitLog offset
      12  time_diff         i   4  whole SECONDS from begin_timestamp, floored (signed)
      16  prev_index        I   4  the entry put before this one in the same slot; 0 ends the chain

Entries hold only the key's hash, so a lookup also returns the offsets of other
keys with the same crc32: the caller re-checks the key in the CommitLog record,
as RocketMQ's client does. Times are kept to the second, so a lookup of
[begin, end] ms returns every entry whose second overlaps it: a superset that
the caller filters by the record's exact store timestamp. Queries choose files
by [begin_timestamp, end_timestamp], begin_timestamp being the first entry's
store time: an entry stored earlier than that (a clock stepped back) is found
only by a range that reaches the file's begin, as in RocketMQ.

Entries are put in CommitLog order, so phy offsets never decrease along a chain.
Recovery forgets the entries from the offset its scan starts at before it puts
them again (recovery.Redispatch.begin); `put_keys` also skips a message below
`max_phy_offset`, and lookups drop an offset equal to the one just found.

Durability: the file is created sparse and written through a shared mmap, so what
`put` wrote is in the page cache and survives the process being killed; `flush`
makes it survive the machine (fdatasync on the file, which on Linux writes back
pages dirtied through the map and, unlike `mmap.flush`, releases the GIL). A full
disk shows as a SIGBUS on a write into a hole; the broker's disk-space check
keeps it away. `put` writes the entry, then the header, then the slot; `put_many`
(a run of a batch's entries) all the entries, then the header once, then the
slots. A process killed in between leaves entries no slot points to, never a slot
that points past the header's count; recovery drops them and puts them again.

Truncation (recovery after a torn CommitLog tail): the entries at or past the cut
are a suffix of the newest file(s). They are undone newest first, each slot set
back to the entry's prev_index (only where the slot still points at that entry),
then index_count and end_phy_offset are lowered; so the offsets, which the
CommitLog reuses, come back clean, and a second run does the same. end_timestamp
stays as it was: it only chooses files, for which an upper bound is enough.

A file that cannot be read raises `CorruptIndexFile` (a plain Exception, not a
`libs.errors.PetrelError`: it stops the broker at startup and never crosses HTTP).
"""

from __future__ import annotations

import os
import re
import struct
import threading
import zlib
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import lru_cache
from mmap import mmap
from pathlib import Path
from typing import Final

from libs.store.mapped_file import preallocate

HEADER: Final = struct.Struct(">qqqqII")  # begin/end timestamp, begin/end phy offset, slots used, index count
GEOMETRY: Final = struct.Struct(">4sII")  # magic, slot_count, max_entries
SLOT: Final = struct.Struct(">I")
ENTRY: Final = struct.Struct(">IqiI")  # key_hash, phy_offset, time_diff, prev_index
assert HEADER.size == 40
assert GEOMETRY.size == 12
HEADER_SIZE: Final = HEADER.size + GEOMETRY.size
assert HEADER_SIZE == 52
assert SLOT.size == 4
assert ENTRY.size == 20

MAGIC: Final = b"PIDX"
MAX_U32: Final = 0xFFFF_FFFF
DEFAULT_SLOT_COUNT: Final = 5_000_000
DEFAULT_MAX_ENTRIES: Final = 20_000_000
DEFAULT_QUERY_LIMIT: Final = 32
UNIQUE_KEY_PREFIX: Final = "#UNIQ#"  # topic names cannot contain '#', so no topic#key looks like this
FILE_NAME: Final = re.compile(r"\d{17}")


class CorruptIndexFile(Exception):
    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"index file {path}: {reason}")
        self.path = path
        self.reason = reason


def file_size(slot_count: int, max_entries: int) -> int:
    return HEADER_SIZE + SLOT.size * slot_count + ENTRY.size * max_entries


def file_name(ms: int) -> str:
    """yyyyMMddHHmmssSSS in UTC, so that names sort in creation order across DST changes."""
    return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y%m%d%H%M%S") + f"{ms % 1000:03d}"


def file_name_ms(path: Path) -> int:
    try:
        stamp = datetime.strptime(path.name[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    except ValueError as exc:
        raise CorruptIndexFile(path, "name is not a yyyyMMddHHmmssSSS timestamp") from exc
    return int(stamp.timestamp()) * 1000 + int(path.name[14:])


class IndexFile:
    """One memory-mapped index file; one writer thread, reads from the same thread."""

    def __init__(self, path: Path, fd: int, mapping: mmap, geometry: tuple[int, int], header: tuple[int, ...]) -> None:
        self.path = path
        self.slot_count, self.max_entries = geometry
        self._fd = fd
        self._map = mapping
        self._entries_at = HEADER_SIZE + SLOT.size * self.slot_count - ENTRY.size  # where entry 0 would be
        self._begin_ts, self._end_ts, self._begin_phy, self._end_phy, self._used_slots, self._index_count = header
        self._dirty = False
        self._closing = threading.Lock()  # so that a flush never syncs a closed, perhaps reused, fd

    @classmethod
    def create(cls, path: Path, slot_count: int, max_entries: int, begin_timestamp: int) -> IndexFile:
        if not (0 < slot_count < MAX_U32 and 0 < max_entries < MAX_U32):
            raise ValueError(f"slot_count {slot_count} and max_entries {max_entries} must be in 1..{MAX_U32 - 1}")
        size = file_size(slot_count, max_entries)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            preallocate(fd, size, f"index file {path.name}")
            mapping = mmap(fd, size)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        header = (begin_timestamp, begin_timestamp, 0, 0, 0, 1)
        HEADER.pack_into(mapping, 0, *header)
        GEOMETRY.pack_into(mapping, HEADER.size, MAGIC, slot_count, max_entries)
        index_file = cls(path, fd, mapping, (slot_count, max_entries), header)
        index_file._dirty = True
        return index_file

    @classmethod
    def open(cls, path: Path) -> IndexFile:
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if size < HEADER_SIZE:
                raise CorruptIndexFile(path, f"{size} bytes is shorter than the {HEADER_SIZE}-byte header")
            mapping = mmap(fd, size)
            try:
                geometry, header = _read_header(path, mapping)
            except BaseException:
                mapping.close()
                raise
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, mapping, geometry, header)

    @property
    def begin_timestamp(self) -> int:
        return self._begin_ts

    @property
    def end_timestamp(self) -> int:
        return self._end_ts

    @property
    def begin_phy_offset(self) -> int:
        return self._begin_phy

    @property
    def end_phy_offset(self) -> int:
        return self._end_phy

    @property
    def entry_count(self) -> int:
        return self._index_count - 1

    @property
    def is_full(self) -> bool:
        return self._index_count > self.max_entries

    def put(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Index `key` for the message at `phy_offset`; False when the file is full."""
        n = self._index_count
        if n > self.max_entries:
            return False
        mapping = self._map
        key_hash = zlib.crc32(key.encode())
        slot_at = HEADER_SIZE + (key_hash % self.slot_count) * 4
        (head,) = SLOT.unpack_from(mapping, slot_at)
        if head >= n:  # only a damaged file points past its entries: start the chain afresh
            head = 0
        time_diff = (store_timestamp - self._begin_ts) // 1000
        ENTRY.pack_into(mapping, self._entries_at + n * 20, key_hash, phy_offset, time_diff, head)
        if not head:
            self._used_slots += 1
        self._note_entries(phy_offset, phy_offset, store_timestamp, n + 1)
        SLOT.pack_into(mapping, slot_at, n)
        return True

    def put_many(self, hashes: Sequence[int], offsets: Sequence[int], store_timestamp: int, first: int) -> int:
        """Index the entries (hashes[i], offsets[i]) from `first` on, as many as fit; how many were put.

        As `put` of each in turn, with the header written once: all the entries first,
        then the header, then each slot they touch, so that a process killed in between
        leaves entries no slot points to, never a slot that points past the header's count.
        """
        n = start = self._index_count
        count = min(len(hashes) - first, self.max_entries + 1 - n)
        if count <= 0:
            return 0
        mapping, slot_count, read_slot = self._map, self.slot_count, SLOT.unpack_from
        time_diff = (store_timestamp - self._begin_ts) // 1000
        heads: dict[int, int] = {}  # slot position -> the newest entry of this call in that slot
        fields: list[int] = []  # the entries' fields, in order, packed in one call below
        for key_hash, phy_offset in zip(hashes[first : first + count], offsets[first : first + count], strict=True):
            slot_at = HEADER_SIZE + key_hash % slot_count * 4
            head = heads.get(slot_at)
            if head is None:
                head = read_slot(mapping, slot_at)[0]
                if head >= start:  # only a damaged file points past its entries: start the chain afresh
                    head = 0
                if not head:
                    self._used_slots += 1
            fields += (key_hash, phy_offset, time_diff, head)
            heads[slot_at] = n
            n += 1
        _entries(count).pack_into(mapping, self._entries_at + start * ENTRY.size, *fields)
        self._note_entries(offsets[first], offsets[first + count - 1], store_timestamp, n)
        for slot_at, head in heads.items():
            SLOT.pack_into(mapping, slot_at, head)
        return count

    def _note_entries(self, first_phy: int, last_phy: int, store_timestamp: int, index_count: int) -> None:
        """Write the header for entries put up to `index_count`, the first and last at these offsets."""
        if self._index_count == 1:
            self._begin_phy = first_phy
        self._end_ts = max(self._end_ts, store_timestamp)
        self._end_phy = last_phy
        self._index_count = index_count
        self._dirty = True
        HEADER.pack_into(
            self._map, 0, self._begin_ts, self._end_ts, self._begin_phy, last_phy, self._used_slots, index_count
        )

    def lookup(self, key: str, begin: int, end: int, limit: int) -> list[int]:
        """Phy offsets, newest first, of at most `limit` entries with key's hash in [begin, end] ms (to the second)."""
        found: list[int] = []
        if limit > 0:
            key_hash = zlib.crc32(key.encode())
            self.walk(key_hash, self.chain_head(key_hash), self.seconds(begin, end), found, limit, self.max_entries)
        return found

    @property
    def closed(self) -> bool:
        return self._map.closed

    def seconds(self, begin: int, end: int) -> tuple[int, int]:
        """The time range [begin, end] ms as entries keep it: seconds from the file's begin_timestamp."""
        return (begin - self._begin_ts) // 1000, (end - self._begin_ts) // 1000

    def chain_head(self, key_hash: int) -> int:
        """The newest entry of the slot `key_hash` falls in; 0 when it has none."""
        (n,) = SLOT.unpack_from(self._map, HEADER_SIZE + (key_hash % self.slot_count) * 4)
        return n if n < self._index_count else 0  # only a damaged file points past its entries

    def walk(
        self, key_hash: int, entry: int, seconds: tuple[int, int], found: list[int], limit: int, steps: int
    ) -> tuple[int, int]:
        """Follow a chain from `entry` for at most `steps` entries, adding to `found` the phy offsets of those
        with `key_hash` within `seconds`, up to `limit`. Answers the entry to go on from (0 once the chain or
        `found` ends) and the entries read.
        """
        first, last = seconds
        mapping, entries_at, unpack_entry = self._map, self._entries_at, ENTRY.unpack_from
        n, taken = entry, 0
        while n and taken < steps:
            taken += 1
            entry_hash, phy_offset, time_diff, prev = unpack_entry(mapping, entries_at + n * 20)
            if entry_hash == key_hash and first <= time_diff <= last and (not found or found[-1] != phy_offset):
                found.append(phy_offset)
                if len(found) >= limit:
                    return 0, taken
            n = prev if prev < n else 0  # a chain only goes back; anything else is damage
        return n, taken

    def truncate_after(self, phy_offset: int) -> None:
        """Forget the entries at or past `phy_offset` (see the module docstring)."""
        mapping, entries_at = self._map, self._entries_at
        n = self._index_count - 1
        while n:
            key_hash, entry_phy, _, prev = ENTRY.unpack_from(mapping, entries_at + n * 20)
            if entry_phy < phy_offset:
                break
            slot_at = HEADER_SIZE + (key_hash % self.slot_count) * 4
            if SLOT.unpack_from(mapping, slot_at)[0] == n:  # an entry a crash left unlinked heads no chain
                SLOT.pack_into(mapping, slot_at, prev)
                if not prev:
                    self._used_slots -= 1
            n -= 1
        if n == self._index_count - 1:
            return
        self._index_count = n + 1
        self._end_phy = ENTRY.unpack_from(mapping, entries_at + n * 20)[1] if n else 0
        if not n:
            self._begin_phy = 0
        self._dirty = True
        HEADER.pack_into(
            mapping, 0, self._begin_ts, self._end_ts, self._begin_phy, self._end_phy, self._used_slots, n + 1
        )

    def flush(self) -> None:
        """Make everything put so far durable; blocks without the GIL, so a flusher thread may call it."""
        with self._closing:
            if self._dirty and not self._map.closed:
                self._dirty = False  # first, so that a put racing the sync marks the file again
                os.fdatasync(self._fd)

    def close(self) -> None:
        """Unmap without syncing (the page cache still writes the pages back); waits for a running flush."""
        with self._closing:
            if not self._map.closed:
                self._map.close()
                os.close(self._fd)


@lru_cache(maxsize=64)
def _entries(count: int) -> struct.Struct:
    """`count` entries laid end to end (ENTRY repeated)."""
    return struct.Struct(">" + ENTRY.format.lstrip(">") * count)


def _read_header(path: Path, mapping: mmap) -> tuple[tuple[int, int], tuple[int, ...]]:
    magic, slot_count, max_entries = GEOMETRY.unpack_from(mapping, HEADER.size)
    if magic != MAGIC:
        raise CorruptIndexFile(path, f"magic is {magic!r}, not {MAGIC!r}")
    if not (slot_count and max_entries):
        raise CorruptIndexFile(path, f"{slot_count} slots and {max_entries} entries")
    expected = file_size(slot_count, max_entries)
    if len(mapping) != expected:
        raise CorruptIndexFile(
            path, f"{len(mapping)} bytes, but {slot_count} slots and {max_entries} entries take {expected}"
        )
    header = HEADER.unpack_from(mapping, 0)
    used_slots, index_count = header[4], header[5]
    if not 1 <= index_count <= max_entries + 1:
        raise CorruptIndexFile(path, f"index_count {index_count} is outside 1..{max_entries + 1}")
    if used_slots > slot_count:
        raise CorruptIndexFile(path, f"{used_slots} slots in use of {slot_count}")
    return (slot_count, max_entries), header
