"""A batch's heads read in one pass say what peek_head, unit_code and put_keys would say of each record, and what
a broker keeps back of the batch (its half messages, its delayed records)."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libs.codec import encode_record, peek_head
from libs.delay import is_scheduled
from libs.errors import CorruptRecord
from libs.message import KEY_SEPARATOR, MessageRecord, Prop
from libs.names import SCHEDULE_TOPIC, TIMER_TOPIC
from libs.store.batch_heads import HALF, SCHEDULED, read_heads
from libs.store.index_file import UNIQUE_KEY_PREFIX
from libs.store.message_store import unit_code

TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=12)
KEYS = st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02 "), max_size=6), max_size=3)
PROPERTIES = st.fixed_dictionaries(
    {},
    optional={
        Prop.TAGS: TEXT,
        Prop.KEYS: KEYS.map(KEY_SEPARATOR.join) | TEXT,
        Prop.UNIQ_KEY: TEXT,
        Prop.DEDUP: TEXT,
        Prop.TIMER_DELIVER_MS: st.integers(0, 2**40).map(str) | TEXT,
        Prop.DELAY_LEVEL: st.integers(1, 18).map(str),
        Prop.TRANSACTION_PREPARED: st.sampled_from(["true", "false"]),
        "other": TEXT,
    },
)
RECORDS = st.builds(
    MessageRecord,
    topic=st.sampled_from(["T", "Ü-topic", SCHEDULE_TOPIC, TIMER_TOPIC]),
    body=st.binary(max_size=64),
    queue_id=st.integers(-(2**31), 2**31 - 1),
    properties=PROPERTIES,
)


def expected_hashes(topic: str, properties: dict[str, str]) -> list[int]:
    """What IndexService.put_keys hashes for a message: each `topic#key`, then `#UNIQ#id`."""
    keys = [f"{topic}#{k}" for k in properties.get(Prop.KEYS, "").split(KEY_SEPARATOR) if k]
    unique = properties.get(Prop.UNIQ_KEY)
    return [zlib.crc32(k.encode()) for k in keys + ([UNIQUE_KEY_PREFIX + unique] if unique else [])]


def expected_held(records: list[MessageRecord]) -> int:
    """What a broker keeps back of a batch, as it decided record by record: a half message makes the batch a half
    batch; a delayed record before any half message makes it a scheduled one too."""
    half = scheduled = False
    for r in records:
        half = half or r.properties.get(Prop.TRANSACTION_PREPARED) == "true"
        scheduled = scheduled or (is_scheduled(r.properties) and not half)
    return (HALF if half else 0) | (SCHEDULED if scheduled else 0)


@settings(deadline=None)  # a loaded 2-core machine is slow now and then; the test is not about time
@given(st.lists(RECORDS, max_size=6))
def test_each_head_says_what_peek_head_unit_code_and_put_keys_say(records: list[MessageRecord]) -> None:
    batch = b"".join(encode_record(r) for r in records)
    read = read_heads(batch)
    assert read.failure is None
    assert read.held == expected_held(records)
    assert read.source is batch
    offset = 0
    for size, (topic, queue_id), code, message_id, token, hashes in read.heads:
        head = peek_head(batch, offset)
        assert (size, topic, queue_id) == (head.total_size, head.topic, head.queue_id)
        assert code == unit_code(head)
        assert (message_id, token) == (head.properties.get(Prop.UNIQ_KEY), head.properties.get(Prop.DEDUP))
        assert hashes == expected_hashes(head.topic, head.properties)
        offset += size
    assert offset == len(batch)


def test_a_later_pair_of_the_same_name_wins_as_in_decode_properties() -> None:
    raw = bytearray(encode_record(MessageRecord(topic="T", body=b"", properties={"TAGS": "a", "XXXX": "b"})))
    raw[-7:] = b"TAGS\x01c\x02"  # "XXXX\x01b\x02" -> a second TAGS pair of the same length
    [head] = read_heads(bytes(raw)).heads
    assert head[2] == zlib.crc32(b"c") == unit_code(peek_head(raw))


@pytest.mark.parametrize(
    ("damage", "at"),
    [
        (lambda raw: raw[:-1], 0),  # torn: the batch ends inside the record
        (lambda raw: raw[:4] + b"\x00\x00\x00\x00" + raw[8:], 0),  # bad magic
        (lambda raw: raw[:-3] + b"\xff\xfe\x02", 0),  # properties that are not UTF-8
        (lambda raw: raw[:108] + b"\x7f\xff\xff\xff" + raw[112:], 0),  # a body longer than the record
    ],
    ids=["torn", "magic", "utf-8", "body length"],
)
def test_the_heads_stop_at_the_first_unreadable_record_with_peek_heads_reason(damage: object, at: int) -> None:
    good = encode_record(MessageRecord(topic="T", body=b"good", properties={"TAGS": "a"}))
    bad = damage(encode_record(MessageRecord(topic="T", body=b"bad", properties={"TAGS": "b"})))  # type: ignore[operator]
    batch = good + bad
    read = read_heads(batch)
    assert len(read.heads) == 1
    with pytest.raises(CorruptRecord) as raised:
        peek_head(batch, len(good))
    assert read.failure is not None
    assert read.failure.detail == raised.value.detail
