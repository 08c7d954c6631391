"""`petrel store dump`: records and ConsumeQueue units, as lines or JSON."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from libs.codec import encode_record
from libs.message import MessageRecord, SysFlag, tags_code
from libs.store.message_store import PutResult
from libs.store.tools import dump
from tests.support.store_tools import (
    BODY_PAD,
    T0,
    Store,
    run_cli,
    write_store,
)

# ---- dump ----------------------------------------------------------------------------


def expected_line(put: PutResult, i: int) -> str:
    body = f"message {i} ".encode() + BODY_PAD
    return (
        f"offset={put.physical_offset} size={put.size} queue={put.topic}/{put.queue_id} "
        f"queue_offset={put.queue_offset} stored=2023-11-14T22:13:20.000Z id=ID{i:04d} "
        f"tag={'TagB' if put.topic == 'audit' else 'TagA'} keys=k{i},j{i} body={body.decode()[:60]!r}..."
    )


def test_dump_prints_records_in_commitlog_order(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "store", "dump", str(store.root), "--limit", "3")

    assert code == 0
    assert out == [expected_line(store.puts[i], i) for i in range(3)]


def test_dump_filters_by_topic_queue_and_offset(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    start = store.puts[300].physical_offset
    code, out, _ = run_cli(
        capsys, "store", "dump", str(store.root), "--topic", "orders", "--queue", "2", "--from", str(start)
    )

    wanted = [i for i, p in enumerate(store.puts) if (p.topic, p.queue_id) == ("orders", 2) and i >= 300]
    assert code == 0
    assert out == [expected_line(store.puts[i], i) for i in wanted]


def test_dump_json_carries_every_field_and_the_whole_body(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "store", "dump", str(store.root), "--json", "--topic", "audit", "--limit", "1")

    put = store.puts[9]
    assert code == 0
    assert [json.loads(line) for line in out] == [
        {
            "physical_offset": put.physical_offset,
            "size": put.size,
            "topic": "audit",
            "queue_id": 0,
            "queue_offset": 0,
            "store_timestamp": int(T0 * 1000),
            "stored": "2023-11-14T22:13:20.000Z",
            "born_timestamp": 0,
            "born_host": "0.0.0.0:0",
            "store_host": "127.0.0.1:0",
            "message_id": "ID0009",
            "tag": "TagB",
            "keys": ["k9", "j9"],
            "flag": 0,
            "sysflag": 0,
            "reconsume_times": 0,
            "properties": {"TAGS": "TagB", "UNIQ_KEY": "ID0009", "KEYS": "k9 j9"},
            "body": "message 9 " + BODY_PAD.decode(),
        }
    ]


async def test_dump_shows_a_binary_body_as_base64(tmp_path: Path) -> None:
    body = bytes(range(256))
    record = MessageRecord(topic="bin", body=body, properties={"UNIQ_KEY": "B1"}, sysflag=SysFlag.BINARY_BODY)
    root = tmp_path / "store"
    await write_store(root, [encode_record(record)])

    (stored,) = dump.records(root)

    encoded = base64.b64encode(body).decode()
    assert dump.record_line(stored).endswith(f"tag=- keys=- body_base64={encoded[:60]}...")
    assert json.loads(dump.record_json(stored))["body_base64"] == encoded
    assert "body" not in json.loads(dump.record_json(stored))


def test_dump_of_a_consumequeue_prints_its_units(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys, "store", "dump", str(store.root), "--consumequeue", "audit", "0", "--from", "49", "--limit", "2"
    )

    units = [store.put("audit", 0, n) for n in (49, 50)]
    assert code == 0
    assert out == [
        f"queue_offset={p.queue_offset} offset={p.physical_offset} size={p.size} tags_code={tags_code('TagB')}"
        for p in units
    ]
    code, out, _ = run_cli(
        capsys, "store", "dump", str(store.root), "--consumequeue", "audit", "0", "--json", "--limit", "1"
    )
    first = store.put("audit", 0, 0)
    assert json.loads(out[0]) == {
        "queue_offset": 0,
        "physical_offset": first.physical_offset,
        "size": first.size,
        "tags_code": tags_code("TagB"),
    }


def test_dump_of_a_consumequeue_that_is_not_there_fails(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "store", "dump", str(store.root), "--consumequeue", "orders", "9")

    assert (code, out) == (1, [])
    assert err == f"petrel store dump: {store.root} has no ConsumeQueue orders/9\n"


def test_dump_stops_with_the_offset_of_a_record_it_cannot_frame(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = store.puts[2]
    store.write(victim.physical_offset + 4, bytes.fromhex("deadbeef"))

    code, out, err = run_cli(capsys, "store", "dump", str(store.root))

    assert code == 1
    assert out == [expected_line(store.puts[i], i) for i in range(2)]
    assert err == f"petrel store dump: record at offset {victim.physical_offset}: bad magic code 0xdeadbeef\n"
