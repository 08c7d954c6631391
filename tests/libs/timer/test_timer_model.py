"""The TimerStore against a model: a dict of what is pending, checked at every step."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from libs.timer import Action, MessageRef, TimerStore
from tests.support.examples import examples
from tests.support.timer_store import SMALL, T0

PRECISION = SMALL["precision_ms"]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), st.integers(-1_000, 25_000)),
        st.tuples(st.just("advance"), st.integers(0, 4_000)),
        st.tuples(st.just("cancel"), st.integers(0, 1_000)),
        st.tuples(st.just("restart"), st.booleans()),
    ),
    max_size=60,
)


@dataclass
class Model:
    store: TimerStore
    now: int = T0
    due_of: dict[int, int] = field(default_factory=dict)  # message id -> real due time
    pending: dict[int, int] = field(default_factory=dict)  # TimerLog position -> message id, not yet out
    delivered: dict[int, int] = field(default_factory=dict)  # message id -> when
    cancelled: set[int] = field(default_factory=set)

    def fire(self) -> None:
        for entry in self.store.due(self.now):
            message = self.pending.pop(entry.position)
            assert entry.slot_ms + PRECISION - 1 <= self.now, "a slot fired before its last millisecond"
            if entry.action is Action.ROLL:
                assert entry.due_ms // PRECISION > entry.slot_ms // PRECISION
                position = self.store.enqueue(entry.due_ms, entry.ref, self.now, roll_count=entry.roll_count + 1)
                self.pending[position] = message
                continue
            assert message not in self.delivered, f"message {message} delivered twice"
            assert message not in self.cancelled
            assert self.due_of[message] <= self.now, f"message {message} delivered before its due time"
            self.delivered[message] = self.now
        self.store.checkpoint()
        assert self.store.stats().pending == len(self.pending)


def open_store(directory: Path) -> TimerStore:
    return TimerStore(directory, now_ms=T0, **SMALL)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_every_entry_not_cancelled_comes_due_once_and_not_early(steps: list[tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "timer"
        model = Model(open_store(directory))
        for op, arg in steps:
            if op == "enqueue":
                message = len(model.due_of)
                model.due_of[message] = model.now + arg
                position = model.store.enqueue(model.now + arg, MessageRef(0, message, 1), model.now)
                model.pending[position] = message
            elif op == "advance":
                model.now += arg
                model.fire()
            elif op == "cancel" and model.due_of:
                message = arg % len(model.due_of)
                positions = [p for p, m in model.pending.items() if m == message]
                position = positions[0] if positions else next(iter(model.pending), 0)
                expected = position in model.pending
                if expected or model.store.log.end > position:
                    assert model.store.cancel(position) is expected
                if expected:
                    model.cancelled.add(model.pending.pop(position))
            elif op == "restart":
                if arg:
                    model.store.close()
                else:
                    model.store.checkpoint()
                    model.store.abandon()
                model.store = open_store(directory)
        for _ in range(200):
            if not model.pending:
                break
            model.now += 1_000
            model.fire()
        model.store.close()
        assert not model.pending
        assert set(model.delivered) == set(model.due_of) - model.cancelled
