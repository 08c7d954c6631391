"""A dispatcher that stops gives its messages back only once its own long poll has ended.

The broker hands a message given back to the next receive at once. Were the dispatcher's
long poll still waiting then, it would lease the message and be cancelled unread by the
stop: the message would wait out a lease (a minute by default) before anyone got it. The
fakes below stand in for the brokers and the endpoint; the receiver records whether a
receive was waiting when each give-back came.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import cast

from libs import webhooks
from libs.broker_api.frames import Lease
from libs.broker_api.receiver import Receive, Received, Receiver
from libs.codec import encode_batch
from libs.events.writer import EventWriter
from libs.message import MessageRecord, Prop
from libs.push_api.schemas import PayloadFormat
from services.push.attempts import AttemptLog, Outcome
from services.push.delivery import Endpoint, Verdict
from services.push.dispatcher import Dispatcher
from services.push.leases import GroupLeases
from services.push.settings import PushSettings
from services.push.subscriptions import Subscription

MESSAGES = 1


class LongPollingBrokers:
    """The first receive leases MESSAGES messages; every later one waits (a long poll with nothing to hand)."""

    def __init__(self) -> None:
        self.polls_waiting = 0
        self.given_back_while_polling: list[str] = []
        self.given_back: list[str] = []
        self._received = False

    async def receive(self, group: str, topic: str, ask: Receive) -> list[Received]:
        if not self._received:
            self._received = True
            records = [record(i) for i in range(MESSAGES)]
            leases = [Lease(f"handle-{i}", 1, int(time.time() * 1000) + 60_000) for i in range(MESSAGES)]
            return [Received("broker-a", leases, memoryview(encode_batch(records)))]
        self.polls_waiting += 1
        try:
            await asyncio.Event().wait()
        finally:
            self.polls_waiting -= 1
        raise AssertionError("unreachable: the poll waits until it is cancelled")

    async def give_back(self, group: str, handle: str) -> None:
        for _ in range(5):  # the call's round trip: the dispatcher's other tasks run meanwhile
            await asyncio.sleep(0)
        self.given_back.append(handle)
        if self.polls_waiting:
            self.given_back_while_polling.append(handle)


class GoneEndpoint:
    """Answers 410 Gone to every POST."""

    async def post(self, body: bytes, headers: dict[str, str], timeout: float) -> Verdict:
        return Verdict(Outcome.GONE, 410, 1, "HTTP 410")

    async def close(self) -> None:
        return None


def record(n: int) -> MessageRecord:
    return MessageRecord(
        topic="orders", body=f"order {n}".encode(), queue_id=0, queue_offset=n, properties={Prop.UNIQ_KEY: f"id-{n}"}
    )


def subscription() -> Subscription:
    return Subscription(
        group="billing",
        topic="orders",
        endpoint_url="http://receiver.example/hook",
        filter_type=None,
        expression=None,
        max_in_flight=16,
        rate_per_second=None,
        timeout_seconds=5.0,
        payload_format=PayloadFormat.STANDARD_WEBHOOKS,
        invisible_seconds=60,
        paused=False,
        disabled_reason=None,
        signing_secret=webhooks.new_secret(),
        previous_secret=None,
        previous_secret_until=None,
        created_at=0,
        updated_at=0,
    )


async def test_a_410_gives_back_only_after_the_receive_loop_and_its_long_poll_ended(tmp_path: Path) -> None:
    brokers = LongPollingBrokers()
    gone = asyncio.Event()

    async def on_gone(_: Subscription, answer: str) -> None:
        gone.set()

    events = EventWriter(tmp_path, "push", enabled=False)
    attempts = AttemptLog("billing", "http://receiver.example/hook", events, 10)
    receiver, leases, endpoint = cast(Receiver, brokers), cast(GroupLeases, brokers), cast(Endpoint, GoneEndpoint())
    dispatcher = Dispatcher(subscription(), PushSettings(), receiver, leases, endpoint, attempts, on_gone)
    dispatcher.start()
    async with asyncio.timeout(10):
        await gone.wait()
        await dispatcher.stop()

    assert brokers.given_back, "the message answered 410 was not given back"
    assert brokers.given_back_while_polling == [], "given back while the dispatcher's own long poll still waited"
