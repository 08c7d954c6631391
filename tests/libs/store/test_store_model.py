"""The store against a model: every put message stays pullable at its dense queue offset.

Through segment and ConsumeQueue file rolls, clean restarts and (second machine)
crashes that keep what the page cache had, every (topic, queue) reads back as a
list of the bodies put to it, in order.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from libs.store.message_store import MessageStore
from tests.support.clock import FakeClock
from tests.support.examples import examples
from tests.support.store import bodies, crash, make_config, record

TOPICS = st.sampled_from(["A", "B"])
QUEUES = st.integers(0, 2)
BODIES = st.binary(max_size=300)
TINY = {"segment_size": 4096, "cq_units_per_file": 5}


class StoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.model: dict[tuple[str, int], list[bytes]] = {}
        self.clock = FakeClock()

    @initialize()
    def open_store(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.store = self.reopen()

    def reopen(self) -> MessageStore:
        store = MessageStore(make_config(Path(self.tmp.name), **TINY), clock=self.clock, monotonic=self.clock)
        store.open()
        return store

    def teardown(self) -> None:
        if hasattr(self, "store"):
            asyncio.run(self.store.close())
            self.tmp.cleanup()

    @rule(topic=TOPICS, queue_id=QUEUES, body=BODIES)
    def put(self, topic: str, queue_id: int, body: bytes) -> None:
        [result] = self.store.append(record(topic, queue_id, body)).stored
        sent = self.model.setdefault((topic, queue_id), [])
        assert result.queue_offset == len(sent)
        sent.append(body)

    @rule(messages=st.lists(st.tuples(TOPICS, QUEUES, BODIES), min_size=1, max_size=8))
    def put_batch(self, messages: list[tuple[str, int, bytes]]) -> None:
        outcome = self.store.append(b"".join(record(t, q, b) for t, q, b in messages))
        assert outcome.failure is None
        for (topic, queue_id, body), result in zip(messages, outcome.stored, strict=True):
            sent = self.model.setdefault((topic, queue_id), [])
            assert (result.topic, result.queue_id, result.queue_offset) == (topic, queue_id, len(sent))
            sent.append(body)

    @rule(topic=TOPICS, queue_id=QUEUES, data=st.data(), max_count=st.integers(1, 10))
    def pull(self, topic: str, queue_id: int, data: st.DataObject, max_count: int) -> None:
        sent = self.model.get((topic, queue_id), [])
        offset = data.draw(st.integers(0, len(sent)))
        pulled = self.store.pull(topic, queue_id, offset, max_count)
        assert bodies(pulled) == sent[offset : offset + max_count]
        assert pulled.next_offset == offset + len(pulled.records)
        assert (pulled.min_offset, pulled.max_offset) == (0, len(sent))

    @rule()
    def flush(self) -> None:
        asyncio.run(self.store.flusher.flush())

    @rule()
    def restart_clean(self) -> None:
        asyncio.run(self.store.close())
        self.store = self.reopen()

    @invariant()
    def every_message_is_where_it_was_put(self) -> None:
        if not hasattr(self, "store"):
            return
        for (topic, queue_id), sent in self.model.items():
            assert self.store.queue_offsets(topic, queue_id) == (0, len(sent)), f"{topic}/{queue_id}"
            assert bodies(self.store.pull(topic, queue_id, 0, len(sent) + 1)) == sent, f"{topic}/{queue_id}"


class CrashingStoreModel(StoreModel):
    """As above, with kill -9 (files as the page cache had them) and checkpoints at any point."""

    @rule()
    def checkpoint(self) -> None:
        self.clock.advance(self.store.config.checkpoint_interval_ms / 1000)
        asyncio.run(self.store.flusher.flush())

    @precondition(lambda self: hasattr(self, "store"))
    @rule()
    def crash_and_recover(self) -> None:
        crash(self.store)
        self.store = self.reopen()


SETTINGS = settings(
    max_examples=examples(40), stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

TestStoreModel = StoreModel.TestCase
TestStoreModel.settings = SETTINGS

TestCrashingStoreModel = CrashingStoreModel.TestCase
TestCrashingStoreModel.settings = settings(SETTINGS, phases=[Phase.explicit, Phase.reuse, Phase.generate])
