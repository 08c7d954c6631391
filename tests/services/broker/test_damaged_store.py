"""A broker whose CommitLog has a flipped bit mid-log: it will not start and cut; after a repair nothing is lost."""

from __future__ import annotations

import pytest

from libs.store.recovery import DamagedLog
from services.broker.app import create_app
from tests.support.apps import broker_settings, in_process
from tests.support.broker_calls import bodies, make_group, put, receive
from tests.support.serving import ServedApp
from tests.support.store_tools import run_cli


async def test_a_broker_refuses_to_start_on_mid_log_damage_and_after_a_repair_delivers_every_other_message(
    nameserver: ServedApp, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = broker_settings(nameserver)
    async for client in in_process(create_app(settings)):
        await client.put("/internal/topics/orders", json={"read_queues": 1, "write_queues": 1})
        await make_group(client)
        await put(client, *(f"m{i}" for i in range(10)))
        offsets = await client.get("/internal/topics/orders/queues/0/offsets")
        assert offsets.json()["max_offset"] == 10
    store = settings.store_dir
    # As if the broker crashed before its first checkpoint, with a bit flipped on disk in message m4.
    (store / "checkpoint").unlink()
    (store / "abort").touch()
    segment = store / "commitlog" / f"{0:020d}"
    raw = bytearray(segment.read_bytes())
    at = raw.index(b"m4") + 1
    raw[at] ^= 0x01
    segment.write_bytes(bytes(raw))

    with pytest.raises(DamagedLog) as refused:
        async for _ in in_process(create_app(settings)):
            pass
    assert f"CommitLog segment {segment} has a damaged record at offset " in str(refused.value)
    assert f"`petrel store repair {store}`" in str(refused.value)
    assert segment.read_bytes() == bytes(raw)  # nothing was cut

    code, out, _ = run_cli(capsys, "store", "repair", str(store))
    assert code == 0
    assert out[-1] == f"repaired {store}: 1 damaged region(s) quarantined"

    async for client in in_process(create_app(settings)):
        assert bodies(await receive(client)) == sorted(f"m{i}" for i in range(10) if i != 4)
        await put(client, "after")
        assert bodies(await receive(client)) == ["after"]
        offsets = await client.get("/internal/topics/orders/queues/0/offsets")
        assert offsets.json()["max_offset"] == 11
