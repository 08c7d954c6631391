"""KeyWalk: one look-up by key across the IndexFiles, newest file first, a slice at a time.

A key's entries are a chain per file, shared with every key whose hash falls in the same
slot; a key sent with many messages (or a crowded slot) makes a long chain. A walk can be
taken in steps (`step(n)`: at most n chain entries), so a query bounds the entries it reads
and lets the event loop run between steps (`MessageLookup.query_key_in_slices`). Between
steps a file may be deleted by retention: it is passed over. Entries are never rewritten
while the store runs (truncation is recovery's, before it serves), so a chain followed
from an entry stays valid while new entries are put in front of it.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from libs.store.index_file import IndexFile


class KeyWalk:
    def __init__(self, files: list[IndexFile], key: str, begin: int, end: int, limit: int) -> None:
        self.files = files
        """The files whose time range meets [begin, end], newest first; the walk is in files[0]."""
        self.key_hash = zlib.crc32(key.encode())
        self.begin, self.end = begin, end
        self.limit = limit
        self._found: list[int] = []
        self._entry: int | None = None
        """Where the walk goes on in files[0]; None before its chain head is read."""
        self._here: list[int] = []

    @property
    def done(self) -> bool:
        return not self.files or len(self._found) >= self.limit

    @property
    def found(self) -> list[int]:
        """Phy offsets, newest first, of entries with the key's hash so far (the caller checks the records)."""
        return _merged(self._found, self._here, self.limit)

    def step(self, steps: int) -> int:
        """Follow the chains for at most `steps` entries; how many it read."""
        taken = 0
        while not self.done and taken < steps:
            index_file = self.files[0]
            if index_file.closed:  # deleted by retention since the last step
                self._next_file()
                continue
            if self._entry is None:
                self._entry = index_file.chain_head(self.key_hash)
            # one more than needed: the first may repeat the last found (keys straddling two files)
            wanted = self.limit - len(self._found) + 1
            seconds = index_file.seconds(self.begin, self.end)
            entry, read = index_file.walk(self.key_hash, self._entry, seconds, self._here, wanted, steps - taken)
            taken += read
            self._entry = entry
            if not entry:
                self._found = self.found
                self._next_file()
        return taken

    def _next_file(self) -> None:
        self.files.pop(0)
        self._entry = None
        self._here = []


def _merged(found: list[int], here: list[int], limit: int) -> list[int]:
    """`found` then `here` (the file being walked), the first of `here` dropped if it repeats the last found."""
    merged = list(found)
    for phy_offset in here:
        if len(merged) < limit and (not merged or merged[-1] != phy_offset):
            merged.append(phy_offset)
    return merged
