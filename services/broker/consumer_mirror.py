"""A master's consumer metadata, and a slave's copy of it (libs.broker_api.replication.ConsumerMetadata).

RocketMQ's slave copies its master's consumer offsets, subscription groups and delay
offsets every few seconds (SlaveSynchronize). A Petrel slave does the same every
`CONSUMERS_SYNC_SECONDS`: the groups' offsets (the lowest offset not yet done of each
queue, so a lease in flight at a failover is delivered again by the new master), the
groups and their subscriptions (each with the retry queue it had), and the key receipt
handles are signed with, so that a handle given by the old master is understood by the
new one (its lease is not known there: it is answered lease-ended, and the message is
delivered again). The timer's progress is the timer service's, by queue offset, which a
slave shares with its master.

Also copied, so that a promoted slave goes on where its master was (issue 27):
- the dead letters redriven by id (RedrivenMarks, a table beside the offsets): with the
  redrive cursor, which is a consumer offset, they say what has left the DLQ; a promoted
  slave does not redrive them again;
- the failed attempts of messages redelivered in place (FIFO, broadcast), which the master
  counts in memory only (ConsumeWindow.in_place_attempts): the slave writes them to a table
  (AttemptStore), and a broker starting on its store begins its windows with them, so a
  message's attempts go on counting and it reaches the DLQ after max attempts as it would have.
A retried message's attempts need no copy: its retry copy, in the CommitLog, carries them
(`reconsume_times`), and so does its dead-letter copy.

Why this path and not records in the CommitLog: these are the consumers' state, which this
copy already carries every second with the offsets they belong with (a mark without its
cursor, or a count without its offset, would be read against the wrong position); records in
the log would need a new record type, a replay at start and their own retention, for the
same window. What changed in the second before a failover may be lost: a redrive made again
or an attempt counted again, a duplicate after a crash as the promise allows, never a loss.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
from pathlib import Path

from libs.broker_api.replication import AttemptEntry, ConsumerMetadata, OffsetEntry, RedrivenEntry, SubscriptionEntry
from libs.private_files import ensure_private, write_private
from services.broker.consume.groups import GroupTable, Subscription
from services.broker.consume.pop import PopService
from services.broker.consume.redriven import RedrivenMarks
from services.broker.metadata import AttemptCounts, AttemptStore
from services.broker.offsets import ConsumerOffsets

RECEIPT_KEY_FILE = "receipt.key"
CONSUMERS_SYNC_SECONDS = 1.0


def receipt_key(store_dir: Path) -> bytes:
    """The key this broker signs receipt handles with: made once, kept in its store dir."""
    path = store_dir / RECEIPT_KEY_FILE
    if path.exists():
        ensure_private(path, create=False)  # made readable to all by an older Petrel: narrowed, with a warning
    else:
        write_private(path, secrets.token_bytes(32))
    key = path.read_bytes()
    if len(key) < 16:
        raise RuntimeError(f"{path} holds {len(key)} bytes, not a receipt-signing key: delete it to make a new one")
    return key


def snapshot(offsets: ConsumerOffsets, pop: PopService, redriven: RedrivenMarks) -> ConsumerMetadata:
    groups = pop.groups
    return ConsumerMetadata(
        offsets=[OffsetEntry(owner=o, topic=t, queue_id=q, offset=v) for (o, t, q), v in offsets.all().items()],
        groups=groups.all(),
        subscriptions=[
            SubscriptionEntry(
                group=s.group,
                topic=s.topic,
                filter_type=s.filter_type,
                expression=s.expression,
                retry_queue_id=s.retry_queue_id,
            )
            for g in groups.all()
            for s in groups.subscriptions(g.name)
        ],
        receipt_key=base64.b64encode(pop.receipt_key).decode(),
        redriven=[
            RedrivenEntry(group=group, dlq_offset=offset)
            for group, marks in redriven.all().items()
            for offset in sorted(marks)
        ],
        attempts=[
            AttemptEntry(owner=k.owner, topic=k.topic, queue_id=k.queue_id, queue_offset=offset, failed=failed)
            for k, window in pop.windows.items()
            for offset, failed in window.in_place_attempts.items()
            if failed > 0
        ],
    )


class ConsumerMirror:
    """A slave's copy of its master's consumer metadata, applied as it arrives."""

    def __init__(
        self,
        offsets: ConsumerOffsets,
        groups: GroupTable,
        store_dir: Path,
        redriven: RedrivenMarks,
        attempts: AttemptStore,
    ) -> None:
        self.offsets = offsets
        self.groups = groups
        self.store_dir = store_dir
        self.redriven = redriven
        self.attempts = attempts
        self._counts: AttemptCounts | None = None
        """The attempt counts as last written here (the table is written only when they change)."""
        self._key: bytes | None = None
        """The master's receipt key as last written here (the file is written only when it changes)."""

    async def apply(self, metadata: ConsumerMetadata) -> None:
        for entry in metadata.offsets:
            self.offsets.commit(entry.owner, entry.topic, entry.queue_id, entry.offset)
        subscriptions = [
            Subscription(s.group, s.topic, s.filter_type, s.expression, s.retry_queue_id)
            for s in metadata.subscriptions
        ]
        await self.groups.mirror(metadata.groups, subscriptions)
        marks: dict[str, set[int]] = {}
        for mark in metadata.redriven:
            marks.setdefault(mark.group, set()).add(mark.dlq_offset)
        await self.redriven.mirror(marks)
        counts: AttemptCounts = {}
        for attempt in metadata.attempts:
            counts.setdefault((attempt.owner, attempt.topic, attempt.queue_id), {})[attempt.queue_offset] = (
                attempt.failed
            )
        if counts != self._counts:
            await asyncio.to_thread(self.attempts.replace, counts)
            self._counts = counts
        key = base64.b64decode(metadata.receipt_key)
        if len(key) >= 16 and key != self._key:
            path = self.store_dir / RECEIPT_KEY_FILE
            if not path.exists() or path.read_bytes() != key:
                write_private(path, key)  # read when this broker next starts: as the master, if it is promoted
            self._key = key
