"""Encoded message records for the storage scenarios, and the bare mmap loop they are judged by.

Every record has a 1 KiB body and the properties a producer's send carries
(TAGS, one key in KEYS, UNIQ_KEY), so the store indexes what it would in
production. `pack_into_map` is the reference: the least work that writes the
same record format (copy, stamp, CRC) with no ConsumeQueue, index or flush.
"""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Sequence
from pathlib import Path

from libs.codec import encode_record, peek_frame, peek_queue_id, stamp_record
from libs.message import MessageIdFactory, MessageRecord, Prop

BODY = b"x" * 1024
BATCH = 32
STORE_HOST = "127.0.0.1:10911"

QueueKey = tuple[str, int]


def spread(topics: int, queues: int, prefix: str = "bench") -> list[QueueKey]:
    """Every (topic, queue) pair of `topics` topics with `queues` queues each."""
    names = [prefix] if topics == 1 else [f"{prefix}-{t}" for t in range(topics)]
    return [(name, q) for name in names for q in range(queues)]


def encoded(count: int, pairs: Sequence[QueueKey], first: int = 0) -> list[bytes]:
    """`count` encoded records, record i going to pairs[i % len(pairs)]."""
    ids = MessageIdFactory()
    born = int(time.time() * 1000)
    records = []
    for i in range(first, first + count):
        topic, queue_id = pairs[i % len(pairs)]
        properties = {Prop.TAGS: "t", Prop.KEYS: f"order-{i}", Prop.UNIQ_KEY: ids.new_id(born)}
        message = MessageRecord(
            topic=topic, body=BODY, queue_id=queue_id, properties=properties, born_timestamp=born, born_host=STORE_HOST
        )
        records.append(encode_record(message))
    return records


def batched(records: Sequence[bytes], size: int = BATCH) -> list[bytes]:
    """Records laid end to end, `size` to a batch (the shape of a batch put)."""
    return [b"".join(records[i : i + size]) for i in range(0, len(records), size)]


def pack_into_map(batches: Sequence[bytes], directory: Path) -> float:
    """The reference: records copied into a preallocated mmap, stamped and CRC'd; msgs/s."""
    total = sum(len(b) for b in batches)
    path = directory / "reference.map"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.posix_fallocate(fd, 0, total)
        with mmap.mmap(fd, total) as target:
            count, seconds = _pack_loop(batches, target)
    finally:
        os.close(fd)
        path.unlink()
    return count / seconds


def _pack_loop(batches: Sequence[bytes], target: mmap.mmap) -> tuple[int, float]:
    queue_offsets: dict[int, int] = {}
    position = count = 0
    started = time.perf_counter()
    for batch in batches:
        offset = 0
        while offset < len(batch):
            size = peek_frame(batch, offset)[0]
            queue_id = peek_queue_id(batch, offset)
            queue_offset = queue_offsets.get(queue_id, 0)
            queue_offsets[queue_id] = queue_offset + 1
            target[position : position + size] = batch[offset : offset + size]
            stamp_record(
                target,
                position,
                queue_offset=queue_offset,
                physical_offset=position,
                store_timestamp=int(time.time() * 1000),
                store_host=STORE_HOST,
            )
            position += size
            offset += size
            count += 1
    seconds = time.perf_counter() - started
    return count, seconds
