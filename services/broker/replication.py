"""Replication's routes at the broker: a master's CommitLog stream to its slaves, and where a broker stands.

The state behind them is in services.broker.replication_state; a slave's follower in
services.broker.replica_follower; the frames in libs.broker_api.replication.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import StreamingResponse

from libs.broker_api.replication import (
    COMMITLOG_STREAM_PATH,
    CONSUMERS_PATH,
    EPOCHS_PATH,
    SLAVE_ACK_PATH,
    ConsumerMetadata,
    EpochHistory,
    ReplicationStatus,
    SlaveAck,
    SlaveAckAnswer,
)
from libs.errors import NotMaster
from libs.problem import PROBLEM_RESPONSES
from services.broker.consumer_mirror import snapshot
from services.broker.context import Context

router = APIRouter(tags=["broker"], responses=PROBLEM_RESPONSES)


@router.get(
    COMMITLOG_STREAM_PATH,
    operation_id="streamCommitLog",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/octet-stream": {}}}},
)
async def stream_commitlog(
    ctx: Context, start: Annotated[int, Query(alias="from", ge=0, description="the slave's log end")]
) -> StreamingResponse:
    """This master's CommitLog from `from` on, as frames, for as long as the caller reads (a slave's copy)."""
    if ctx.replication.source is None:
        raise NotMaster(f"this broker is a slave of {ctx.settings.broker_name}", master=ctx.replication.master)
    ctx.replication.source.check_start(start)
    return StreamingResponse(
        ctx.replication.source.stream(start),
        media_type="application/octet-stream",
        headers={"connection": "close"},  # a stream that ends (the master stops) takes its connection with it
    )


@router.get("/internal/replication", operation_id="getReplicationStatus", response_model=ReplicationStatus)
async def get_replication_status(
    ctx: Context,
    in_sync: Annotated[
        int | None,
        Query(
            ge=0,
            description="a master: first wait until this slave id is in its in-sync set (under a controller, also "
            "in the set etcd records: `electable`)",
        ),
    ] = None,
    wait_ms: Annotated[int, Query(ge=0, le=60_000, description="how long to wait for `in_sync`")] = 0,
) -> ReplicationStatus:
    """Where this broker stands: its role, its log's end, its slaves and in-sync set, or a slave's lag."""
    if in_sync is not None:
        await ctx.replication.joined(in_sync, wait_ms / 1000)
    return ctx.replication.status()


@router.put(SLAVE_ACK_PATH, operation_id="ackReplication", response_model=SlaveAckAnswer)
async def ack_replication(
    ctx: Context, slave_id: Annotated[int, Path(ge=0, description="the slave's broker id")], body: SlaveAck
) -> SlaveAckAnswer:
    """A slave says how far it has written this master's log (a SYNC_MASTER's puts wait for its in-sync slaves)."""
    return ctx.replication.acked(slave_id, body)


@router.get(EPOCHS_PATH, operation_id="getEpochHistory", response_model=EpochHistory)
async def get_epochs(ctx: Context) -> EpochHistory:
    """Where each epoch began in this broker's CommitLog: a returning slave truncates where its history parts."""
    return EpochHistory(epochs=ctx.replication.epochs.entries, log_end=ctx.store.commitlog.write_offset)


@router.get(CONSUMERS_PATH, operation_id="getConsumerMetadata", response_model=ConsumerMetadata)
async def get_consumers(ctx: Context) -> ConsumerMetadata:
    """The consumers' offsets, groups, subscriptions and receipt key: what a slave copies every second."""
    return snapshot(ctx.offsets, ctx.pop, ctx.dead_letters.redriven)
