"""LeaseKeeper: a lease kept alive outlives its TTL, and its holder knows, on its own clock, when it may not."""

from __future__ import annotations

import asyncio

import pytest

from libs.etcd import EtcdClient, EtcdSettings, EtcdUnavailable, Lease
from libs.etcd.lease_keeper import LeaseKeeper
from tests.support.clock import FakeClock
from tests.support.serving import free_port
from tests.support.waiting import eventually


async def test_a_kept_lease_outlives_its_ttl_with_its_keys(client: EtcdClient) -> None:
    keeper = await LeaseKeeper.grant(client, 1, margin=0.5)  # etcd makes it 2 s, its shortest here
    await client.put("masters/broker-a", b"epoch 3", lease=keeper.lease.id)
    running = asyncio.create_task(keeper.run())
    try:

        async def renewed_past_its_ttl() -> bool:
            # the first renewal goes at once: past this count, the renewals span more than the TTL
            return (keeper.renewals - 1) * keeper.interval > keeper.lease.ttl

        await eventually(renewed_past_its_ttl, "the keeper renewed the lease for longer than its TTL", timeout=15)
        assert keeper.holds()
        assert await client.get("masters/broker-a") is not None
    finally:
        running.cancel()
        await client.revoke(keeper.lease.id)


async def test_a_keeper_whose_lease_is_revoked_stops_and_no_longer_holds(client: EtcdClient) -> None:
    keeper = await LeaseKeeper.grant(client, 30, margin=1, interval=0.1)
    running = asyncio.create_task(keeper.run())
    assert keeper.holds()
    await client.revoke(keeper.lease.id)
    await asyncio.wait_for(running, timeout=15)  # its next keep-alive finds the lease gone
    assert keeper.lost.is_set()
    assert not keeper.holds()


class SlowKeepAlive:
    """Answers a keep-alive after `delay` seconds of the fake clock, with a TTL of `ttl`."""

    def __init__(self, clock: FakeClock, delay: float, ttl: int) -> None:
        self.clock, self.delay, self.ttl = clock, delay, ttl

    async def keep_alive_once(self, lease: int) -> int:
        self.clock.advance(self.delay)
        return self.ttl


async def test_the_lease_is_counted_from_the_keep_alives_send_not_its_answer() -> None:
    clock = FakeClock(100.0)
    etcd = SlowKeepAlive(clock, delay=3.0, ttl=10)
    keeper = LeaseKeeper(etcd, Lease(7, 10), granted_at=100.0, margin=1.0, clock=clock)  # type: ignore[arg-type]
    assert keeper.valid_until == 109.0
    clock.advance(5.0)  # the keep-alive goes at 105 and is answered at 108
    await keeper.renew()
    assert keeper.valid_until == 114.0  # 105 + 10 - 1, although the answer came at 108
    clock.now = 113.9
    assert keeper.holds()
    clock.now = 114.0
    assert not keeper.holds()


async def test_while_etcd_cannot_be_reached_the_holder_stops_holding_before_the_lease_can_expire() -> None:
    clock = FakeClock(0.0)
    settings = EtcdSettings(endpoints=[f"127.0.0.1:{free_port()}"], retry_seconds=0)
    async with EtcdClient(settings) as unreachable:
        keeper = LeaseKeeper(unreachable, Lease(7, 5), granted_at=0.0, margin=1.0, clock=clock)
        clock.now = 3.0
        with pytest.raises(EtcdUnavailable):
            await keeper.renew()
    assert keeper.holds()
    clock.now = 4.0  # granted at 0 with a TTL of 5: etcd may expire it at 5; the margin stops the holder at 4
    assert not keeper.holds()


def test_a_margin_as_long_as_the_lease_is_refused() -> None:
    with pytest.raises(ValueError, match="leaves nothing"):
        LeaseKeeper(None, Lease(7, 2), granted_at=0.0, margin=2.0)  # type: ignore[arg-type]
