"""The controller on a real etcd: first masters, failover from the in-sync set only, new epochs, one leader."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from libs.controller_api import LEADER_KEY, ReplicationState
from libs.etcd import Election, EtcdClient
from services.nameserver.app import create_app
from services.nameserver.controller import Controller
from services.nameserver.controller_rules import Grant, decide
from services.nameserver.controller_view import read_broker_names
from services.nameserver.settings import NameserverSettings
from tests.support.apps import in_process
from tests.support.controller import (
    TTL,
    claim_master,
    controller,
    granted,
    put_state,
    replica,
    running,
    scanned,
    state,
)
from tests.support.etcd import EtcdCluster, etcd_cluster
from tests.support.waiting import eventually

NAME = "broker-a"


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with etcd_cluster(Path(tmp_path_factory.mktemp("etcd"))) as cluster:
        yield cluster


@pytest.fixture
async def client(etcd: EtcdCluster, request: pytest.FixtureRequest) -> AsyncIterator[EtcdClient]:
    async with EtcdClient(etcd.settings(f"/test/{request.node.name}/")) as made:
        yield made


async def test_the_first_master_is_the_most_caught_up_replica_not_id_0(client: EtcdClient, tmp_path: Path) -> None:
    await replica(client, NAME, 0, log_end=4_000, epoch=3)
    await replica(client, NAME, 1, log_end=9_000, epoch=3)  # it was master last, and wrote further
    await replica(client, NAME, 2, log_end=9_500, epoch=2)  # longer, but of an older epoch
    async with running(controller(client, tmp_path, timeout=0.5)):
        found = await granted(client, NAME, 1)
    assert (found.master_id, found.epoch, found.in_sync) == (1, 4, [1]), "past every epoch a replica holds"
    assert found.master_address == "127.0.0.1:10912"


async def test_a_new_empty_broker_name_begins_at_once_with_its_lowest_id(client: EtcdClient, tmp_path: Path) -> None:
    await replica(client, NAME, 2)
    await replica(client, NAME, 1)
    async with running(controller(client, tmp_path, timeout=60)):  # no wait: nothing can be truncated
        found = await granted(client, NAME, 1)
    assert (found.master_id, found.epoch, found.master_run) == (1, 1, "run-1")


async def test_a_name_with_data_waits_for_late_replicas_before_its_first_master(
    client: EtcdClient, tmp_path: Path
) -> None:
    await replica(client, NAME, 0, log_end=100, epoch=1)
    async with running(controller(client, tmp_path, timeout=1.5)) as made:
        await scanned(made)
        assert await state(client, NAME) is None, "decided within its wait for late replicas"
        await replica(client, NAME, 1, log_end=700, epoch=1)  # restarted a little later, holding more
        found = await granted(client, NAME, 1)
    assert found.master_id == 1


async def two_brokers_and_a_master(client: EtcdClient, tmp_path: Path) -> tuple[ReplicationState, list[int]]:
    """broker-a at epoch 1 with master 0 (its key taken) and slave 1 in sync; the leases' ids."""
    master = await replica(client, NAME, 0, log_end=500, epoch=1)
    slave = await replica(client, NAME, 1, log_end=500, epoch=1)
    first = ReplicationState(
        epoch=1, master_id=0, master_address="127.0.0.1:10911", master_run="run-0", in_sync=[0, 1], version=2
    )
    await put_state(client, NAME, first)
    await claim_master(client, NAME, master, first)
    return first, [master.id, slave.id]


async def test_no_promotion_while_the_masters_lease_lives_and_one_once_etcd_ends_it(
    client: EtcdClient, tmp_path: Path
) -> None:
    _, (master, _) = await two_brokers_and_a_master(client, tmp_path)
    made = controller(client, tmp_path)
    async with running(made):
        await made.leading.wait()
        await client.delete("brokers/broker-a/replicas/0")  # its report is gone; its master key's lease lives
        await scanned(made)
        assert (await state(client, NAME)).epoch == 1  # type: ignore[union-attr]
        await client.revoke(master)  # the master's lease ends: kill -9, then its TTL
        found = await granted(client, NAME, 2)
    assert (found.master_id, found.in_sync, found.version) == (1, [1], 3)


async def test_promotion_is_only_from_the_in_sync_set(client: EtcdClient, tmp_path: Path) -> None:
    _, (master, slave) = await two_brokers_and_a_master(client, tmp_path)
    outsider = await replica(client, NAME, 2, log_end=9_000, epoch=1)  # further, but never in sync
    made = controller(client, tmp_path)
    async with running(made):
        await made.leading.wait()
        await client.revoke(slave)
        await client.revoke(master)
        await scanned(made)  # none may promote: broker 2 may lack answered writes
        assert (await state(client, NAME)).master_id == 0  # type: ignore[union-attr]
        await replica(client, NAME, 1, log_end=500, epoch=1, run="run-1b")  # the in-sync slave returns
        found = await granted(client, NAME, 2)
    assert (found.master_id, found.master_run, found.in_sync) == (1, "run-1b", [1])
    await client.revoke(outsider.id)


async def test_a_restarted_master_gets_a_new_epoch_and_its_grant_keeps_the_in_sync_set(
    client: EtcdClient, tmp_path: Path
) -> None:
    _, (master, _) = await two_brokers_and_a_master(client, tmp_path)
    async with running(controller(client, tmp_path)):
        # killed and started again at once (systemd), as a new run: it reports while its old lease still lives
        await replica(client, NAME, 0, log_end=600, epoch=1, run="run-0b")
        await client.revoke(master)  # the old run's lease ends
        found = await granted(client, NAME, 2)
    assert (found.master_id, found.master_run, found.epoch) == (0, "run-0b", 2)
    assert found.in_sync == [0, 1], "the slave stays in sync: the new master's writes wait for it"


