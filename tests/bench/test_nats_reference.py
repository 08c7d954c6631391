"""The NATS JetStream reference against the machine's NATS server (127.0.0.1:4222), for a fraction of a second."""

from __future__ import annotations

import pytest

from bench.loopback import free_port
from bench.nats_reference import LOCAL_NATS, answers, drive, stream_name


def test_a_port_where_nothing_listens_is_no_nats() -> None:
    assert not answers(f"nats://127.0.0.1:{free_port()}", timeout=0.5)


@pytest.mark.skipif(not answers(LOCAL_NATS), reason=f"no NATS server answers on {LOCAL_NATS}")
async def test_publishes_are_acked_by_a_stream_of_its_own_which_is_deleted_after() -> None:
    import nats

    name = stream_name()

    tally = await drive(LOCAL_NATS, warmup=0.0, seconds=0.2, name=name)

    assert tally.requests > 0
    assert (tally.errors, tally.first_error) == (0, None)
    client = await nats.connect(LOCAL_NATS)
    try:
        left = [s.config.name for s in await client.jetstream().streams_info()]
    finally:
        await client.close()
    assert name not in left
