"""One UTC day of traffic on a Petrel cluster, told as the lifecycle events its services would write.

Ten topics and eight consumer groups; each message is sent, stored, then delivered
to every group subscribed to its topic. Most are acked at once; a few percent are
nacked and redelivered from the group's retry queue, or lose their lease and come
again; about one in a hundred per group is poison, nacked at every attempt and
dead-lettered (one in five of those sent back by an operator); a few are left in
flight. 4 % are delayed (scheduled, sometimes rolled by the timer, fired a little
late or cancelled), 3 % transactional (committed or rolled back by their producer
or after a check-back, a few abandoned after five unanswered checks). About one
message in 5,000 leaves a corrupt line behind: malformed JSON, a torn line, a send
missing its message id, an event not in the contract, a `ts` written as text. The
`stored`, `delivered` and `acked` events go out as the broker writes them, a line per
put, receive and ack call (bench.etl_batches); the others a line each, as written.
"""

from __future__ import annotations

import bisect
import random
from collections import defaultdict
from collections.abc import Callable
from itertools import accumulate
from typing import Protocol

from bench.etl_batches import CallBatcher

HOUR_MS = 3_600_000
TOPICS: tuple[tuple[str, int, tuple[str, ...]], ...] = (
    ("orders", 18, ("billing", "warehouse", "analytics")),
    ("payments", 10, ("billing", "fraud")),
    ("shipments", 8, ("warehouse", "notifications")),
    ("inventory", 12, ("warehouse",)),
    ("clicks", 25, ("analytics",)),
    ("emails", 6, ("mailer",)),
    ("invoices", 4, ("billing", "archive")),
    ("audit", 7, ("archive",)),
    ("search-index", 6, ("indexer",)),
    ("refunds", 2, ("billing", "fraud")),
)
"""(topic, share of the sends, the groups subscribed to it)."""
QUEUES = 8
BROKERS = ("broker-a", "broker-b")
PROCESSES = ("gateway-3101", "gateway-3102", "broker-3201", "broker-3202", "timer-3301", "txcheck-3401")
GATEWAYS, BROKER_PROCS, TIMER, TXCHECK = (0, 1), (2, 3), 4, 5
MAX_RETRIES = 3
DEAD_LETTER_REASON = (
    f',"delivery_attempt":{MAX_RETRIES},"reason":"nacked at attempt {MAX_RETRIES} (max_retries {MAX_RETRIES})"'
)
TAGS = ("paid", "new", "retry", "bulk")
CORRUPT_EVERY = 5_000
"""About one corrupt line per this many messages."""

SENT = '{"ts":%d,"event":"sent","service":"gateway","pid":%s,"message_id":"%s","topic":"%s","size":%d%s}'
SENT_BATCH = '{"ts":%d,"event":"sent","service":"gateway","pid":%s,"topic":"%s","batch":[%s]}'
SENT_ITEM = '{"message_id":"%s","size":%d}'
BATCH_SENDS = 0.02
"""The share of send calls that are batches (of 2 to MAX_BATCH messages, 12 on average): about a fifth of messages."""
MAX_BATCH = 32
POLL_MS = 20
"""A consumer's receive takes what arrived since its last one, at most this long ago: the messages of one put (or
close ones) are delivered by one receive, and acked by one ack call."""
STORED_CALL = '"broker":"%s","flush":"ASYNC_FLUSH","topic":"%s"'
STORED_ITEM = '"message_id":"%s","queue_id":%d,"queue_offset":%d,"size":%d,"physical_offset":%d'
CONSUMED_CALL = '"broker":"%s","group":"%s"%s'
CONSUMED_ITEM = '"message_id":"%s","topic":"%s","queue_id":%d,"queue_offset":%d,"delivery_attempt":%d'
"""A put's, a receive's, an ack call's shared fields and each message's own (as the broker writes them)."""
CONSUMED = (
    '{"ts":%d,"event":"%s","service":"broker","pid":%s,"message_id":"%s","topic":"%s","queue_id":%d,'
    '"queue_offset":%d,"broker":"%s","group":"%s","delivery_attempt":%d%s}'
)
GROUP_ONLY = '{"ts":%d,"event":"%s","service":"broker","pid":%s,"message_id":"%s","topic":"%s","group":"%s"%s}'
DELAY = '{"ts":%d,"event":"%s","service":"%s","pid":%s,"message_id":"%s","topic":"%s","deliver_at":%d%s}'
ROLLED = (
    '{"ts":%d,"event":"delay_rolled","service":"timer","pid":3301,"message_id":null,"topic":null,'
    '"deliver_at":%d,"roll_times":%d}'
)
TRANSACTION = '{"ts":%d,"event":"%s","service":"%s","pid":%s,"message_id":"%s","topic":"%s","transaction_id":"%s"%s}'
CORRUPT = (
    '{"ts":%d,"event":"sent","service":"gateway","pid":3101,"message',
    "{not json at %d",
    '{"ts":%d,"event":"sent","service":"gateway","pid":3101,"topic":"orders","size":12}',
    '{"ts":%d,"event":"exploded","service":"gateway","pid":3101}',
    '{"ts":"%d","event":"sent","service":"gateway","pid":3101,"message_id":"x","topic":"orders"}',
)
"""A torn line, malformed JSON, a send with no message_id, an event not in the contract, a ts as text."""


