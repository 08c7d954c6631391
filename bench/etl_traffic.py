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
missing its message id, an event not in the contract, a `ts` written as text.
"""

from __future__ import annotations

import bisect
import random
from collections import defaultdict
from collections.abc import Callable
from itertools import accumulate

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
STORED = (
    '{"ts":%d,"event":"stored","service":"broker","pid":%s,"message_id":"%s","topic":"%s","queue_id":%d,'
    '"queue_offset":%d,"broker":"%s","size":%d,"physical_offset":%d,"flush":"ASYNC_FLUSH"}'
)
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


class Traffic:
    """The stories of the day's messages: each event is handed to `add(ts, process, line)`."""

    def __init__(self, rng: random.Random, add: Callable[[int, int, str], None], written: Callable[[], int]) -> None:
        self.rng = rng
        self.add = add
        self.written = written
        """How many lines were added so far."""
        self.cumulative = list(accumulate(weight for _, weight, _ in TOPICS))
        self.next_id = 0
        self.offsets: defaultdict[tuple[str, int], int] = defaultdict(int)
        self.physical = [0] * len(BROKERS)
        self.made = 0

    def hour(self, start_ms: int, lines: int) -> None:
        """Messages sent in this hour, in time order, until their events make `lines` lines."""
        goal = self.written() + lines
        for second in range(3600):
            due = goal - lines * (3599 - second) // 3600
            while self.written() < due:
                self.message(start_ms + second * 1000 + int(self.rng.random() * 1000))

    def message(self, ts: int) -> None:
        rng = self.rng
        topic, _, groups = TOPICS[bisect.bisect(self.cumulative, rng.random() * self.cumulative[-1])]
        self.next_id += 1
        message_id = f"0A00000{self.next_id:09X}{self.next_id * 2654435761 % 4294967296:08X}"
        kind = rng.random()
        if kind < 0.03:
            self.transactional(ts, message_id, topic, groups)
        elif kind < 0.07:
            self.delayed(ts, message_id, topic, groups)
        else:
            self.plain(ts, message_id, topic, groups)
        self.made += 1
        if self.made % CORRUPT_EVERY == 0:
            self.add(ts, GATEWAYS[0], CORRUPT[self.made // CORRUPT_EVERY % len(CORRUPT)] % ts)

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
        pid = PROCESSES[BROKER_PROCS[broker]][-4:]
        self.add(
            ts,
            BROKER_PROCS[broker],
            STORED % (ts, pid, message_id, topic, queue, offset, BROKERS[broker], size, physical),
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
        fate = rng.random()
        if fate < 0.94:
            self.delivered(at, 1)
            self.consumed(at + 2 + int(rng.random() * 100), "acked", 1)
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
