"""Three etcd members: a client keeps working when the member it talks to, or etcd's raft leader, is killed.

Each test starts the member it killed again before it ends, so the next finds three.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from libs.etcd import Election, EtcdClient, EtcdSettings, EtcdUnavailable, LeaseKeeper
from tests.support.etcd import EtcdCluster, etcd_cluster
from tests.support.waiting import eventually


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with etcd_cluster(Path(tmp_path_factory.mktemp("etcd")), members=3) as cluster:
        yield cluster


@pytest.fixture
async def client(three: EtcdCluster, request: pytest.FixtureRequest) -> AsyncIterator[EtcdClient]:
    async with EtcdClient(three.settings(f"/test/{request.node.name}/")) as client:
        yield client


async def test_calls_move_to_the_next_member_when_the_one_in_use_is_killed(
    three: EtcdCluster, client: EtcdClient
) -> None:
    await client.put("routes/broker-a", b"10.0.0.1")
    assert client.current_endpoint == three.members[0].client_url
    three.members[0].kill()
    try:
        assert (await client.get("routes/broker-a")).value == b"10.0.0.1"  # type: ignore[union-attr]
        await client.put("routes/broker-a", b"10.0.0.2")
        assert client.current_endpoint != three.members[0].client_url
        lease = await client.grant(30)
        assert await client.keep_alive_once(lease.id) == 30
    finally:
        three.members[0].start()
        three.wait_healthy()


async def test_an_election_holds_across_the_loss_of_etcds_raft_leader(three: EtcdCluster, client: EtcdClient) -> None:
    lease = await client.grant(30)
    election = Election(client, "controller/leader", lease=lease.id, value="ns-1")
    assert await election.try_campaign()
    raft_leader = three.leader()
    raft_leader.kill()
    try:

        async def answered() -> bool:
            # while the two left elect a raft leader, members answer "no leader" or time out: the client moves on
            try:
                return await election.is_leader()
            except EtcdUnavailable:
                return False

        await eventually(answered, "the remaining two members answer, the election still held", timeout=15)
        assert await client.keep_alive_once(lease.id) == 30
    finally:
        raft_leader.start()
        three.wait_healthy()


async def test_without_a_majority_calls_fail_as_unavailable(three: EtcdCluster, client: EtcdClient) -> None:
    lost = three.members[1:]
    for member in lost:
        member.kill()
    try:
        # the member left holds the write (it has no leader to send it to) until the call's timeout
        async with EtcdClient(three.settings("/test/minority/", timeout_seconds=1.0, retry_seconds=0)) as hurried:
            with pytest.raises(EtcdUnavailable) as raised:
                await hurried.put("routes/broker-a", b"nowhere to go")
        assert len(raised.value.tried) == 3
    finally:
        for member in lost:
            member.start()
        three.wait_healthy()
    await client.put("routes/broker-a", b"after")


async def test_a_call_goes_round_the_members_again_while_etcd_elects_a_leader() -> None:
    """Stand-in members: for their first two rounds one says "leader changed", the other "no leader"."""
    asked: list[str] = []

    def member(name: str) -> httpx.MockTransport:
        def answer(request: httpx.Request) -> httpx.Response:
            asked.append(name)
            if len(asked) <= 4:
                error = "etcdserver: leader changed" if name == "a" else "etcdserver: no leader"
                return httpx.Response(503, json={"error": error, "message": error, "code": 14})
            return httpx.Response(200, json={"header": {"revision": "9"}})

        return httpx.MockTransport(answer)

    settings = EtcdSettings(endpoints=["10.0.0.5:2379", "10.0.0.6:2379"], retry_seconds=5)
    async with EtcdClient(settings, transports=[member("a"), member("b")]) as client:
        assert (await client.put("routes/broker-a", b"x")).revision == 9
    assert asked == ["a", "b", "a", "b", "a"]

    settings = EtcdSettings(endpoints=["10.0.0.5:2379", "10.0.0.6:2379"], retry_seconds=0)
    asked.clear()
    async with EtcdClient(settings, transports=[member("a"), member("b")]) as client:
        with pytest.raises(EtcdUnavailable, match="no leader"):
            await client.put("routes/broker-a", b"x")
    assert asked == ["a", "b"]


async def test_a_masters_lease_holds_without_a_break_while_etcd_replaces_its_killed_raft_leader(
    three: EtcdCluster, client: EtcdClient
) -> None:
    """The lease as a master keeps it (TTL 2 s, counted as ending 0.5 s early): etcd must elect a new raft leader,
    and a keep-alive reach it, before the master's last answered keep-alive runs out, or every write pauses."""
    keeper = await LeaseKeeper.grant(client, 2, margin=0.5)
    running = asyncio.create_task(keeper.run())
    held: list[bool] = []
    raft_leader = three.leader()
    try:

        async def renewed() -> bool:
            return keeper.renewals >= 2

        await eventually(renewed, "the lease is renewed")
        raft_leader.kill()
        until = time.monotonic() + 3.0

        async def three_seconds_on() -> bool:
            held.append(keeper.holds())
            return time.monotonic() > until

        await eventually(three_seconds_on, "three seconds pass", timeout=10)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        raft_leader.start()
        three.wait_healthy()
    assert all(held), f"the lease lapsed in {held.count(False)} of {len(held)} looks after the raft leader's kill"
