"""Leader election: one candidate leads at a time, and the lead passes on when the leader's lease ends."""

from __future__ import annotations

import asyncio

import pytest

from libs.etcd import Election, EtcdClient, EtcdCompareFailed, Put

KEY = "controller/leader"


async def test_the_first_candidate_leads_and_the_others_see_it(client: EtcdClient) -> None:
    one, two = await client.grant(30), await client.grant(30)
    first = Election(client, KEY, lease=one.id, value="10.0.0.5:9876")
    second = Election(client, KEY, lease=two.id, value="10.0.0.6:9876")
    assert await second.leader() is None

    assert await first.try_campaign()
    assert not await second.try_campaign()
    assert await first.try_campaign()  # campaigning again while leading changes nothing
    leader = await second.leader()
    assert leader is not None
    assert (leader.value, leader.lease) == (b"10.0.0.5:9876", one.id)
    assert await first.is_leader()
    assert not await second.is_leader()


async def test_the_lead_passes_to_a_waiting_candidate_when_the_leaders_lease_is_revoked(client: EtcdClient) -> None:
    one, two = await client.grant(30), await client.grant(30)
    first = Election(client, KEY, lease=one.id, value="ns-1")
    second = Election(client, KEY, lease=two.id, value="ns-2")
    assert await first.try_campaign()
    waiting = asyncio.create_task(second.campaign(timeout=10))
    done, _ = await asyncio.wait({waiting}, timeout=0.2)
    assert not done, "a candidate took the lead while the leader held it"

    await client.revoke(one.id)
    await waiting
    leader = await first.leader()
    assert leader is not None
    assert leader.value == b"ns-2"
    assert await second.is_leader()
    assert not await first.is_leader()
    # the old leader's writes, conditioned on still leading, no longer go through
    stale = client.txn().when(first.leads_compare()).then(Put("assignment/broker-a", b"from the old leader"))
    assert not (await stale.commit()).succeeded
    assert (await client.txn().when(second.leads_compare()).then(Put("assignment/broker-a", b"new")).commit()).succeeded


async def test_a_leader_that_resigns_hands_over_and_can_no_longer_proclaim(client: EtcdClient) -> None:
    one, two = await client.grant(30), await client.grant(30)
    first = Election(client, KEY, lease=one.id, value="ns-1")
    second = Election(client, KEY, lease=two.id, value="ns-2")
    assert await first.try_campaign()
    await first.proclaim("ns-1 (moved)")
    assert (await second.leader()).value == b"ns-1 (moved)"  # type: ignore[union-attr]

    assert await first.resign()
    await second.campaign(timeout=5)
    with pytest.raises(EtcdCompareFailed):
        await first.proclaim("ns-1 again")
    assert (await first.leader()).value == b"ns-2"  # type: ignore[union-attr]
    assert not await first.resign()


async def test_a_candidate_waiting_in_vain_gives_up_at_its_timeout(client: EtcdClient) -> None:
    one, two = await client.grant(30), await client.grant(30)
    assert await Election(client, KEY, lease=one.id, value="ns-1").try_campaign()
    with pytest.raises(TimeoutError):
        await Election(client, KEY, lease=two.id, value="ns-2").campaign(timeout=0.3)
