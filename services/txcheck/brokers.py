"""Brokers: txcheck's calls to nameservers and brokers, from its worker threads, through the one BrokerClient.

Celery tasks are plain functions and txcheck runs its checks in threads; each call
here runs on an event loop in a thread of its own (an anyio blocking portal, opened
with the runtime), through `libs.broker_api`'s async `BrokerClient`, and is waited
for. Errors are the client's: a broker that does not answer (or answers 503) is
`BrokerUnavailable`, no nameserver answering `NameserverUnavailable`, the errors a
check task retries.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from libs.broker_api.client import BrokerClient
from libs.broker_api.nameservers import NameserverClient
from libs.codec import iter_records
from libs.http.client import ClientOptions, InternalClient
from libs.http.transport import Transport
from libs.message import MessageRecord

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Broker:
    name: str
    address: str


@dataclass(frozen=True, slots=True)
class Pulled:
    records: list[MessageRecord]
    next_offset: int
    min_offset: int
    max_offset: int


class Brokers:
    def __init__(self, portal: BlockingPortal, client: BrokerClient, nameservers: NameserverClient) -> None:
        self.portal = portal
        self.client = client
        self.nameservers = nameservers

    def _wait(self, call: Callable[[], Awaitable[T]]) -> T:
        return self.portal.call(call)

    def brokers(self) -> list[Broker]:
        """Every live broker (its master's address), from the first nameserver that answers."""
        masters = self._wait(self.nameservers.masters)
        return sorted((Broker(name, address) for name, address in masters), key=lambda b: b.name)

    def pull(self, broker: Broker, topic: str, offset: int, count: int) -> Pulled:
        """Records of the topic's queue 0 from `offset`."""
        params = {"offset": offset, "max": count}
        batch = self._wait(lambda: self.client.pull(broker.name, broker.address, topic, 0, params))
        return Pulled(list(iter_records(batch.records)), batch.next_offset, batch.min_offset, batch.max_offset)

    def progress(self, broker: Broker, group: str, topic: str) -> int | None:
        """The group's committed offset of the topic's queue 0 on this broker, if any."""
        return self._wait(lambda: self.client.progress(broker.name, broker.address, group, topic))

    def commit_progress(self, broker: Broker, group: str, topic: str, offset: int) -> None:
        self._wait(lambda: self.client.commit_progress(broker.name, broker.address, group, topic, offset))

    def record(self, broker: Broker, physical_offset: int) -> MessageRecord:
        return self._wait(lambda: self.client.record(broker.name, broker.address, physical_offset))

    def transaction(self, broker: Broker, message_id: str) -> dict[str, Any]:
        return self._wait(lambda: self.client.get_transaction(broker.name, broker.address, message_id))

    def checked(self, broker: Broker, message_id: str, physical_offset: int, *, defer: bool = False) -> dict[str, Any]:
        return self._wait(
            lambda: self.client.checked(broker.name, broker.address, message_id, physical_offset, defer=defer)
        )

    def end(self, broker: Broker, message_id: str, outcome: str, by: str) -> dict[str, Any]:
        """Commit or roll back (`outcome` COMMIT or ROLLBACK); TransactionAlreadyEnded when ended the other way."""
        return self._wait(lambda: self.client.end_transaction(broker.name, broker.address, message_id, outcome, by))


@contextlib.contextmanager
def open_brokers(
    nameservers: list[str], options: ClientOptions, transport: Transport | None = None
) -> Iterator[Brokers]:
    """Brokers on an event loop thread of their own, with the internal client open; closed when the block ends."""
    with start_blocking_portal() as portal:
        client = InternalClient(options, transport)
        portal.call(client.start)
        try:
            yield Brokers(portal, BrokerClient(client), NameserverClient(client, nameservers))
        finally:
            portal.call(client.close)