class LineSink(Protocol):
    def __call__(self, ts: int, process: int, line: str, events: int = 1) -> None:
        """A line of `process`, holding `events` events (a batch line more than one)."""


class Traffic:
    """The stories of the day's messages: each line is handed to `add(ts, process, line, events)`."""

    def __init__(self, rng: random.Random, add: LineSink, written: Callable[[], int]) -> None:
        self.rng = rng
        self.add = add
        self.calls = CallBatcher(add, PROCESSES)
        self.lines_written = written
        """How many events the lines added so far hold."""
        self.cumulative = list(accumulate(weight for _, weight, _ in TOPICS))
        self.next_id = 0
        self.offsets: defaultdict[tuple[str, int], int] = defaultdict(int)
        self.physical = [0] * len(BROKERS)
        self.made = 0

    def written(self) -> int:
        """Events told so far: in lines added, and in calls not written yet."""
        return self.lines_written() + self.calls.pending

    def hour(self, start_ms: int, lines: int) -> None:
        """Messages sent in this hour, in time order, until they make `lines` events."""
        goal = self.written() + lines
        for second in range(3600):
            due = goal - lines * (3599 - second) // 3600
            while self.written() < due:
                self.message(start_ms + second * 1000 + int(self.rng.random() * 1000))
            self.calls.written_before(start_ms + second * 1000)

    def new_id(self) -> str:
        self.next_id += 1
        return f"0A00000{self.next_id:09X}{self.next_id * 2654435761 % 4294967296:08X}"

    def message(self, ts: int) -> None:
        """One send call: one message (a plain, delayed or transactional one), or a batch of plain ones."""
        rng = self.rng
        topic, _, groups = TOPICS[bisect.bisect(self.cumulative, rng.random() * self.cumulative[-1])]
        kind = rng.random()
        if kind < 0.03:
            self.transactional(ts, self.new_id(), topic, groups)
        elif kind < 0.07:
            self.delayed(ts, self.new_id(), topic, groups)
        elif kind < 0.07 + BATCH_SENDS:
            self.batch(ts, topic, groups, min(MAX_BATCH, 2 + int(rng.expovariate(1 / 10))))
            return
        else:
            self.plain(ts, self.new_id(), topic, groups)
        self.counted(ts)

    def counted(self, ts: int) -> None:
        self.made += 1
        if self.made % CORRUPT_EVERY == 0:
            self.add(ts, GATEWAYS[0], CORRUPT[self.made // CORRUPT_EVERY % len(CORRUPT)] % ts)

    def batch(self, ts: int, topic: str, groups: tuple[str, ...], count: int) -> None:
        """A batch send of `count` messages of one topic: one `sent` line, one put (a `stored` line) per broker."""
        messages = [(self.new_id(), self.size()) for _ in range(count)]
        gateway = GATEWAYS[self.next_id & 1]
        items = ",".join(SENT_ITEM % message for message in messages)
        self.add(ts, gateway, SENT_BATCH % (ts, PROCESSES[gateway][-4:], topic, items), count)
        stored = ts + 1 + int(self.rng.random() * 3)
        for message_id, size in messages:
            where = self.store(stored, message_id, topic, size)
            for group in groups:
                Consumption(self, message_id, topic, group, where).run(stored)
            self.counted(ts)

    def send(self, ts: int, message_id: str, topic: str, size: int, extra: str = "") -> None:
        gateway = GATEWAYS[self.next_id & 1]
        rng = self.rng
        if rng.random() < 0.3:
            extra += f',"tag":"{TAGS[int(rng.random() * 4)]}"'
        if rng.random() < 0.2:
            extra += f',"keys":["k{int(rng.random() * 100_000)}"]'
        self.add(ts, gateway, SENT % (ts, PROCESSES[gateway][-4:], message_id, topic, size, extra))

    def store(self, ts: int, message_id: str, topic: str, size: int) -> tuple[int, int, int]:
        """The message appended to a queue of its topic: (broker index, queue id, queue offset)."""
        queue = int(self.rng.random() * QUEUES)
        broker = queue & 1
        offset = self.offsets[(topic, queue)]
        self.offsets[(topic, queue)] = offset + 1
        physical = self.physical[broker]
        self.physical[broker] = physical + size + 120
        self.calls.event(
            ts,
            BROKER_PROCS[broker],
            "stored",
            STORED_CALL % (BROKERS[broker], topic),
            STORED_ITEM % (message_id, queue, offset, size, physical),
        )
        return broker, queue, offset

    def size(self) -> int:
        return int(self.rng.lognormvariate(6.0, 0.9)) + 16

    def plain(self, ts: int, message_id: str, topic: str, groups: tuple[str, ...]) -> None:
        size = self.size()
        self.send(ts, message_id, topic, size)
        stored = ts + 1 + int(self.rng.random() * 3)
        where = self.store(stored, message_id, topic, size)
        for group in groups:
            Consumption(self, message_id, topic, group, where).run(stored)

    def delayed(self, ts: int, message_id: str, topic: str, groups: tuple[str, ...]) -> None:
        rng = self.rng
        delay = (1_000, 5_000, 10_000, 30_000, 60_000, 600_000, 1_800_000, 7_200_000)[int(rng.random() * 8)]
        size = self.size()
        self.send(ts, message_id, topic, size, f',"delay_ms":{delay}')
        due = ts + delay
        broker = int(rng.random() * 2)
        pid = PROCESSES[BROKER_PROCS[broker]][-4:]
        self.add(
            ts + 2, BROKER_PROCS[broker], DELAY % (ts + 2, "delay_scheduled", "broker", pid, message_id, topic, due, "")
        )
        if rng.random() < 0.05:
            cancelled = ts + int(rng.random() * delay)
            gateway = GATEWAYS[self.next_id & 1]
            line = DELAY % (
                cancelled,
                "delay_cancelled",
                "gateway",
                PROCESSES[gateway][-4:],
                message_id,
                topic,
                due,
                "",
            )
            self.add(cancelled, gateway, line)
            return
        if delay > HOUR_MS:
            self.add(due - 1_200_000, TIMER, ROLLED % (due - 1_200_000, due, 1))
        late = int(rng.random() * 40) if rng.random() < 0.99 else 1_000 + int(rng.random() * 3_000)
        fired = due + late
        line = DELAY % (fired, "delay_fired", "broker", pid, message_id, topic, due, f',"lateness_ms":{late}')
        self.add(fired, BROKER_PROCS[broker], line)
        where = self.store(fired, message_id, topic, size)
        for group in groups:
            Consumption(self, message_id, topic, group, where).run(fired)

    def transactional(self, ts: int, message_id: str, topic: str, groups: tuple[str, ...]) -> None:
        rng = self.rng
        broker = int(rng.random() * 2)
        process = BROKER_PROCS[broker]
        pid = PROCESSES[process][-4:]
        tx = f"{BROKERS[broker]}:{message_id}"
        gateway = GATEWAYS[self.next_id & 1]
        half = TRANSACTION % (
            ts,
            "transaction_half",
            "gateway",
            PROCESSES[gateway][-4:],
            message_id,
            topic,
            tx,
            f',"producer_group":"{topic}-producer"',
        )
        self.add(ts, gateway, half)
        fate = rng.random()
        if fate < 0.90:
            ended, by = ts + 10 + int(rng.random() * 200), "producer"
            commit = fate < 0.85
        elif fate < 0.97:
            asked = ts + 6_000 + int(rng.random() * 60_000)
            latency = 5 + int(rng.random() * 200)
            commit = rng.random() < 0.7
            answer = f',"check_count":1,"answer":"{"COMMIT" if commit else "ROLLBACK"}","latency_ms":{latency}'
            self.add(
                asked,
                TXCHECK,
                TRANSACTION % (asked, "transaction_check", "txcheck", "3401", message_id, topic, tx, answer),
            )
            ended, by = asked + latency, "checkback"
        else:
            self.abandoned(ts, message_id, topic, tx, process)
            return
        event = "transaction_commit" if commit else "transaction_rollback"
        self.add(ended, process, TRANSACTION % (ended, event, "broker", pid, message_id, topic, tx, f',"by":"{by}"'))
        if commit:
            where = self.store(ended, message_id, topic, self.size())
            for group in groups:
                Consumption(self, message_id, topic, group, where).run(ended)

    def abandoned(self, ts: int, message_id: str, topic: str, tx: str, process: int) -> None:
        asked = ts
        for check in range(1, 6):
            asked += 60_000
            answer = f',"check_count":{check},"answer":"UNKNOWN","latency_ms":{5 + int(self.rng.random() * 50)}'
            self.add(
                asked,
                TXCHECK,
                TRANSACTION % (asked, "transaction_check", "txcheck", "3401", message_id, topic, tx, answer),
            )
        pid = PROCESSES[process][-4:]
        self.add(
            asked + 10,
            process,
            TRANSACTION % (asked + 10, "transaction_abandoned", "broker", pid, message_id, topic, tx, ""),
        )


class Consumption:
    """What one consumer group did with one stored message: delivered, then acked, retried, dead-lettered or left."""

    def __init__(self, traffic: Traffic, message_id: str, topic: str, group: str, where: tuple[int, int, int]) -> None:
        self.traffic = traffic
        self.message_id = message_id
        self.topic = topic
        self.group = group
        broker, self.queue, self.offset = where
        self.process = BROKER_PROCS[broker]
        self.pid = PROCESSES[self.process][-4:]
        self.broker = BROKERS[broker]

    def run(self, available: int) -> None:
        rng = self.traffic.rng
        at = available + 3 + int(rng.expovariate(1 / 25))
        if rng.random() < 0.01:
            at += int(rng.random() * 120_000)  # the group was behind
        at = -(-at // POLL_MS) * POLL_MS  # the receive that takes it
        fate = rng.random()
        if fate < 0.94:
            self.delivered(at, 1)
            handled = 2 + (at // POLL_MS * 7_919 + self.queue * 31 + len(self.group)) % 100  # one per receive
            self.consumed(at + handled, "acked", 1)
        elif fate < 0.97:
            self.delivered(at, 1)
            self.retried(at + 5, 1, ',"delay_ms":1000,"reason":"busy"')
            self.from_retry_queue(at + 1_010 + int(rng.random() * 50), 2, "acked")
        elif fate < 0.985:
            self.delivered(at, 1)  # the lease expired unacked
            again = at + 30_000 + int(rng.random() * 100)
            self.delivered(again, 2)
            self.consumed(again + 2 + int(rng.random() * 100), "acked", 2)
        elif fate < 0.997:
            self.poison(at)
        else:
            self.delivered(at, 1)  # still in flight at the day's end

    def consumed(self, ts: int, event: str, attempt: int, extra: str = "", topic: str = "", queue: int = -1) -> None:
        topic, queue, offset = (topic, queue, self.retry_offset) if topic else (self.topic, self.queue, self.offset)
        if event in ("delivered", "acked"):  # a line per receive and per ack call; `extra` is the call's client
            shared = CONSUMED_CALL % (self.broker, self.group, extra)
            item = CONSUMED_ITEM % (self.message_id, topic, queue, offset, attempt)
            self.traffic.calls.event(ts, self.process, event, shared, item)
            return
        line = CONSUMED % (
            ts,
            event,
            self.pid,
            self.message_id,
            topic,
            queue,
            offset,
            self.broker,
            self.group,
            attempt,
            extra,
        )
        self.traffic.add(ts, self.process, line)

    def delivered(self, ts: int, attempt: int) -> None:
        self.consumed(ts, "delivered", attempt, f',"client_id":"{self.group}-{self.queue & 3}"')

    def retried(self, ts: int, attempt: int, nack: str) -> None:
        """Nacked, and put to the group's retry queue."""
        if attempt == 1:
            self.consumed(ts, "nacked", attempt, nack)
        else:
            self.consumed(ts, "nacked", attempt, nack, "%RETRY%" + self.group, 0)
        extra = f',"delivery_attempt":{attempt},"delay_ms":1000'
        self.traffic.add(
            ts, self.process, GROUP_ONLY % (ts, "retried", self.pid, self.message_id, self.topic, self.group, extra)
        )
        key = ("%RETRY%" + self.group, 0)
        self.retry_offset = self.traffic.offsets[key]
        self.traffic.offsets[key] = self.retry_offset + 1

    def from_retry_queue(self, ts: int, attempt: int, then: str) -> None:
        retry = "%RETRY%" + self.group
        self.consumed(ts, "delivered", attempt, f',"client_id":"{self.group}-0"', retry, 0)
        if then == "acked":
            self.consumed(ts + 2 + int(self.traffic.rng.random() * 100), "acked", attempt, "", retry, 0)

    def poison(self, at: int) -> None:
        """Nacked at every attempt, then dead-lettered; sometimes sent back by an operator."""
        self.delivered(at, 1)
        for attempt in range(1, MAX_RETRIES):
            self.retried(at + 5, attempt, ',"reason":"cannot parse"')
            at += 1_010
            self.from_retry_queue(at, attempt + 1, "")
        self.consumed(at + 5, "nacked", MAX_RETRIES, ',"reason":"cannot parse"', "%RETRY%" + self.group, 0)
        reason = DEAD_LETTER_REASON
        self.traffic.add(
            at + 6,
            self.process,
            GROUP_ONLY % (at + 6, "dead_lettered", self.pid, self.message_id, self.topic, self.group, reason),
        )
        if self.traffic.rng.random() < 0.2:
            again = at + 900_000
            self.traffic.add(
                again,
                self.process,
                GROUP_ONLY % (again, "redriven", self.pid, self.message_id, self.topic, self.group, ""),
            )
