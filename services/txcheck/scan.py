"""HalfScanner: finds the half messages due for a check-back on every broker and dispatches their checks.

As RocketMQ's TransactionalMessageCheckService, but over the broker's internal
HTTP API, with progress kept as the offsets of the system group
`CID_SYS_RMQ_TRANS`. For each broker, under a Redis lock (two overlapping scans,
or two beats, never scan one broker at once):

1. read `RMQ_SYS_TRANS_OP_HALF_TOPIC/0` from its progress: the ids of ended
   transactions go to `EndedTransactions`;
2. read `RMQ_SYS_TRANS_HALF_TOPIC/0` from its progress, in store order: skip a
   copy whose transaction ended; stop at the first copy not yet due (stored
   less than `transaction_timeout` ago, or its check immunity for a first check);
   for each due copy, tell the broker (`checked`), which appends a renewed copy
   with one more check counted (or, past the check limit, moves it to
   TRANS_CHECK_MAX_TIME_TOPIC) and answers the transaction's state; then
   dispatch the checks of those not ended meanwhile (`check_batch` to a task);
3. commit the progress after each batch.

A scan stops early when the check tasks already waiting pass `max_backlog`
(checks slower than the scans, e.g. producers that time out): a renewal counts
a check, so renewing faster than checks are made would abandon transactions
whose producer was never asked.

A copy whose `checked` or dispatch failed stops the progress there, so it is
read again by the next scan (the broker renews a copy only once; a copy read
again is dispatched without another renewal). Nothing is lost by a crash
between steps: a renewal without its check is checked when the renewed copy is
due; a dispatched check whose progress was not committed is dispatched again
(checks are idempotent).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import redis
from redis.exceptions import LockError

from libs import jsonutil
from libs.broker_api.wire import OP_TAG
from libs.errors import OffsetOutOfRange, PetrelError
from libs.message import MessageRecord, Prop
from libs.names import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from services.txcheck.brokers import Broker, Brokers, Pulled
from services.txcheck.ended import EndedTransactions

log = logging.getLogger(__name__)

SYSTEM_GROUP = "CID_SYS_RMQ_TRANS"
OP_BATCH = 1024
ENDED_STATES = frozenset({"COMMITTED", "ROLLED_BACK"})
FORGET_MARGIN_MS = 60_000
"""Ended ids are kept this much longer than the copies they could still match (a renewal racing an end)."""


@dataclass(frozen=True, slots=True)
class CheckOrder:
    """What a check task is given: where the half copy is, never the message itself."""

    broker: str
    address: str
    message_id: str
    physical_offset: int


@dataclass(frozen=True, slots=True)
class ScanOptions:
    transaction_timeout_ms: int
    key_prefix: str
    batch: int = 256
    parallelism: int = 16
    lock_seconds: float = 15.0
    check_batch: int = 16
    """half copies (of one broker) per check task"""
    max_backlog: int = 1000
    """check tasks waiting in the queue past which a scan stops (and resumes next time)"""
    ended_ttl_seconds: int = 3 * 86400


@dataclass(slots=True)
class BrokerScan:
    """What one scan of one broker did."""

    broker: str
    ops: int = 0
    skipped_ended: int = 0
    dispatched: int = 0
    abandoned: int = 0
    deferred: int = 0
    """Copies within their check immunity, put back without a check counted."""
    stopped: str = "caught up"
    """caught up | not due | deadline | backlog | locked | failed: <why>"""
    failures: list[str] = field(default_factory=list)


def due_at(record: MessageRecord, timeout_ms: int) -> int:
    """When a half copy is due for a check (ms): its store time plus the timeout, or before the first check,
    the producer's check immunity after the half message was first stored."""
    checks = int(record.properties.get(Prop.TRANSACTION_CHECK_TIMES, "0") or 0)
    immunity = record.properties.get(Prop.CHECK_IMMUNITY)
    if checks == 0 and immunity is not None and immunity.isdigit():
        first = record.properties.get(Prop.TRANSACTION_FIRST_STORED, "")
        return (int(first) if first.isdigit() else record.store_timestamp) + int(immunity) * 1000
    return record.store_timestamp + timeout_ms


def ended_ops(records: Sequence[MessageRecord]) -> list[tuple[str, int]]:
    """(message id, store time) of the op records that end a transaction; others are ignored."""
    ended = []
    for record in records:
        if record.tag != OP_TAG:
            continue
        try:
            op = jsonutil.loads(record.body)
        except ValueError:
            log.warning("op record at %d is not JSON; ignored", record.physical_offset)
            continue
        if isinstance(op, dict) and isinstance(op.get("message_id"), str):
            ended.append((op["message_id"], record.store_timestamp))
    return ended


