"""ConsumeQueueTable: every (topic, queue) ConsumeQueue of a store, opened on first use."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from libs.store.consume_queue import ConsumeQueue, FileHandles, RecordCheck

BACKLOG_BYTES = 4096
"""A queue with this many bytes of units in memory is written at every flush, not only at checkpoints."""


class ConsumeQueueTable:
    def __init__(self, root: Path, units_per_file: int, max_open_files: int, is_ours: RecordCheck) -> None:
        self.root = root
        self.units_per_file = units_per_file
        self.handles = FileHandles(max_open_files)
        self.is_ours = is_ours
        self.commitlog_min = 0
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._unwritten: set[ConsumeQueue] = set()

    def get(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            queue = ConsumeQueue(self.root / topic / str(queue_id), topic, queue_id, self.units_per_file, self.handles)
            queue.load(self.is_ours, self.commitlog_min)
            self._queues[(topic, queue_id)] = queue
        return queue

    def append(self, topic: str, queue_id: int, queue_offset: int, phy: int, size: int, code: int) -> None:
        queue = self.get(topic, queue_id)
        queue.append(queue_offset, phy, size, code)
        self._unwritten.add(queue)

    def extend(self, queue: ConsumeQueue, units: bytes | bytearray, count: int) -> None:
        """`count` packed units at the end of `queue` (one of this table's): a run of a batch's records."""
        queue.extend(units, count)
        self._unwritten.add(queue)

    def on_disk(self) -> Iterator[tuple[str, int]]:
        """Every (topic, queue id) with a ConsumeQueue directory, opened or not."""
        if not self.root.exists():
            return
        for topic_dir in self.root.iterdir():
            for queue_dir in topic_dir.iterdir():
                if queue_dir.name.isdigit():
                    yield topic_dir.name, int(queue_dir.name)

    def opened(self) -> list[ConsumeQueue]:
        return list(self._queues.values())

    def write_pending(self, *, everything: bool = True) -> None:
        """Write in-memory units to their files.

        Units need to be in their files only by the next checkpoint (recovery
        rebuilds what came after it), so between checkpoints only queues with a
        sizeable backlog are written: with 10,000 queues, most would otherwise
        cost an open, a pwrite and a close of a few units at every flush.
        """
        if everything:
            for queue in self._unwritten:
                queue.write_pending()
            self._unwritten.clear()
            return
        written = [q for q in self._unwritten if len(q.pending) >= BACKLOG_BYTES]
        for queue in written:
            queue.write_pending()
        self._unwritten.difference_update(written)

    def take_dirty_files(self) -> list[Path]:
        dirty: list[Path] = []
        for queue in self._queues.values():
            dirty.extend(queue.dirty_files)
            queue.dirty_files.clear()
        return dirty

    @staticmethod
    def sync_files(paths: list[Path]) -> None:
        """fdatasync each file (fsync each directory) through a descriptor of its own (from a worker thread)."""
        for path in paths:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # deleted by retention or truncation meanwhile
            try:
                if stat.S_ISDIR(os.fstat(fd).st_mode):
                    os.fsync(fd)
                else:
                    os.fdatasync(fd)
            finally:
                os.close(fd)

    def delete_topic(self, topic: str) -> None:
        """Forget the topic's queues and delete their files (its CommitLog records age out)."""
        for key in [k for k in self._queues if k[0] == topic]:
            queue = self._queues.pop(key)
            self._unwritten.discard(queue)
        topic_dir = self.root / topic
        if topic_dir.exists():
            for path in topic_dir.rglob("*"):
                self.handles.forget(path)
            shutil.rmtree(topic_dir)

    def close(self) -> None:
        self.handles.close()
