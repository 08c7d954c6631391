"""The hot modules, as this run loads them (compiled where a build exists), keep nothing of a call once it returns.

mypyc 1.20 compiles `bytes + bytes` as if the concatenation took over its left operand and never
releases it (mypyc/mypyc#1192): each receipt handle a broker checked and each message id it peeked
stayed in memory, about 250 bytes a message received and acked (a broker grew 25 MB for every
100,000 messages, without bound). Each call below is repeated and the interpreter's count of
allocated blocks must come back to where it was; a call that leaks one block is 2,000 blocks.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable

import pytest

from libs import codec, receipt
from libs.message import MessageIdFactory, MessageRecord, Prop
from libs.receipt import ReceiptHandle, ReceiptKey
from libs.store.batch_heads import read_heads

CALLS = 2_000
KEPT_AT_MOST = 50
"""Blocks a run of CALLS calls may leave (caches, free lists): far fewer than one a call."""

KEY = ReceiptKey(b"k" * 32)
HANDLE = ReceiptHandle("broker-a", "orders-group", "", "orders", 3, 123_456, 789, 1_795_917_803_763, 1_795_917_903_763)
TEXT = HANDLE.encode(KEY)
RECORD = codec.encode_record(
    MessageRecord(
        topic="orders",
        body=b"x" * 1024,
        queue_id=2,
        properties={Prop.TAGS: "paid", Prop.KEYS: "order-1", Prop.UNIQ_KEY: MessageIdFactory().new_id(1)},
        born_timestamp=1,
        born_host="127.0.0.1:10911",
    )
)


def uncached_pack_host() -> bytes:
    codec.pack_host.cache_clear()
    return codec.pack_host("127.0.0.1:10911")


CALLS_BY_NAME: dict[str, Callable[[], object]] = {
    "receipt handle encode": lambda: HANDLE.encode(KEY),
    "receipt handle decode, signature checked": lambda: ReceiptHandle.decode(TEXT, KEY),
    "receipt handle decode": lambda: ReceiptHandle.decode(TEXT),
    "peek a property": lambda: codec.peek_property(RECORD, Prop.UNIQ_KEY),
    "peek a property not there": lambda: codec.peek_property(RECORD, Prop.DEDUP),
    "pack a host": uncached_pack_host,
    "encode a record": lambda: codec.encode_record(codec.decode_record(RECORD)),
    "read a batch's heads": lambda: read_heads(RECORD * 4),
}


def blocks_left(call: Callable[[], object], rounds: int = 3) -> int:
    """The fewest blocks a round of CALLS calls left allocated (another thread of the process may allocate or
    free meanwhile: a leak leaves at least CALLS in every round)."""
    call()  # caches and free lists filled before counting
    left = []
    gc.collect()
    gc.freeze()  # what the process holds already is not collected again: each collection below sees only the calls'
    try:
        for _ in range(rounds):
            gc.collect()
            before = sys.getallocatedblocks()
            for _ in range(CALLS):
                call()
            gc.collect()
            left.append(sys.getallocatedblocks() - before)
    finally:
        gc.unfreeze()
    return min(left)


@pytest.mark.parametrize("name", sorted(CALLS_BY_NAME))
def test_a_hot_call_leaves_no_memory_behind(name: str) -> None:
    assert blocks_left(CALLS_BY_NAME[name]) <= KEPT_AT_MOST


def test_the_check_would_see_a_leak_of_one_block_a_call() -> None:
    kept: list[bytes] = []
    assert blocks_left(lambda: kept.append(bytes(40))) > 10 * KEPT_AT_MOST


def test_these_runs_use_the_modules_the_services_load() -> None:
    from libs.compiled import is_compiled

    assert is_compiled(codec) == is_compiled(receipt)  # one build holds both, or neither is compiled
