"""The binary record codec and the message model it carries."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from libs import codec
from libs.codec import (
    HEADER,
    MAX_BODY_SIZE,
    MAX_PROPERTIES_BYTES,
    MIN_RECORD_SIZE,
    decode_record,
    encode_batch,
    encode_blank,
    encode_new_record,
    encode_record,
    iter_records,
    pack_host,
    recast_record,
    record_size,
    stamp_record,
)
from libs.errors import CorruptRecord, InvalidMessage
from libs.message import MessageIdFactory, MessageRecord, Prop

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
PORTS = st.integers(0, 65535)
PROPERTY_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"))


def _truncate_to_255_bytes(text: str) -> str:
    return text.encode()[:255].decode(errors="ignore")


TOPICS = st.text(st.characters(codec="utf-8"), min_size=1, max_size=255).map(_truncate_to_255_bytes).filter(bool)
IPV4_HOSTS = st.builds(lambda ip, port: f"{ip}:{port}", st.ip_addresses(v=4), PORTS)
IPV6_HOSTS = st.builds(
    lambda ip, port: f"[{ip.compressed}]:{port}",
    st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address).filter(lambda ip: ip.ipv4_mapped is None),
    PORTS,
)
HOSTS = IPV4_HOSTS | IPV6_HOSTS

RECORDS = st.builds(
    MessageRecord,
    topic=TOPICS,
    body=st.binary(max_size=2048),
    queue_id=INT32,
    flag=INT32,
    properties=st.dictionaries(PROPERTY_TEXT.filter(bool), PROPERTY_TEXT, max_size=8),
    sysflag=INT32,
    born_timestamp=INT64,
    born_host=HOSTS,
    store_timestamp=INT64,
    store_host=HOSTS,
    reconsume_times=INT32,
    prepared_transaction_offset=INT64,
    queue_offset=INT64,
    physical_offset=INT64,
)
STAMPS = st.fixed_dictionaries(
    {"queue_offset": INT64, "physical_offset": INT64, "store_timestamp": INT64, "store_host": HOSTS}
)
MESSAGE_ID = re.compile(r"[0-9A-F]{32}")

SAMPLE = MessageRecord(
    topic="orders",
    body=b"hello petrel",
    queue_id=3,
    flag=7,
    properties={Prop.TAGS: "paid", Prop.KEYS: "k1 k2", "colour": "blau"},
    born_timestamp=1_700_000_000_000,
    born_host="10.0.0.1:5000",
)


def sample(**overrides: Any) -> MessageRecord:
    return dataclasses.replace(SAMPLE, **overrides)


@given(RECORDS)
def test_decode_returns_exactly_the_encoded_record(record: MessageRecord) -> None:
    assert decode_record(encode_record(record)) == record


@pytest.mark.parametrize(
    ("host", "decoded"),
    [("[::ffff:192.0.2.7]:80", "192.0.2.7:80"), ("[2001:0db8:0000:0000:0000:0000:0000:0001]:9", "[2001:db8::1]:9")],
    ids=["ipv4-mapped becomes ipv4", "ipv6 is compressed"],
)
def test_hosts_decode_in_normal_form(host: str, decoded: str) -> None:
    assert decode_record(encode_record(sample(born_host=host))).born_host == decoded


def test_body_of_exactly_max_body_size_round_trips() -> None:
    body = bytes(range(256)) * (MAX_BODY_SIZE // 256)
    assert len(body) == MAX_BODY_SIZE
    assert decode_record(encode_record(sample(body=body))).body == body


def test_body_one_byte_over_the_limit_is_refused() -> None:
    with pytest.raises(InvalidMessage) as raised:
        encode_record(sample(body=b"x" * (MAX_BODY_SIZE + 1)))
    assert raised.value.detail == "body is 4194305 bytes; the limit is 4194304"


def test_topic_limit_counts_utf8_bytes_not_characters() -> None:
    at_limit = "é" * 127 + "a"  # 128 characters, 255 bytes
    assert decode_record(encode_record(sample(topic=at_limit))).topic == at_limit


@pytest.mark.parametrize("topic", ["", "é" * 128], ids=["empty", "128 characters, 256 bytes"])
def test_topic_outside_1_to_255_bytes_is_refused(topic: str) -> None:
    with pytest.raises(InvalidMessage, match=r"^topic must be 1 to 255 bytes$"):
        encode_record(sample(topic=topic))


def test_properties_over_32_kib_encoded_are_refused() -> None:
    properties = {"big": "v" * MAX_PROPERTIES_BYTES}  # "big\x01" + value + "\x02" is 5 bytes over
    with pytest.raises(InvalidMessage) as raised:
        encode_record(sample(properties=properties))
    assert raised.value.detail == "properties are 32773 bytes encoded; the limit is 32768"


@pytest.mark.parametrize("name", ["bad\x01name", "bad\x02name"])
def test_property_name_with_a_control_character_is_refused_by_name(name: str) -> None:
    with pytest.raises(InvalidMessage) as raised:
        encode_record(sample(properties={name: "v"}))
    assert raised.value.detail == f"property {name!r} contains a reserved control character (\\x01 or \\x02)"


def test_property_value_with_a_control_character_names_the_property() -> None:
    with pytest.raises(InvalidMessage) as raised:
        encode_record(sample(properties={"colour": "red\x02green"}))
    assert raised.value.detail == "property 'colour' contains a reserved control character (\\x01 or \\x02)"


def test_empty_property_name_is_refused() -> None:
    with pytest.raises(InvalidMessage, match=r"^a property name is empty$"):
        encode_record(sample(properties={"": "v"}))


@pytest.mark.parametrize(
    "overrides",
    [{"queue_id": 2**31}, {"born_timestamp": 2**63}, {"born_host": "10.0.0.1:4294967296"}],
    ids=["queue_id over int32", "timestamp over int64", "port over uint32"],
)
def test_field_the_format_cannot_hold_is_refused_as_invalid_message(overrides: dict[str, object]) -> None:
    # encode_record's contract: "raises InvalidMessage for what the format cannot hold".
    with pytest.raises(InvalidMessage):
        encode_record(sample(**overrides))


@given(record=RECORDS, data=st.data())
def test_any_single_flipped_byte_is_detected(record: MessageRecord, data: st.DataObject) -> None:
    encoded = bytearray(encode_record(record))
    position = data.draw(st.integers(0, len(encoded) - 1), label="position")
    encoded[position] ^= data.draw(st.integers(1, 255), label="xor")
    with pytest.raises(CorruptRecord):
        decode_record(encoded)


@given(data=st.data())
def test_record_cut_short_is_reported_as_a_torn_write(data: st.DataObject) -> None:
    encoded = encode_record(sample())
    kept = data.draw(st.integers(8, len(encoded) - 1), label="kept")
    with pytest.raises(CorruptRecord) as raised:
        decode_record(encoded[:kept])
    assert raised.value.detail == (
        f"record at offset 0: record claims {len(encoded)} bytes, only {kept} are there (torn write?)"
    )


def test_record_cut_inside_its_header_says_how_many_bytes_are_left() -> None:
    with pytest.raises(CorruptRecord) as raised:
        decode_record(encode_record(sample())[:5])
    assert raised.value.detail == "record at offset 0: only 5 bytes left, a record header needs 8"


def test_bad_magic_is_reported_in_hex() -> None:
    encoded = bytearray(encode_record(sample()))
    encoded[4:8] = b"\x12\x34\xab\xcd"
    with pytest.raises(CorruptRecord) as raised:
        decode_record(encoded)
    assert raised.value.detail == "record at offset 0: bad magic code 0x1234abcd"
    assert raised.value.offset == 0


def test_corruption_is_reported_at_the_records_offset_in_a_batch() -> None:
    batch = bytearray(encode_batch([sample(), sample(body=b"second")]))
    second = record_size(batch)[0]
    batch[second + HEADER.size] ^= 0xFF  # first byte of the second body
    with pytest.raises(CorruptRecord) as raised:
        list(iter_records(batch))
    assert raised.value.offset == second
    assert raised.value.detail.startswith(f"record at offset {second}: CRC mismatch")


@given(record=RECORDS, stamps=STAMPS)
def test_stamped_record_decodes_with_only_the_broker_fields_changed(
    record: MessageRecord, stamps: dict[str, Any]
) -> None:
    buf = bytearray(encode_record(record))
    stamp_record(buf, 0, **stamps)
    assert decode_record(buf) == dataclasses.replace(record, **stamps)


@given(record=RECORDS)
def test_a_new_record_encodes_as_the_record_of_its_fields(record: MessageRecord) -> None:
    """What a gateway sends (no queue, flag or store fields yet) encodes alike without a MessageRecord."""
    new = MessageRecord(
        record.topic, record.body, 0, 0, record.properties, record.sysflag, record.born_timestamp, record.born_host
    )
    packed = pack_host(record.born_host)

    encoded = encode_new_record(new.topic, new.body, new.properties, new.sysflag, new.born_timestamp, packed)

    assert encoded == encode_record(new)


@given(
    record=RECORDS,
    topic=TOPICS,
    queue_id=INT32,
    properties=st.dictionaries(PROPERTY_TEXT.filter(bool), PROPERTY_TEXT, max_size=8),
    sysflag=INT32,
)
def test_a_recast_record_keeps_every_field_but_the_new_ones_and_leaves_the_store_fields_to_stamp(
    record: MessageRecord, topic: str, queue_id: int, properties: dict[str, str], sysflag: int
) -> None:
    """A half copy and a committed copy are recast from the stored bytes (the body never decoded)."""
    batch = encode_record(sample()) + encode_record(record)
    at = record_size(batch)[0]

    recast = decode_record(recast_record(batch, at, topic, queue_id, properties, sysflag))

    unstamped = MessageRecord(topic, b"").store_host
    assert recast == dataclasses.replace(
        record,
        topic=topic,
        queue_id=queue_id,
        properties=properties,
        sysflag=sysflag,
        queue_offset=0,
        physical_offset=0,
        store_timestamp=0,
        store_host=unstamped,
    )


def test_a_recast_is_refused_what_an_encode_is_refused_and_a_filler_is_not_recast() -> None:
    raw = encode_record(sample())
    with pytest.raises(InvalidMessage, match="topic must be 1 to 255 bytes"):
        recast_record(raw, 0, "", 0, {}, 0)
    with pytest.raises(InvalidMessage, match="reserved control character"):
        recast_record(raw, 0, "orders", 0, {"bad\x01name": "v"}, 0)
    with pytest.raises(CorruptRecord, match="blank filler"):
        recast_record(encode_blank(200), 0, "orders", 0, {}, 0)


def test_stamping_the_second_record_of_a_batch_leaves_the_first_alone() -> None:
    first, second = sample(body=b"one"), sample(body=b"two")
    buf = bytearray(encode_batch([first, second]))
    at = record_size(buf)[0]
    stamp_record(memoryview(buf), at, queue_offset=5, physical_offset=4096, store_timestamp=9, store_host="1.1.1.1:1")
    stamped = sample(body=b"two", queue_offset=5, physical_offset=4096, store_timestamp=9, store_host="1.1.1.1:1")
    assert list(iter_records(buf)) == [first, stamped]


def test_blank_filler_is_recognised_with_its_size() -> None:
    segment = encode_record(sample()) + encode_blank(100)
    first = record_size(segment)
    assert first == (len(segment) - 100, False)
    assert record_size(segment, first[0]) == (100, True)


def test_blank_filler_is_not_decoded_as_a_message() -> None:
    with pytest.raises(CorruptRecord) as raised:
        decode_record(encode_blank(64))
    assert raised.value.detail == "record at offset 0: expected a message record, found a blank filler"


def test_blank_filler_smaller_than_its_header_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^a blank filler needs at least 8 bytes, got 7$"):
        encode_blank(7)


def test_iter_records_returns_a_batch_in_order() -> None:
    records = [sample(body=f"body {i}".encode(), queue_id=i) for i in range(5)]
    assert list(iter_records(encode_batch(records))) == records
    assert list(iter_records(b"")) == []


def test_struct_sizes_match_the_documented_layout() -> None:
    assert HEADER.size == 112
    assert MIN_RECORD_SIZE == 116
    assert codec.BODY_START == 112


def test_fields_sit_at_their_documented_offsets() -> None:
    record = sample(queue_offset=0x1122, physical_offset=0x3344, store_timestamp=0x5566, reconsume_times=2)
    raw = encode_record(record)
    assert struct.unpack_from(">i", raw, 0)[0] == len(raw)
    assert struct.unpack_from(">I", raw, 4)[0] == codec.MESSAGE_MAGIC
    assert struct.unpack_from(">iiqq", raw, 12) == (3, 7, 0x1122, 0x3344)
    assert struct.unpack_from(">q", raw, 40)[0] == record.born_timestamp
    assert raw[48:68] == bytes(10) + b"\xff\xff" + ipaddress.IPv4Address("10.0.0.1").packed + struct.pack(">I", 5000)
    assert struct.unpack_from(">q", raw, 68)[0] == 0x5566
    assert struct.unpack_from(">iqi", raw, 96) == (2, 0, len(record.body))
    assert raw[112 : 112 + len(record.body)] == record.body
    topic_at = 112 + len(record.body)
    assert raw[topic_at : topic_at + 2 + len("orders")] == b"\x00\x06orders"


def test_one_field_is_read_where_the_record_has_it_without_decoding_it() -> None:
    record = sample(queue_offset=0x1122, physical_offset=0x3344, store_timestamp=0x5566, reconsume_times=2)
    raw = b"pad" + encode_record(record)
    assert codec.peek_frame(raw, 3) == (len(raw) - 3, codec.MESSAGE_MAGIC)
    assert codec.peek_queue_id(raw, 3) == record.queue_id
    assert codec.peek_offsets(raw, 3) == (0x1122, 0x3344)
    assert codec.peek_store_timestamp(raw, 3) == 0x5566
    assert codec.peek_reconsume_times(raw, 3) == 2
    assert codec.crc_matches(raw, 3, len(raw) - 3)
    damaged = bytearray(raw)
    damaged[-1] ^= 0xFF
    assert codec.stored_crc(damaged, 3) != codec.computed_crc(damaged, 3, len(raw) - 3)


def test_message_ids_are_32_upper_case_hex_digits_and_unique() -> None:
    factory = MessageIdFactory()
    ids = [factory.new_id() for _ in range(100_000)]
    assert all(MESSAGE_ID.fullmatch(i) for i in ids), ids[:3]
    assert len(set(ids)) == len(ids)


@given(st.lists(st.integers(0, 2**48 - 1), min_size=2, max_size=50, unique=True))
def test_message_ids_sort_by_the_time_they_were_made(times: list[int]) -> None:
    factory = MessageIdFactory()
    ids = {now: factory.new_id(now_ms=now) for now in times}
    assert sorted(ids.values()) == [ids[now] for now in sorted(times)]


def test_message_ids_made_in_the_same_millisecond_keep_their_order() -> None:
    factory = MessageIdFactory()
    ids = [factory.new_id(now_ms=1_700_000_000_000) for _ in range(1000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == 1000


def test_keys_are_split_on_spaces_ignoring_empty_ones() -> None:
    assert sample(properties={Prop.KEYS: " order-1  order-2 "}).keys == ["order-1", "order-2"]
    assert sample(properties={}).keys == []


def test_tag_and_message_id_come_from_their_system_properties() -> None:
    record = sample(properties={Prop.TAGS: "paid", Prop.UNIQ_KEY: "ABC"})
    assert (record.tag, record.message_id) == ("paid", "ABC")
    assert (sample(properties={}).tag, sample(properties={}).message_id) == (None, None)


def test_user_properties_leave_out_every_system_property() -> None:
    system = dict.fromkeys((Prop.TAGS, Prop.KEYS, Prop.UNIQ_KEY, Prop.DELAY_LEVEL, Prop.MESSAGE_GROUP), "x")
    record = sample(properties={**system, "colour": "blau", "tags": "lower-case is a user's"})
    assert record.user_properties == {"colour": "blau", "tags": "lower-case is a user's"}


@pytest.mark.parametrize(
    "properties",
    [
        {},
        {"UNIQ_KEY": "ABC"},
        {"KEYS": "a b", "UNIQ_KEY": "0A0B", "TAGS": "t"},
        {"XUNIQ_KEY": "decoy", "UNIQ_KEY": "real"},
        {"UNIQ_KEY": "", "a": "UNIQ_KEY\\x01"},
    ],
)
def test_one_property_is_found_as_decoding_them_all_finds_it(properties: dict[str, str]) -> None:
    from libs.codec import peek_property

    record = MessageRecord(topic="orders", body=b"UNIQ_KEY\x01in the body", properties=properties)
    batch = b"\x00" * 7 + encode_record(record)  # at an offset, as in a batch or a segment
    assert peek_property(batch, "UNIQ_KEY", 7) == properties.get("UNIQ_KEY")
