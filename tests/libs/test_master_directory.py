"""MasterDirectory: broker name -> master address, refreshed on age and (rate-limited) on a miss."""

from __future__ import annotations

import asyncio

from libs.broker_api.nameservers import NameserverClient
from libs.broker_api.route_cache import MasterDirectory
from libs.http.client import InternalClient
from libs.routing import BrokerLiveness, ClusterBroker, ClusterInfo, ClusterListing
from tests.support.clock import FakeClock


class FakeNameservers(NameserverClient):
    def __init__(self) -> None:
        super().__init__(InternalClient(), ["127.0.0.1:1"])
        self.brokers = {"broker-a": "127.0.0.1:10911"}
        self.fetches = 0
        self.answering = asyncio.Event()
        self.answering.set()
        self.asked = asyncio.Event()

    async def clusters(self) -> ClusterListing:
        self.fetches += 1
        self.asked.set()
        await self.answering.wait()
        brokers = [
            ClusterBroker(
                broker_name=name,
                instances=[
                    BrokerLiveness(broker_id=0, address=address, master=True, data_version=1, last_update_ms=0),
                    BrokerLiveness(broker_id=1, address="127.0.0.1:1", data_version=1, last_update_ms=0),
                ],
            )
            for name, address in self.brokers.items()
        ]
        return ClusterListing(clusters=[ClusterInfo(name="DefaultCluster", brokers=brokers)])


async def test_known_brokers_are_answered_from_the_cache_until_it_is_old() -> None:
    nameservers, clock = FakeNameservers(), FakeClock(0.0)
    directory = MasterDirectory(nameservers, refresh_seconds=30, clock=clock)

    assert await directory.lookup(["broker-a"]) == {"broker-a": "127.0.0.1:10911"}
    clock.now = 29
    assert await directory.lookup(["broker-a"]) == {"broker-a": "127.0.0.1:10911"}
    assert nameservers.fetches == 1

    clock.now = 30
    await directory.lookup(["broker-a"])
    assert nameservers.fetches == 2


async def test_an_unknown_name_refetches_at_most_once_a_second() -> None:
    nameservers, clock = FakeNameservers(), FakeClock(0.0)
    directory = MasterDirectory(nameservers, refresh_seconds=30, clock=clock)
    await directory.lookup(["broker-a"])

    nameservers.brokers["broker-b"] = "127.0.0.1:10912"
    clock.now = 0.5
    assert await directory.lookup(["broker-a", "broker-b"]) == {"broker-a": "127.0.0.1:10911"}
    assert nameservers.fetches == 1

    clock.now = 1.0
    found = await directory.lookup(["broker-a", "broker-b", "forged"])
    assert found == {"broker-a": "127.0.0.1:10911", "broker-b": "127.0.0.1:10912"}
    clock.now = 1.5
    assert await directory.lookup(["forged"]) == {}
    assert nameservers.fetches == 2


async def test_lookups_that_miss_at_once_share_one_listing() -> None:
    nameservers = FakeNameservers()
    directory = MasterDirectory(nameservers, refresh_seconds=30, clock=FakeClock(0.0))
    nameservers.answering.clear()

    lookups = [asyncio.ensure_future(directory.lookup(["broker-a"])) for _ in range(13)]
    await nameservers.asked.wait()
    nameservers.answering.set()

    assert await asyncio.gather(*lookups) == [{"broker-a": "127.0.0.1:10911"}] * 13
    assert nameservers.fetches == 1, "each concurrent lookup asked the nameservers for the whole listing"
