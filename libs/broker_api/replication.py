"""Replication's contract: broker roles, and the frames of the CommitLog stream from a master to its slaves.

`GET /internal/replication/commitlog?from=N` answers one long-lived stream of frames, each
a 12-byte head (the CommitLog offset of its first byte, u64; its length, u32; big-endian)
and that many bytes of the master's CommitLog: whole entries of one segment
(libs.store.replica.read_chunk). When there is nothing new, the master sends an empty frame
every `HEARTBEAT_SECONDS`, at its log's end: the slave learns how far behind it is, and
that the master is alive. A slave that loses the stream asks again from where its own log
ends; nothing is sent twice into one log.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator

from pydantic import BaseModel, Field

from libs.broker_api.groups import GroupConfig
from libs.filters import FilterType

COMMITLOG_STREAM_PATH = "/internal/replication/commitlog"
SLAVE_ACK_PATH = "/internal/replication/slaves/{slave_id}"
EPOCHS_PATH = "/internal/replication/epochs"
CONSUMERS_PATH = "/internal/replication/consumers"
FRAME_HEAD = struct.Struct(">QI")
HEARTBEAT_SECONDS = 1.0


class BrokerRole(enum.StrEnum):
    ASYNC_MASTER = "ASYNC_MASTER"
    """Takes writes and answers them once stored here; its slaves copy its log behind it."""
    SYNC_MASTER = "SYNC_MASTER"
    """Takes writes and answers them once every in-sync slave has them too (services.broker.in_sync)."""
    SLAVE = "SLAVE"
    """Copies its master's log (broker id > 0, the same broker name) and answers reads only."""


def frame(offset: int, chunk: bytes) -> bytes:
    return FRAME_HEAD.pack(offset, len(chunk)) + chunk


class FrameReader:
    """Frames out of a byte stream cut anywhere: feed what arrives, take each whole frame."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        """(offset, chunk) of each frame `data` completes, in order; an empty chunk is a heartbeat."""
        self._buffer += data
        start = 0
        while len(self._buffer) - start >= FRAME_HEAD.size:
            offset, length = FRAME_HEAD.unpack_from(self._buffer, start)
            end = start + FRAME_HEAD.size + length
            if end > len(self._buffer):
                break
            yield offset, bytes(self._buffer[start + FRAME_HEAD.size : end])
            start = end
        del self._buffer[:start]


class SlaveAck(BaseModel):
    """A slave's word to its master: everything below `offset` is written here (flushed, if it syncs)."""

    offset: int = Field(ge=0)
    address: str = Field(description="the slave's host:port")


class SlaveAckAnswer(BaseModel):
    master_end: int = Field(description="where the master's log ends now")
    in_sync: bool = Field(description="this slave is in the master's in-sync set")
    topics_version: int = Field(description="the master's topic table version: a slave that has another copies it")


class SlaveState(BaseModel):
    slave_id: int
    address: str
    acked_offset: int
    lag_bytes: int
    lag_ms: int | None = Field(
        default=None, description="how long ago the oldest message the slave does not have was stored (0: none)"
    )
    in_sync: bool
    heard_seconds_ago: float


class OffsetEntry(BaseModel):
    owner: str = Field(description="a group, or `group@client` of a broadcast group")
    topic: str
    queue_id: int
    offset: int = Field(description="the lowest offset not yet done: what was in flight is delivered again")


class SubscriptionEntry(BaseModel):
    group: str
    topic: str
    filter_type: FilterType
    expression: str
    retry_queue_id: int


class RedrivenEntry(BaseModel):
    """A dead letter a redrive by id sent back, past its group's redrive cursor (its DLQ offset)."""

    group: str
    dlq_offset: int


class AttemptEntry(BaseModel):
    """Failed attempts of a message redelivered in place (FIFO, broadcast), not yet done."""

    owner: str = Field(description="a group, or `group@client` of a broadcast group")
    topic: str
    queue_id: int
    queue_offset: int
    failed: int = Field(ge=1)


class ConsumerMetadata(BaseModel):
    """What a master's consumers need kept beside its log, copied by its slaves every second: the groups'
    offsets, the groups and their subscriptions, the key receipt handles are signed with, the dead letters
    redriven by id, and the failed attempts of messages redelivered in place.

    A retried message's attempts are in its retry copy (`reconsume_times`), in the CommitLog itself."""

    offsets: list[OffsetEntry]
    groups: list[GroupConfig]
    subscriptions: list[SubscriptionEntry]
    receipt_key: str = Field(description="base64")
    redriven: list[RedrivenEntry] = Field(default_factory=list, description="every redrive mark")
    attempts: list[AttemptEntry] = Field(default_factory=list, description="every in-place attempt count")


class EpochHistory(BaseModel):
    """At which CommitLog offset each epoch began, on this broker (libs.store.epochs), and where its log ends."""

    epochs: list[tuple[int, int]] = Field(description="(epoch, start offset), oldest first")
    log_end: int


class ReplicationStatus(BaseModel):
    """Where a broker stands in its broker name's replication."""

    role: BrokerRole
    broker_name: str
    broker_id: int
    commitlog_end: int = Field(description="where this broker's CommitLog ends (its next byte's offset)")
    epoch: int = Field(default=0, description="under a controller: the last epoch this broker holds data of")
    fenced: bool = Field(
        default=False, description="a master under a controller whose lease ran out: it takes no write"
    )
    master: str | None = Field(default=None, description="a slave's master (host:port)")
    connected: bool = Field(default=False, description="a slave: its stream from the master is open")
    master_end: int | None = Field(default=None, description="a slave: where the master's log ended, last heard")
    lag_bytes: int | None = Field(default=None, description="a slave: master_end - commitlog_end")
    slaves_streaming: int = Field(default=0, description="a master: streams open to its slaves")
    slaves: list[SlaveState] = Field(default_factory=list, description="a master: each slave that said where it is")
    in_sync: list[int] = Field(
        default_factory=list, description="a master: the ids of the slaves in its in-sync set (SYNC_MASTER waits)"
    )
    electable: list[int] | None = Field(
        default=None,
        description="a master under a controller: the slaves its in-sync set in etcd names, those the controller may "
        "promote if this master fails. A slave joins `in_sync` here first, then this set once etcd has taken it",
    )
