"""Leases: a key on a lease lives while the lease is renewed and goes when it expires or is revoked."""

from __future__ import annotations

import pytest

from libs.etcd import EtcdClient, EtcdLeaseNotFound
from tests.support.waiting import eventually


async def test_a_lease_reports_its_ttl_and_the_keys_on_it(client: EtcdClient) -> None:
    lease = await client.grant(30)
    assert lease.ttl == 30
    await client.put("masters/broker-a", b"0", lease=lease.id)
    await client.put("masters/broker-b", b"0", lease=lease.id)
    status = await client.time_to_live(lease.id, keys=True)
    assert status.granted_ttl == 30
    assert 0 < status.ttl <= 30
    assert sorted(status.keys) == [b"masters/broker-a", b"masters/broker-b"]
    assert await client.keep_alive_once(lease.id) == 30
    assert (await client.get("masters/broker-a")).lease == lease.id  # type: ignore[union-attr]
    await client.revoke(lease.id)


async def test_a_lease_not_renewed_expires_and_takes_its_keys(client: EtcdClient) -> None:
    lease = await client.grant(1)  # etcd's shortest is 1.5 election timeouts: 2 s here
    await client.put("masters/broker-a", b"0", lease=lease.id)

    async def gone() -> bool:
        return await client.get("masters/broker-a") is None

    await eventually(gone, "the key of a lease of 2 s that nobody renews is gone", timeout=10)
    with pytest.raises(EtcdLeaseNotFound):
        await client.keep_alive_once(lease.id)
    with pytest.raises(EtcdLeaseNotFound):
        await client.time_to_live(lease.id)
    with pytest.raises(EtcdLeaseNotFound):
        await client.put("masters/broker-a", b"0", lease=lease.id)


async def test_a_revoked_lease_takes_its_keys_at_once(client: EtcdClient) -> None:
    lease = await client.grant(60)
    await client.put("masters/broker-a", b"0", lease=lease.id)
    await client.put("unleased", b"stays")
    await client.revoke(lease.id)
    assert await client.get("masters/broker-a") is None
    assert await client.get("unleased") is not None
    with pytest.raises(EtcdLeaseNotFound):
        await client.revoke(lease.id)
