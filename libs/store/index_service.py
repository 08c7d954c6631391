"""IndexService: the broker's directory of IndexFiles (index_file.py), one written, all queried.

Files are named by their creation time and kept oldest first; the newest takes the puts
until it is full, then a new one is started. A query walks the files newest first
(key_walk.py), only those whose time range meets the query's. Recovery truncates the
newest files back to the CommitLog's valid end; retention deletes the oldest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from libs.store.index_file import (
    DEFAULT_MAX_ENTRIES,
    DEFAULT_QUERY_LIMIT,
    DEFAULT_SLOT_COUNT,
    FILE_NAME,
    UNIQUE_KEY_PREFIX,
    IndexFile,
    file_name,
    file_name_ms,
)
from libs.store.key_walk import KeyWalk
from libs.store.mapped_file import fsync_directory


class IndexService:
    """The broker's directory of index files: `topic#key` and `#UNIQ#id` to CommitLog offsets."""

    def __init__(
        self,
        directory: Path,
        slot_count: int = DEFAULT_SLOT_COUNT,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = directory
        self.slot_count = slot_count
        self.max_entries = max_entries
        self._clock = clock
        self._files: list[IndexFile] = []
        self._current: IndexFile | None = None
        self._last_name_ms = 0
        self._directory_dirty = False

    @property
    def files(self) -> tuple[IndexFile, ...]:
        return tuple(self._files)

    @property
    def max_phy_offset(self) -> int:
        """The end_phy_offset of the newest file: recovery re-dispatches the CommitLog from here."""
        return self._current.end_phy_offset if self._current else 0

    def load(self) -> None:
        """Open the files already in the directory, oldest first; writing goes on in the newest."""
        self.directory.mkdir(parents=True, exist_ok=True)
        names = sorted(path.name for path in self.directory.iterdir() if FILE_NAME.fullmatch(path.name))
        try:
            for name in names:
                self._files.append(IndexFile.open(self.directory / name))
            if names:
                self._last_name_ms = file_name_ms(self.directory / names[-1])
        except BaseException:
            self.close()
            raise
        self._drop_empty_tail()
        self._current = self._files[-1] if self._files else None

    def put_keys(
        self, topic: str, keys: Iterable[str], unique_key: str | None, phy_offset: int, store_timestamp: int
    ) -> None:
        """Index a message's keys as `topic#key` and its message id as `#UNIQ#id`."""
        current = self._current
        if current is not None and phy_offset < current.end_phy_offset:
            return  # indexed before the crash: recovery re-dispatches from max_phy_offset
        for key in keys:
            if key:
                self._put(f"{topic}#{key}", phy_offset, store_timestamp)
        if unique_key:
            self._put(UNIQUE_KEY_PREFIX + unique_key, phy_offset, store_timestamp)

    def put_hashes(self, hashes: Sequence[int], offsets: Sequence[int], store_timestamp: int) -> None:
        """Index a run of messages stored at `store_timestamp`: entry i is the key hash hashes[i] of the
        message at offsets[i] (hashed as `put_keys` hashes its keys; see batch_heads.py), in CommitLog order.
        """
        put = 0
        while put < len(hashes):
            current = self._current
            if current is None or current.is_full:
                current = self._roll(store_timestamp)
            put += current.put_many(hashes, offsets, store_timestamp, put)

    def query(self, topic: str, key: str, begin: int, end: int, limit: int = DEFAULT_QUERY_LIMIT) -> list[int]:
        """Phy offsets, newest first, of messages of `topic` with `key` (or a key of the same hash)."""
        return self._query(f"{topic}#{key}", begin, end, limit)

    def query_unique(self, message_id: str, begin: int, end: int, limit: int = DEFAULT_QUERY_LIMIT) -> list[int]:
        return self._query(UNIQUE_KEY_PREFIX + message_id, begin, end, limit)

    def truncate_after(self, phy_offset: int) -> None:
        """Forget every entry at or past `phy_offset`: files that begin there go, the rest are rolled back."""
        files = self._files
        while files and (not files[-1].entry_count or files[-1].begin_phy_offset >= phy_offset):
            self._delete(files.pop())
        for index_file in reversed(files):
            if index_file.end_phy_offset < phy_offset:
                break
            index_file.truncate_after(phy_offset)  # a message's keys may straddle two files
        self._current = self._files[-1] if self._files else None

    def delete_files_before(self, phy_offset: int) -> int:
        """Retention: delete the oldest files whose entries all lie below `phy_offset`; never the newest."""
        deleted = 0
        while len(self._files) > 1 and self._files[0].end_phy_offset < phy_offset:
            self._delete(self._files.pop(0))
            deleted += 1
        return deleted

    def flush(self) -> None:
        for index_file in tuple(self._files):  # the writer thread may roll or delete meanwhile
            index_file.flush()
        if self._directory_dirty:
            self._directory_dirty = False
            fsync_directory(self.directory)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            for index_file in self._files:
                index_file.close()
            self._files.clear()
            self._current = None

    def _put(self, key: str, phy_offset: int, store_timestamp: int) -> None:
        current = self._current
        if current is None or not current.put(key, phy_offset, store_timestamp):
            current = self._roll(store_timestamp)
            current.put(key, phy_offset, store_timestamp)

    def _roll(self, begin_timestamp: int) -> IndexFile:
        name_ms = max(int(self._clock() * 1000), self._last_name_ms + 1)  # names keep creation order
        path = self.directory / file_name(name_ms)
        index_file = IndexFile.create(path, self.slot_count, self.max_entries, begin_timestamp)
        self._last_name_ms = name_ms
        self._directory_dirty = True
        self._files.append(index_file)
        self._current = index_file
        return index_file

    def walk_key(self, topic: str, key: str, begin: int, end: int, limit: int) -> KeyWalk:
        """As `query`, to be taken a slice at a time (key_walk.py)."""
        return self._walk(f"{topic}#{key}", begin, end, limit)

    def _walk(self, key: str, begin: int, end: int, limit: int) -> KeyWalk:
        files = [f for f in reversed(self._files) if f.begin_timestamp <= end and f.end_timestamp >= begin]
        return KeyWalk(files, key, begin, end, limit)

    def _query(self, key: str, begin: int, end: int, limit: int) -> list[int]:
        walk = self._walk(key, begin, end, limit)
        walk.step(2**62)
        return walk.found

    def _drop_empty_tail(self) -> None:
        """A file created just before a crash holds nothing; it would hide the real max_phy_offset."""
        while self._files and not self._files[-1].entry_count:
            self._delete(self._files.pop())

    def _delete(self, index_file: IndexFile) -> None:
        index_file.close()
        index_file.path.unlink()
        self._directory_dirty = True