async def test_a_stale_state_below_a_reported_epoch_is_replaced(client: EtcdClient, tmp_path: Path) -> None:
    # an etcd snapshot restored from epoch 2, while the brokers went on to epoch 6
    old = ReplicationState(
        epoch=2, master_id=0, master_address="127.0.0.1:10911", master_run="r", in_sync=[0], version=1
    )
    await put_state(client, NAME, old)
    await replica(client, NAME, 0, log_end=300, epoch=5)
    await replica(client, NAME, 1, log_end=800, epoch=6)
    async with running(controller(client, tmp_path)):
        found = await granted(client, NAME, 3)
    assert (found.master_id, found.epoch) == (1, 7)


async def test_an_old_controller_json_is_imported_once_for_names_etcd_has_not(
    client: EtcdClient, tmp_path: Path
) -> None:
    saved = {
        NAME: {"epoch": 4, "master_id": 0, "master_address": "127.0.0.1:10911", "in_sync": [0, 1]},
        "broker-b": {"epoch": 9, "master_id": 0, "master_address": "127.0.0.1:10921", "in_sync": [0]},
    }
    (tmp_path / "controller.json").write_text(json.dumps(saved))
    kept = ReplicationState(epoch=12, master_id=0, master_address="127.0.0.1:10921", master_run="x", in_sync=[0],
                            version=5)  # fmt: skip
    await put_state(client, "broker-b", kept)
    await replica(client, NAME, 1, log_end=200, epoch=4)  # the old master 0 is not back
    async with running(controller(client, tmp_path)):
        found = await granted(client, NAME, 5)
    assert (found.master_id, found.epoch, found.in_sync) == (1, 5, [1]), "from the imported in-sync set, past epoch 4"
    assert await state(client, "broker-b") == kept, "etcd's state wins over the file's"
    assert not (tmp_path / "controller.json").exists()
    assert (tmp_path / "controller.json.imported").exists()


async def test_a_killed_leader_is_replaced(client: EtcdClient, tmp_path: Path) -> None:
    one, two = controller(client, tmp_path / "1", "ns-1:9876"), controller(client, tmp_path / "2", "ns-2:9876")
    async with running(one), running(two):
        await eventually(lambda: _any_leads(one, two), "one controller leads")
        leader, other = (one, two) if one.leading.is_set() else (two, one)
        election = leader.current_election
        assert election is not None
        await client.revoke(election.lease)  # the leader's lease ends (killed: its TTL runs out)
        await asyncio.wait_for(other.leading.wait(), 10)
        await replica(client, NAME, 0)
        assert (await granted(client, NAME, 1)).master_id == 0, "the new leader acts"
        view = await client.get("controller/leader")
        assert view is not None
        assert view.value == other.address.encode()


async def _any_leads(*controllers: Controller) -> bool:
    return any(c.leading.is_set() for c in controllers)


async def test_a_paused_old_leader_cannot_write(client: EtcdClient, tmp_path: Path) -> None:
    old = controller(client, tmp_path / "old", "ns-old:9876")
    lease = await client.grant(TTL)
    election = Election(client, LEADER_KEY, lease=lease.id, value=old.address)
    assert await election.try_campaign()
    await replica(client, NAME, 0)
    read, _ = await read_broker_names(client)
    decided = decide(read[NAME], waited=0, master_timeout=1)
    assert isinstance(decided, Grant)
    # paused here, past its lease: etcd ends it, another controller leads and grants
    await client.revoke(lease.id)
    async with running(controller(client, tmp_path / "new", "ns-new:9876")):
        granted_by_new = await granted(client, NAME, 1)
    assert not await old.commit(election, read[NAME], decided), "what it read is stale, and it no longer leads"
    fresh, _ = await read_broker_names(client)
    bumped = Grant(granted_by_new.model_copy(update={"epoch": 99}), "paused", None, 0)
    assert not await old.commit(election, fresh[NAME], bumped), "on a fresh read too: it no longer leads"
    assert await state(client, NAME) == granted_by_new


async def test_any_nameserver_answers_the_view_from_etcd_naming_the_leader(
    etcd: EtcdCluster, client: EtcdClient, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    settings = etcd.settings(f"/test/{request.node.name}/")
    made = controller(client, tmp_path, address="10.0.0.5:9876")
    await replica(client, NAME, 0)
    async with running(made):
        await granted(client, NAME, 1)
        async for http in in_process(create_app(NameserverSettings(data_dir=tmp_path), etcd=settings)):
            view = (await http.get("/internal/controller")).json()
    assert view["leader"] == "10.0.0.5:9876"
    assert view["broker_names"][0]["assignment"]["master_id"] == 0
    assert view["broker_names"][0]["brokers"][0]["address"] == "127.0.0.1:10911"


async def test_a_nameserver_without_etcd_says_so_and_the_controller_needs_it(tmp_path: Path) -> None:
    async for http in in_process(create_app(NameserverSettings(data_dir=tmp_path))):
        answer = await http.get("/internal/controller")
        assert answer.status_code == 404
        assert "PETREL_ETCD_ENDPOINTS" in answer.json()["detail"]
    with pytest.raises(ValueError, match="PETREL_ETCD_ENDPOINTS"):
        create_app(NameserverSettings(data_dir=tmp_path, controller=True))