class HalfScanner:
    def __init__(
        self,
        api: Brokers,
        client: redis.Redis,
        options: ScanOptions,
        dispatch: Callable[[Sequence[CheckOrder]], None],
        clock: Callable[[], float] = time.time,
        backlog: Callable[[], int] = lambda: 0,
    ) -> None:
        self.api = api
        self.redis = client
        self.options = options
        self.dispatch = dispatch
        self.clock = clock
        self.backlog = backlog

    def scan(self, time_limit: float, brokers: Sequence[Broker] | None = None) -> list[BrokerScan]:
        """Scan every live broker (or those given) until done or `time_limit` seconds have passed."""
        deadline = time.monotonic() + time_limit
        reports = []
        with ThreadPoolExecutor(self.options.parallelism, thread_name_prefix="txcheck-checked") as pool:
            for broker in brokers if brokers is not None else self.api.brokers():
                reports.append(self._scan_locked(broker, deadline, pool))
        return reports

    def _scan_locked(self, broker: Broker, deadline: float, pool: ThreadPoolExecutor) -> BrokerScan:
        report = BrokerScan(broker.name)
        lock = self.redis.lock(f"{self.options.key_prefix}scan:{broker.name}", timeout=self.options.lock_seconds)
        if not lock.acquire(blocking=False):
            report.stopped = "locked"
            return report
        try:
            self._scan(broker, deadline, pool, lock.reacquire, report)
        except (PetrelError, redis.RedisError, LockError) as exc:
            report.stopped = f"failed: {exc}"
            log.warning("scan of %s (%s) stopped: %s", broker.name, broker.address, exc)
        finally:
            try:
                lock.release()
            except LockError:
                log.warning("the scan lock of %s expired during the scan", broker.name)
        return report

    def _scan(
        self,
        broker: Broker,
        deadline: float,
        pool: ThreadPoolExecutor,
        keep_lock: Callable[[], object],
        report: BrokerScan,
    ) -> None:
        ended = EndedTransactions(self.redis, self.options.key_prefix, broker.name, self.options.ended_ttl_seconds)
        if not self._read_ops(broker, ended, deadline, keep_lock, report):
            report.stopped = "deadline"
            return
        offset = self._start(broker, TRANS_HALF_TOPIC)
        end: int | None = None
        while True:
            if time.monotonic() >= deadline:
                report.stopped = "deadline"
                return
            if self.backlog() >= self.options.max_backlog:
                # renewing counts a check: never count checks the workers are not keeping up with
                report.stopped = "backlog"
                return
            pulled = self._pull(broker, TRANS_HALF_TOPIC, offset, self.options.batch)
            # copies renewed by this scan wait for the next one (with no timeout, they would be due at once)
            end = pulled.max_offset if end is None else end
            pulled = _before(pulled, end)
            resume = self._handle_half(broker, pulled, ended, pool, report) if pulled.records else pulled.next_offset
            self._advance(broker, TRANS_HALF_TOPIC, offset, resume)
            keep_lock()
            offset = resume
            left = next((r for r in pulled.records if r.queue_offset >= resume), None)
            if left is not None or not pulled.records:
                # every copy before `left` is behind the progress: older ends can no longer match one
                oldest_needed = left.store_timestamp if left is not None else int(self.clock() * 1000)
                ended.forget_before(oldest_needed - FORGET_MARGIN_MS - self.options.transaction_timeout_ms)
                return

    def _read_ops(
        self,
        broker: Broker,
        ended: EndedTransactions,
        deadline: float,
        keep_lock: Callable[[], object],
        report: BrokerScan,
    ) -> bool:
        """Note the ended transactions up to the op queue's end; False when the deadline came first."""
        offset = self._start(broker, TRANS_OP_HALF_TOPIC)
        while time.monotonic() < deadline:
            pulled = self._pull(broker, TRANS_OP_HALF_TOPIC, offset, OP_BATCH)
            ops = ended_ops(pulled.records)
            ended.add(ops)
            report.ops += len(ops)
            self._advance(broker, TRANS_OP_HALF_TOPIC, offset, pulled.next_offset)
            offset = pulled.next_offset
            keep_lock()
            if not pulled.records:
                return True
        return False

    def _handle_half(
        self, broker: Broker, pulled: Pulled, ended: EndedTransactions, pool: ThreadPoolExecutor, report: BrokerScan
    ) -> int:
        """Dispatch the batch's due copies; the queue offset to continue from."""
        finished = ended.which([r.message_id or "" for r in pulled.records])
        now = int(self.clock() * 1000)
        due: list[MessageRecord] = []
        immune: list[MessageRecord] = []
        timeout = self.options.transaction_timeout_ms
        for record in pulled.records:
            if record.message_id in finished:
                report.skipped_ended += 1
            elif due_at(record, timeout) <= now:
                due.append(record)
            elif record.store_timestamp + timeout <= now:
                immune.append(record)  # due but for its check immunity: put back, so it blocks nothing behind it
            else:
                report.stopped = "not due"
                resume = self._defer_all(broker, immune, pool, report, record.queue_offset)
                return self._check_all(broker, due, pool, report, resume=resume)
        resume = self._defer_all(broker, immune, pool, report, pulled.next_offset)
        return self._check_all(broker, due, pool, report, resume=resume)

    def _defer_all(
        self, broker: Broker, immune: list[MessageRecord], pool: ThreadPoolExecutor, report: BrokerScan, resume: int
    ) -> int:
        """Renew the immune copies without counting a check; where to resume (the first that failed)."""

        def defer(record: MessageRecord) -> str | None:
            try:
                self.api.checked(broker, record.message_id or "", record.physical_offset, defer=True)
            except PetrelError as exc:
                return f"deferring {record.message_id} at {record.physical_offset}: {exc.detail}"
            return None

        for record, error in zip(immune, pool.map(defer, immune), strict=True):
            if error is not None:
                report.failures.append(error)
                resume = min(resume, record.queue_offset)
            else:
                report.deferred += 1
        return resume

    def _check_all(
        self, broker: Broker, due: list[MessageRecord], pool: ThreadPoolExecutor, report: BrokerScan, resume: int
    ) -> int:
        """Renew the due copies, then dispatch the check of each one still open; where to resume.

        A copy whose renewal failed is read again by the next scan, and so is every copy after it
        (those renewed already are then stale: the broker answers their state without renewing
        them again, and their checks are dispatched then).
        """
        due = [r for r in due if r.queue_offset < resume]  # never count a check that will not be made
        renewals = list(pool.map(lambda r: self._renew(broker, r), due))
        failures_before = len(report.failures)
        for record, (_, error) in zip(due, renewals, strict=True):
            if error is not None:
                report.failures.append(error)
                resume = min(resume, record.queue_offset)
        checks: list[tuple[MessageRecord, CheckOrder]] = []
        for record, (state, _) in zip(due, renewals, strict=True):
            if record.queue_offset >= resume:
                break
            if state in ENDED_STATES:  # ended after the op queue was read
                report.skipped_ended += 1
                continue
            report.abandoned += state == "ABANDONED"
            checks.append(
                (record, CheckOrder(broker.name, broker.address, record.message_id or "", record.physical_offset))
            )
        for start in range(0, len(checks), self.options.check_batch):
            chunk = checks[start : start + self.options.check_batch]
            try:
                self.dispatch([order for _, order in chunk])
            except Exception as exc:  # noqa: BLE001 - whatever the task queue raised, resume from these copies
                report.failures.append(f"dispatching the check of {chunk[0][1].message_id}: {exc}")
                resume = chunk[0][0].queue_offset
                break
            report.dispatched += len(chunk)
        if len(report.failures) > failures_before:
            report.stopped = f"failed: {report.failures[-1]}"
        return resume

    def _renew(self, broker: Broker, record: MessageRecord) -> tuple[str | None, str | None]:
        """Tell the broker the copy is being checked: (its state afterwards, None) or (None, what failed)."""
        try:
            answer = self.api.checked(broker, record.message_id or "", record.physical_offset)
        except PetrelError as exc:
            return None, f"renewing {record.message_id} at {record.physical_offset}: {exc.detail}"
        return str(answer["state"]), None

    # ---- progress ------------------------------------------------------------------------------

    def _start(self, broker: Broker, topic: str) -> int:
        return self.api.progress(broker, SYSTEM_GROUP, topic) or 0

    def _pull(self, broker: Broker, topic: str, offset: int, count: int) -> Pulled:
        try:
            return self.api.pull(broker, topic, offset, count)
        except OffsetOutOfRange as exc:  # retention removed what was not read, or the queue is new
            low, high = int(exc.extensions["min_offset"]), int(exc.extensions["max_offset"])
            restart = min(max(offset, low), high)
            log.warning(
                "%s/%s on %s: offset %d is outside [%d, %d]; from %d", topic, 0, broker.name, offset, low, high, restart
            )
            return self.api.pull(broker, topic, restart, count)

    def _advance(self, broker: Broker, topic: str, old: int, new: int) -> None:
        if new != old:
            self.api.commit_progress(broker, SYSTEM_GROUP, topic, new)


def _before(pulled: Pulled, end: int) -> Pulled:
    """The pulled records before queue offset `end`."""
    records = [r for r in pulled.records if r.queue_offset < end]
    return Pulled(records, min(pulled.next_offset, end), pulled.min_offset, pulled.max_offset)
