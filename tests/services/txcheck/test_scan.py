"""HalfScanner against a real broker and the real Redis: which half copies get a check, and what is remembered."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, cast

import pytest
import redis

from libs.broker_api.wire import CHECK_IMMUNITY, FIRST_STORED
from libs.message import MessageRecord, Prop
from libs.names import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from services.txcheck.brokers import Broker, Brokers
from services.txcheck.ended import EndedTransactions
from services.txcheck.scan import SYSTEM_GROUP, CheckOrder, HalfScanner, ScanOptions, due_at, ended_ops
from tests.support.clock import FakeClock
from tests.support.serving import free_port
from tests.support.txcheck import TxBroker

TIMEOUT_MS = 6000
IMMUNE = {CHECK_IMMUNITY: "0"}
"""A first check due as soon as the copy is stored; later ones after the timeout (so no sleeping is needed)."""


@pytest.fixture
def api(brokers: Brokers) -> Brokers:
    return brokers


def make_scanner(
    api: Brokers,
    client: redis.Redis,
    prefix: str,
    clock: FakeClock,
    dispatched: list[CheckOrder],
    **options: Any,
) -> HalfScanner:
    values: dict[str, Any] = {"transaction_timeout_ms": TIMEOUT_MS, "key_prefix": prefix, "batch": 2} | options
    return HalfScanner(api, client, ScanOptions(**values), dispatched.extend, clock)


def progress(api: Brokers, broker: TxBroker, topic: str) -> int | None:
    return api.progress(broker.ref, SYSTEM_GROUP, topic)


def record(store_ms: int, **properties: str) -> MessageRecord:
    return MessageRecord(topic=TRANS_HALF_TOPIC, body=b"", properties=properties, store_timestamp=store_ms)


def test_a_copy_is_due_after_the_timeout_or_its_immunity_before_the_first_check() -> None:
    assert due_at(record(1000), TIMEOUT_MS) == 7000
    assert due_at(record(1000, **{CHECK_IMMUNITY: "60"}), TIMEOUT_MS) == 61_000
    assert due_at(record(1000, **{CHECK_IMMUNITY: "60", Prop.TRANSACTION_CHECK_TIMES: "1"}), TIMEOUT_MS) == 7000
    assert due_at(record(1000, **{CHECK_IMMUNITY: "soon"}), TIMEOUT_MS) == 7000
    renewed_unchecked = record(5000, **{CHECK_IMMUNITY: "60", FIRST_STORED: "1000"})
    assert due_at(renewed_unchecked, TIMEOUT_MS) == 61_000, "immunity counts from the first store"


def test_only_op_records_naming_a_message_end_a_transaction() -> None:
    ops = [
        MessageRecord(
            topic=TRANS_OP_HALF_TOPIC,
            body=b'{"message_id": "A", "outcome": "COMMIT"}',
            properties={Prop.TAGS: "d"},
            store_timestamp=5,
        ),
        MessageRecord(topic=TRANS_OP_HALF_TOPIC, body=b"not json", properties={Prop.TAGS: "d"}),
        MessageRecord(topic=TRANS_OP_HALF_TOPIC, body=b'{"message_id": "B"}', properties={Prop.TAGS: "x"}),
        MessageRecord(topic=TRANS_OP_HALF_TOPIC, body=b'["C"]', properties={Prop.TAGS: "d"}),
    ]
    assert ended_ops(ops) == [("A", 5)]


def test_the_brokers_come_from_the_nameserver(api: Brokers, tx_broker: TxBroker) -> None:
    assert api.brokers() == [tx_broker.ref]


def test_a_scan_skips_ended_transactions_and_stops_at_the_first_copy_not_due(
    api: Brokers, tx_broker: TxBroker, redis_client: redis.Redis, redis_prefix: str
) -> None:
    a = tx_broker.put_half("A")
    tx_broker.put_half("B")
    assert tx_broker.end("B", "commit").status_code == 200
    while time.time() * 1000 <= a["store_timestamp"] + 1:  # C is stored at least a millisecond after A
        pass
    c = tx_broker.put_half("C")
    clock = FakeClock((c["store_timestamp"] + TIMEOUT_MS - 1) / 1000)  # A is due, C one millisecond short
    dispatched: list[CheckOrder] = []
    (report,) = make_scanner(api, redis_client, redis_prefix, clock, dispatched).scan(10, [tx_broker.ref])

    assert dispatched == [CheckOrder("broker-a", tx_broker.served.address, "A", a["physical_offset"])]
    assert (report.ops, report.skipped_ended, report.dispatched, report.stopped) == (1, 1, 1, "not due")
    assert progress(api, tx_broker, TRANS_HALF_TOPIC) == c["queue_offset"], "the progress passed a copy not yet due"
    assert progress(api, tx_broker, TRANS_OP_HALF_TOPIC) == 1
    assert tx_broker.state("A")["check_count"] == 1, "the dispatched copy was not renewed"
    assert tx_broker.state("C")["check_count"] == 0, "a copy not yet due was checked"


def test_a_copy_within_its_check_immunity_is_put_back_and_blocks_nothing_behind_it(
    api: Brokers, tx_broker: TxBroker, redis_client: redis.Redis, redis_prefix: str
) -> None:
    immune = tx_broker.put_half("C", {CHECK_IMMUNITY: "3600"})
    d = tx_broker.put_half("D")
    clock = FakeClock(time.time() + 7)
    dispatched: list[CheckOrder] = []

    (report,) = make_scanner(api, redis_client, redis_prefix, clock, dispatched).scan(10, [tx_broker.ref])

    assert dispatched == [CheckOrder("broker-a", tx_broker.served.address, "D", d["physical_offset"])]
    assert (report.deferred, report.dispatched) == (1, 1)
    assert tx_broker.state("C")["check_count"] == 0, "putting back an immune copy counted a check nobody made"
    assert progress(api, tx_broker, TRANS_HALF_TOPIC) == d["queue_offset"] + 1
    assert immune["queue_offset"] < d["queue_offset"]


def test_each_renewed_copy_is_checked_again_once_it_is_due(
    api: Brokers, tx_broker: TxBroker, redis_client: redis.Redis, redis_prefix: str
) -> None:
    first = tx_broker.put_half("A", IMMUNE)
    clock = FakeClock(time.time() + 1)
    dispatched: list[CheckOrder] = []
    scanner = make_scanner(api, redis_client, redis_prefix, clock, dispatched)

    scanner.scan(10, [tx_broker.ref])
    scanner.scan(10, [tx_broker.ref])
    assert len(dispatched) == 1, "the renewed copy was checked before its own timeout"
    clock.advance(TIMEOUT_MS / 1000)
    scanner.scan(10, [tx_broker.ref])

    assert [o.message_id for o in dispatched] == ["A", "A"]
    assert dispatched[0].physical_offset == first["physical_offset"]
    assert dispatched[1].physical_offset > first["physical_offset"], "the second check is not of the renewed copy"
    assert tx_broker.state("A")["check_count"] == 2


def test_past_the_check_limit_the_broker_abandons_the_transaction_and_the_scan_stops_checking_it(
    api: Brokers, tx_broker_factory: Any, redis_client: redis.Redis, redis_prefix: str
) -> None:
    broker: TxBroker = tx_broker_factory(transaction_check_max=2)
    broker.put_half("A", IMMUNE)
    clock = FakeClock(time.time() + 1)
    dispatched: list[CheckOrder] = []
    scanner = make_scanner(api, redis_client, redis_prefix, clock, dispatched)

    reports = []
    for _ in range(3):
        reports.append(scanner.scan(10, [broker.ref])[0])
        clock.advance(7)

    assert [(r.dispatched, r.abandoned) for r in reports] == [(1, 0), (1, 1), (0, 0)]
    assert broker.state("A")["state"] == "ABANDONED"


def test_two_overlapping_scans_never_check_one_copy_twice(
    api: Brokers, tx_broker: TxBroker, redis_client: redis.Redis, redis_prefix: str
) -> None:
    ids = [f"M{i:02d}" for i in range(40)]
    for message_id in ids:
        tx_broker.put_half(message_id, IMMUNE)
    clock = FakeClock(time.time() + 1)
    dispatched: list[CheckOrder] = []
    scanners = [
        make_scanner(api, redis_client, redis_prefix, clock, dispatched, batch=3, check_batch=2) for _ in range(2)
    ]
    start = threading.Barrier(2)

    def run(scanner: HalfScanner) -> None:
        start.wait()
        for _ in range(5):
            scanner.scan(10, [tx_broker.ref])

    threads = [threading.Thread(target=run, args=(s,)) for s in scanners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert sorted(o.message_id for o in dispatched) == ids


def test_a_transaction_ended_after_the_op_queue_was_read_is_not_checked(
    api: Brokers, tx_broker: TxBroker, redis_client: redis.Redis, redis_prefix: str
) -> None:
    tx_broker.put_half("A", IMMUNE)
    tx_broker.put_half("B", IMMUNE)
    assert tx_broker.end("A", "commit").status_code == 200
    api.commit_progress(tx_broker.ref, SYSTEM_GROUP, TRANS_OP_HALF_TOPIC, 1)  # as if read before the commit
    dispatched: list[CheckOrder] = []

    (report,) = make_scanner(api, redis_client, redis_prefix, FakeClock(time.time() + 1), dispatched).scan(
        10, [tx_broker.ref]
    )

    assert ([o.message_id for o in dispatched], report.skipped_ended) == (["B"], 1)


def test_a_scan_renews_nothing_while_the_checks_waiting_pass_the_backlog(
    api: Brokers, tx_broker: TxBroker, redis_client: redis.Redis, redis_prefix: str
) -> None:
    tx_broker.put_half("A", IMMUNE)
    dispatched: list[CheckOrder] = []
    waiting = [5]
    options = ScanOptions(transaction_timeout_ms=TIMEOUT_MS, key_prefix=redis_prefix, max_backlog=5)
    clock = FakeClock(time.time() + 1)
    scanner = HalfScanner(api, redis_client, options, dispatched.extend, clock, backlog=lambda: waiting[0])

    (report,) = scanner.scan(10, [tx_broker.ref])
    assert (report.stopped, dispatched, tx_broker.state("A")["check_count"]) == ("backlog", [], 0)

    waiting[0] = 4
    scanner.scan(10, [tx_broker.ref])
    assert [o.message_id for o in dispatched] == ["A"]


def test_a_held_lock_means_another_scan_has_the_broker(
    api: Brokers, tx_broker: TxBroker, redis_client: redis.Redis, redis_prefix: str
) -> None:
    tx_broker.put_half("A", IMMUNE)
    dispatched: list[CheckOrder] = []
    scanner = make_scanner(api, redis_client, redis_prefix, FakeClock(time.time() + 1), dispatched)
    with redis_client.lock(f"{redis_prefix}scan:broker-a", timeout=10):
        (report,) = scanner.scan(10, [tx_broker.ref])
    assert (report.stopped, dispatched) == ("locked", [])
    scanner.scan(10, [tx_broker.ref])
    assert [o.message_id for o in dispatched] == ["A"]


def test_a_copy_whose_dispatch_failed_is_dispatched_by_the_next_scan(
    api: Brokers, tx_broker: TxBroker, redis_client: redis.Redis, redis_prefix: str
) -> None:
    for message_id in ("A", "B", "C"):
        tx_broker.put_half(message_id, IMMUNE)
    dispatched: list[CheckOrder] = []

    def dispatch_until_b(orders: Sequence[CheckOrder]) -> None:
        if any(order.message_id == "B" for order in orders):
            raise ConnectionError("redis went away")
        dispatched.extend(orders)

    options = ScanOptions(transaction_timeout_ms=TIMEOUT_MS, key_prefix=redis_prefix, batch=10, check_batch=1)
    clock = FakeClock(time.time() + 1)
    (report,) = HalfScanner(api, redis_client, options, dispatch_until_b, clock).scan(10, [tx_broker.ref])
    assert report.stopped == "failed: dispatching the check of B: redis went away"
    assert progress(api, tx_broker, TRANS_HALF_TOPIC) == 1

    make_scanner(api, redis_client, redis_prefix, clock, dispatched).scan(10, [tx_broker.ref])
    assert [o.message_id for o in dispatched] == ["A", "B", "C"], "B or C lost its check, or A was checked twice"
    assert [tx_broker.state(m)["check_count"] for m in ("A", "B", "C")] == [1, 1, 1], "a copy was renewed twice"


def test_a_broker_that_does_not_answer_fails_its_scan_only(
    api: Brokers, tx_broker: TxBroker, redis_client: redis.Redis, redis_prefix: str
) -> None:
    tx_broker.put_half("A", IMMUNE)
    gone = Broker("broker-gone", f"127.0.0.1:{free_port()}")
    dispatched: list[CheckOrder] = []
    scanner = make_scanner(api, redis_client, redis_prefix, FakeClock(time.time() + 1), dispatched)

    failed, scanned = scanner.scan(10, [gone, tx_broker.ref])

    assert failed.stopped.startswith("failed: broker broker-gone at 127.0.0.1:"), failed.stopped
    assert (scanned.stopped, [o.message_id for o in dispatched]) == ("caught up", ["A"])


def test_ended_ids_are_kept_with_a_ttl_and_forgotten_once_the_scan_is_past_their_copies(
    api: Brokers, tx_broker: TxBroker, redis_client: redis.Redis, redis_prefix: str
) -> None:
    tx_broker.put_half("A")
    tx_broker.put_half("B", {CHECK_IMMUNITY: "60"})
    assert tx_broker.end("A", "rollback").status_code == 200
    ended = EndedTransactions(redis_client, redis_prefix, "broker-a", ttl_seconds=3600)
    clock = FakeClock(time.time() + 7)
    scanner = make_scanner(api, redis_client, redis_prefix, clock, [], ended_ttl_seconds=3600)

    scanner.scan(10, [tx_broker.ref])
    assert (ended.which(["A", "B"]), len(ended)) == ({"A"}, 1)
    assert 3500 < cast(int, redis_client.ttl(ended.key)) <= 3600

    clock.advance(3600)  # B is due and checked; the scan is past every copy of A
    (report,) = scanner.scan(10, [tx_broker.ref])
    assert (report.dispatched, report.stopped, len(ended)) == (1, "caught up", 0)
