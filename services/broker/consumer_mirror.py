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
"""

from __future__ import annotations

import base64
import secrets
from pathlib import Path

from libs.broker_api.replication import ConsumerMetadata, OffsetEntry, SubscriptionEntry
from libs.private_files import ensure_private, write_private
from services.broker.consume.groups import GroupTable, Subscription
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


def snapshot(offsets: ConsumerOffsets, groups: GroupTable, key: bytes) -> ConsumerMetadata:
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
        receipt_key=base64.b64encode(key).decode(),
    )


class ConsumerMirror:
    """A slave's copy of its master's consumer metadata, applied as it arrives."""

    def __init__(self, offsets: ConsumerOffsets, groups: GroupTable, store_dir: Path) -> None:
        self.offsets = offsets
        self.groups = groups
        self.store_dir = store_dir
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
        key = base64.b64decode(metadata.receipt_key)
        if len(key) >= 16 and key != self._key:
            path = self.store_dir / RECEIPT_KEY_FILE
            if not path.exists() or path.read_bytes() != key:
                write_private(path, key)  # read when this broker next starts: as the master, if it is promoted
            self._key = key
