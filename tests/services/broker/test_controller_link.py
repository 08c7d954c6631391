"""A broker's link to etcd: its role from the controller's state, a master's right to write as its own etcd lease,
new epochs after a restart, and in-sync changes that fail once another grant was made."""

from __future__ import annotations

import asyncio
import contextlib
import errno
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from libs.broker_api.replication import BrokerRole
from libs.controller_api import ReplicaReport, ReplicationState
from libs.errors import FlushTimeout
from libs.etcd import EtcdClient, EtcdSettings
from libs.events.writer import EventWriter
from libs.store.config import FlushMode
from libs.store.epochs import EpochFile
from libs.store.message_store import MessageStore
from libs.tasks import cancelled
from services.broker.app import create_app
from services.broker.controller_link import LOG_END_REPORT_SECONDS, ControllerLink, RunHandover
from services.broker.in_sync import InSyncReplicas
from services.broker.replication_state import Replication
from tests.support.apps import broker_settings, in_process
from tests.support.broker_calls import put
from tests.support.clock import FakeClock
from tests.support.controller import controller, granted, replica, running, scanned, state
from tests.support.etcd import EtcdCluster, etcd_cluster
from tests.support.serving import ServedApp
from tests.support.store import failing_disk, fill, make_store, record
from tests.support.waiting import POLL, eventually

NAME = "broker-a"


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with etcd_cluster(Path(tmp_path_factory.mktemp("etcd"))) as cluster:
        yield cluster


@pytest.fixture
def settings(etcd: EtcdCluster, request: pytest.FixtureRequest) -> EtcdSettings:
    return etcd.settings(f"/test/{request.node.name}/")


@pytest.fixture
async def client(settings: EtcdSettings) -> AsyncIterator[EtcdClient]:
    async with EtcdClient(settings) as made:
        yield made


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MessageStore]:
    opened = make_store(tmp_path / "broker")
    yield opened
    await opened.close()


def link(
    settings: EtcdSettings,
    store: MessageStore,
    broker_id: int = 0,
    handover: RunHandover | None = None,
    clock: FakeClock | None = None,
    heartbeat: float = 0.1,
) -> ControllerLink:
    return ControllerLink(
        EtcdClient(settings),
        NAME,
        broker_id,
        f"127.0.0.1:{10911 + broker_id}",
        store,
        EpochFile(store.config.root).load(),
        heartbeat=heartbeat,
        lease_ttl=2,
        margin=0.5,
        handover=handover,
        **({"clock": clock} if clock is not None else {}),
    )


async def as_master(made: ControllerLink) -> ReplicationState:
    """Start (unless started), wait for the grant naming this run, take the master key."""
    if made.keeper is None:
        await made.start()
    found, revision = await made.state_at_start()
    assert (found.master_id, found.master_run) == (made.broker_id, made.run_id)
    assert await made.take_master(found, revision)
    made.take(found, revision)
    return found


@contextlib.asynccontextmanager
async def closing(made: ControllerLink) -> AsyncIterator[ControllerLink]:
    try:
        yield made
    finally:
        await made.close()


async def test_a_master_writes_only_while_its_own_etcd_lease_lives(
    settings: EtcdSettings, client: EtcdClient, store: MessageStore, tmp_path: Path
) -> None:
    async with running(controller(client, tmp_path)), closing(link(settings, store)) as master:
        found = await as_master(master)
        assert (found.epoch, master.is_master, master.holds_lease()) == (1, True, True)
        assert master.keeper is not None
        await client.revoke(master.keeper.lease.id)  # etcd ends it (as after a pause past its TTL)
        await asyncio.wait_for(master.keeper.lost.wait(), 5)
        assert not master.holds_lease(), "fenced: another may be granted now"


async def test_masters_keep_writing_while_the_controller_leader_changes(
    settings: EtcdSettings, client: EtcdClient, store: MessageStore, tmp_path: Path
) -> None:
    one, two = controller(client, tmp_path / "1", "ns-1:9876"), controller(client, tmp_path / "2", "ns-2:9876")
    async with running(one), running(two), closing(link(settings, store)) as master:
        await as_master(master)
        leader, other = (one, two) if one.leading.is_set() else (two, one)
        assert leader.current_election is not None
        await client.revoke(leader.current_election.lease)  # the leading nameserver is killed
        held: list[bool] = []

        async def sampled_through_the_change() -> bool:  # 3 s of samples: past a master's lease of 2 s
            held.append(master.holds_lease())
            return other.leading.is_set() and len(held) >= 3 / POLL

        await eventually(sampled_through_the_change, "the other controller leads", 15)
        assert all(held), "a change of controller leader paused the master's writes"
        assert (await state(client, NAME)).epoch == 1  # type: ignore[union-attr]


async def test_a_restarted_master_waits_for_a_new_grant_and_gets_a_new_epoch(
    settings: EtcdSettings, client: EtcdClient, store: MessageStore, tmp_path: Path
) -> None:
    async with running(controller(client, tmp_path)):
        async with closing(link(settings, store)) as first:
            await as_master(first)
        async with closing(link(settings, store)) as again:  # the same broker, a new run of its app
            found = await as_master(again)
    assert (found.epoch, found.master_run) == (2, again.run_id), "every grant of mastership is a new epoch"


async def test_a_restarted_master_does_not_acknowledge_alone_while_a_slave_is_in_the_states_set(
    settings: EtcdSettings, client: EtcdClient, store: MessageStore, tmp_path: Path
) -> None:
    async with closing(link(settings, store)) as master, running(controller(client, tmp_path)):
        await master.start()
        await replica(client, NAME, 1, log_end=0)  # the slave, alive (it will not acknowledge anything here)
        found = await as_master(master)
        assert await master.change_in_sync([1])  # it joined in the run before the restart
        in_sync = InSyncReplicas(NAME, 0.3, EventWriter(tmp_path / "export", "broker", enabled=False))
        in_sync.answered = 0
        in_sync.confirm = master.change_in_sync
        in_sync.start_with([i for i in (await state(client, NAME)).in_sync if i != 0])  # type: ignore[union-attr]
        waiting = asyncio.create_task(in_sync.wait(100))
        done, _ = await asyncio.wait({waiting}, timeout=0.1)  # within the replication timeout
        assert not done, "a restarted master answered alone while the state says slave 1 is in sync"
        await asyncio.wait_for(waiting, 5)  # slave 1 silent past the timeout: it leaves, recorded first
        recorded = await state(client, NAME)
    assert recorded is not None
    assert (recorded.in_sync, recorded.version, recorded.epoch) == ([0], found.version + 2, found.epoch)


async def master_of_slave_1(master: ControllerLink, client: EtcdClient, tmp_path: Path) -> InSyncReplicas:
    """`master` granted and holding its key, slave 1 reported in etcd, and the master's in-sync set (empty yet)."""
    await master.start()
    await replica(client, NAME, 1, log_end=0)
    await as_master(master)
    return InSyncReplicas(NAME, 0.3, EventWriter(tmp_path / "export", "broker", enabled=False))


async def test_a_slave_that_joins_is_in_etcds_set_at_once_not_at_the_masters_next_heartbeat(
    settings: EtcdSettings, client: EtcdClient, store: MessageStore, tmp_path: Path
) -> None:
    # Until the join is in etcd the controller may not promote that slave: a master killed in between leaves nobody
    # to promote. The heartbeat here is a minute, so only the join itself can have written it.
    async with closing(link(settings, store, heartbeat=60)) as master, running(controller(client, tmp_path)):
        in_sync = await master_of_slave_1(master, client, tmp_path)
        following = asyncio.create_task(master.run(in_sync, lambda why: None))
        try:
            in_sync.acked(1, "127.0.0.1:10912", 0, 0)  # slave 1 has the master's whole log

            async def recorded() -> bool:
                found = await state(client, NAME)
                return found is not None and found.in_sync == [0, 1]

            await eventually(recorded, "slave 1 in etcd's in-sync set", timeout=5)
        finally:
            await cancelled(following)


async def test_a_slave_in_a_masters_in_sync_set_is_electable_only_once_etcd_records_it(
    settings: EtcdSettings, client: EtcdClient, store: MessageStore, tmp_path: Path
) -> None:
    # The master counts a slave in at once (its writes wait for it from then on); the controller can promote it only
    # once etcd has the larger set. The replication status says both, and its wait for a slave waits for the second.
    async with closing(link(settings, store, heartbeat=60)) as master, running(controller(client, tmp_path)):
        in_sync = await master_of_slave_1(master, client, tmp_path)
        replication = Replication(BrokerRole.SYNC_MASTER, NAME, 0, store, in_sync)
        replication.controller = master
        in_sync.acked(1, "127.0.0.1:10912", 0, 0)  # joined here; nothing runs that records it
        status = replication.status()
        assert (status.in_sync, status.electable) == ([1], []), status
        assert not await master.recorded(1, 0.05)

        waiting = asyncio.create_task(replication.joined(1, 10))
        await asyncio.sleep(0)
        assert not waiting.done()
        assert await master.change_in_sync([1])  # what the master's join task writes
        await asyncio.wait_for(waiting, 5)
        assert replication.status().electable == [1]
        found = await state(client, NAME)
        assert found is not None
        assert found.in_sync == [0, 1]


async def test_an_in_sync_change_fails_once_an_election_happened_in_between(
    settings: EtcdSettings, client: EtcdClient, store: MessageStore, tmp_path: Path
) -> None:
    async with closing(link(settings, store)) as master, running(controller(client, tmp_path)):
        await master.start()
        slave = await replica(client, NAME, 1, log_end=0)
        await as_master(master)
        assert await master.change_in_sync([1])
        assert master.keeper is not None
        await master._stop_keeping()  # paused: no keep-alive any more ...
        await client.revoke(master.keeper.lease.id)  # ... and etcd ends its lease
        promoted = await granted(client, NAME, 2)
        assert promoted.master_id == 1
        assert not await master.change_in_sync([]), "its epoch is over: the shrink is refused"
    assert await state(client, NAME) == promoted
    await client.revoke(slave.id)


async def test_a_state_below_the_brokers_own_epoch_is_refused_until_the_controller_replaces_it(
    settings: EtcdSettings, client: EtcdClient, store: MessageStore, tmp_path: Path
) -> None:
    epochs = EpochFile(store.config.root)
    epochs.begin(5, 0)
    stale = ReplicationState(epoch=3, master_id=1, master_address="127.0.0.1:10912", master_run="r", in_sync=[1],
                             version=1)  # fmt: skip
    await client.put(f"brokers/{NAME}/state", stale.model_dump_json())
    async with closing(link(settings, store)) as broker:
        await broker.start()
        reading = asyncio.create_task(broker.state_at_start())
        done, _ = await asyncio.wait({reading}, timeout=0.3)  # no controller yet: the stale state is all there is
        assert not done, "it took an epoch below one it holds data of"
        async with running(controller(client, tmp_path)):
            found, _ = await asyncio.wait_for(reading, 10)
    assert (found.epoch, found.master_id, found.master_run) == (6, 0, broker.run_id)


async def test_a_broker_report_lives_as_long_as_its_run(
    settings: EtcdSettings, client: EtcdClient, store: MessageStore
) -> None:
    broker = link(settings, store, broker_id=2)
    await broker.start()
    assert await client.get(f"brokers/{NAME}/replicas/2") is not None
    await broker.close()

    async def gone() -> bool:
        return await client.get(f"brokers/{NAME}/replicas/2") is None

    await eventually(gone, "a closed run's report is gone at once (its lease revoked)", 1.0)


async def test_a_report_whose_log_end_alone_moved_is_put_every_few_seconds_not_on_every_heartbeat(
    settings: EtcdSettings, client: EtcdClient, store: MessageStore
) -> None:
    clock = FakeClock()
    broker = link(settings, store, clock=clock)
    await broker.start()
    key = f"brokers/{NAME}/replicas/0"
    first = await client.get(key)
    assert first is not None
    try:
        await fill(store, 3)
        await broker.report()
        unchanged = await client.get(key)
        assert unchanged is not None
        assert unchanged.mod_revision == first.mod_revision, "put again for a log end that moved a heartbeat ago"

        clock.advance(LOG_END_REPORT_SECONDS)
        await broker.report()
        again = await client.get(key)
        assert again is not None
        assert ReplicaReport.model_validate_json(again.value).log_end == store.commitlog.write_offset > 0
    finally:
        await broker.close()


async def test_a_restarted_master_app_answers_a_put_only_once_its_silent_slave_left_the_set_in_etcd(
    settings: EtcdSettings, client: EtcdClient, nameserver: ServedApp, tmp_path: Path
) -> None:
    broker = broker_settings(
        nameserver, NAME, controlled=True, role=BrokerRole.SYNC_MASTER, sync_replication_timeout_ms=300,
        data_dir=tmp_path / "data",
    )  # fmt: skip
    async with running(controller(client, tmp_path)):
        async for http in in_process(create_app(broker, etcd=settings)):
            assert (await http.put("/internal/topics/orders", json={"read_queues": 1, "write_queues": 1})).is_success
            await put(http, "before the restart")
            first = await granted(client, NAME, 1)
            await replica(client, NAME, 1)  # the slave: alive, but it copies nothing from now on
    # Slave 1 joined in that run. Written once the run stopped: a running master writes its own set back on its
    # next heartbeat (it never saw this slave), and on a slow machine that came before the stop.
    joined = first.model_copy(update={"in_sync": [0, 1], "version": first.version + 1})
    await client.put(f"brokers/{NAME}/state", joined.model_dump_json())
    # no controller leads while the broker restarts (else slave 1, in sync, could be promoted meanwhile)
    leading = asyncio.create_task(lead_once_reported_again(client, tmp_path, first.master_run))
    try:
        async for http in in_process(create_app(broker, etcd=settings)):  # a new run: it waits for a new grant
            again = await granted(client, NAME, 2)
            assert (again.master_id, again.in_sync) == (0, [0, 1]), "slave 1 is alive: the grant keeps it in the set"
            await put(http, "after the restart")  # waits for slave 1, which leaves (recorded) after 300 ms
            recorded = await state(client, NAME)
    finally:
        leading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await leading
    assert recorded is not None
    assert (recorded.epoch, recorded.in_sync) == (2, [0]), "answered alone only once etcd says so"


async def lead_once_reported_again(client: EtcdClient, folder: Path, old_run: str) -> None:
    """A controller, once broker 0 has reported a run other than `old_run`; until cancelled."""

    async def reported_again() -> bool:
        kv = await client.get(f"brokers/{NAME}/replicas/0")
        return kv is not None and ReplicaReport.model_validate_json(kv.value).run != old_run

    await eventually(reported_again, "broker 0 reports its new run", 10)
    async with running(controller(client, folder)):
        await asyncio.Event().wait()


async def test_a_controlled_broker_without_etcd_refuses_to_start(nameserver: ServedApp, tmp_path: Path) -> None:
    broker = broker_settings(nameserver, NAME, controlled=True, data_dir=tmp_path / "data")
    with pytest.raises(ValueError, match="PETREL_ETCD_ENDPOINTS"):
        async for _ in in_process(create_app(broker, etcd=EtcdSettings(endpoints=[]))):
            pass


async def test_a_promoted_slave_keeps_its_run_and_lease_across_its_restart_so_one_election_makes_it_master(
    settings: EtcdSettings, client: EtcdClient, store: MessageStore, tmp_path: Path
) -> None:
    master = await replica(client, NAME, 0, log_end=0)
    async with running(controller(client, tmp_path)), closing(link(settings, store, broker_id=1)) as slave:
        await slave.start()
        first = await granted(client, NAME, 1)
        assert first.master_id == 0
        joined = first.model_copy(update={"in_sync": [0, 1], "version": 2})
        await client.put(f"brokers/{NAME}/state", joined.model_dump_json())
        await client.revoke(master.id)  # master 0 dies
        promoted = await granted(client, NAME, 2)
        assert (promoted.master_id, promoted.master_run) == (1, slave.run_id)
        handover = slave.hand_over()  # the slave's app restarts to take the role
        assert handover is not None
        async with closing(link(settings, store, 1, handover)) as restarted:
            took = await as_master(restarted)
    assert (took.epoch, took.master_run) == (2, slave.run_id), "no second election: the grant named this run"


async def a_master_whose_disk_fails(
    settings: EtcdSettings, client: EtcdClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, slave_in_sync: bool
) -> tuple[ReplicationState, ReplicationState | None, list[str]]:
    """Broker 0 master with slave 1 alive (in sync or not); a SYNC_FLUSH put meets a failing fdatasync. The state
    when the master took the role, the state after (broker 1 granted, or the controller's next decisions), the
    restarts the master's run asked for."""
    store = make_store(tmp_path / "broker", flush_mode=FlushMode.SYNC_FLUSH)
    store.start()
    restarts: list[str] = []
    try:
        async with closing(link(settings, store)) as master, running(controller(client, tmp_path)) as ctl:
            await master.start()
            await replica(client, NAME, 1, log_end=0)
            found = await as_master(master)
            in_sync = InSyncReplicas(NAME, 0.3, EventWriter(tmp_path / "export", "broker", enabled=False))
            following = asyncio.create_task(master.run(in_sync, restarts.append))
            try:
                if slave_in_sync:
                    in_sync.acked(1, "127.0.0.1:10912", store.commitlog.write_offset, store.commitlog.write_offset)
                    await eventually(lambda: _in_sync_is(client, [0, 1]), "slave 1 in etcd's in-sync set", 5)
                failing_disk(monkeypatch, [OSError(errno.EIO, "Input/output error")])
                with pytest.raises(FlushTimeout):
                    await store.put(record("T", 0, b"in doubt"))
                assert store.read_only

                if slave_in_sync:

                    async def promoted() -> bool:
                        now = await state(client, NAME)
                        return now is not None and now.master_id == 1

                    await eventually(promoted, "broker 1 granted", 5)
                else:

                    async def master_saw_it() -> bool:
                        return master._read_only_logged

                    await eventually(master_saw_it, "the master's follow loop saw its read-only store", 5)
                    await scanned(ctl, 5)  # the controller decided five more times after it
                after = await state(client, NAME)
            finally:
                following.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await following
            return found, after, restarts
    finally:
        monkeypatch.undo()
        await store.close()


async def _in_sync_is(client: EtcdClient, wanted: list[int]) -> bool:
    found = await state(client, NAME)
    return found is not None and found.in_sync == wanted


async def test_a_master_whose_store_turned_read_only_hands_over_to_its_in_sync_slave_at_once(
    settings: EtcdSettings, client: EtcdClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found, after, restarts = await a_master_whose_disk_fails(
        settings, client, tmp_path, monkeypatch, slave_in_sync=True
    )
    assert after is not None, "the slave was not promoted: the read-only master kept its lease"
    assert (after.master_id, after.epoch, after.in_sync) == (1, found.epoch + 1, [1])
    assert len(restarts) == 1
    assert "store is read-only" in restarts[0]


async def test_a_master_whose_store_turned_read_only_stays_for_reads_while_no_slave_is_in_sync(
    settings: EtcdSettings, client: EtcdClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found, after, restarts = await a_master_whose_disk_fails(
        settings, client, tmp_path, monkeypatch, slave_in_sync=False
    )
    assert after is not None
    assert (after.master_id, after.epoch) == (0, found.epoch), "a slave without every answered write was promoted"
    assert restarts == []


async def test_a_master_that_left_its_set_for_a_read_only_store_is_never_put_back_by_a_late_join(
    settings: EtcdSettings, client: EtcdClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No controller once the grant is made: nothing replaces the state, so only the master's own writes change it.
    store = make_store(tmp_path / "broker", flush_mode=FlushMode.SYNC_FLUSH)
    store.start()
    restarts: list[str] = []
    try:
        async with closing(link(settings, store)) as master:
            async with running(controller(client, tmp_path)):
                await master.start()
                await replica(client, NAME, 1, log_end=0)
                await as_master(master)
            in_sync = InSyncReplicas(NAME, 0.3, EventWriter(tmp_path / "export", "broker", enabled=False))
            following = asyncio.create_task(master.run(in_sync, restarts.append))
            try:
                in_sync.acked(1, "127.0.0.1:10912", store.commitlog.write_offset, store.commitlog.write_offset)
                await eventually(lambda: _in_sync_is(client, [0, 1]), "slave 1 in etcd's in-sync set", 5)
                failing_disk(monkeypatch, [OSError(errno.EIO, "Input/output error")])
                with pytest.raises(FlushTimeout):
                    await store.put(record("T", 0, b"in doubt"))

                async def handed_over() -> bool:
                    return restarts != []

                await eventually(handed_over, "the read-only master handing over", 5)
            finally:
                following.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await following
            assert await _in_sync_is(client, [1])
            assert not await master.change_in_sync([1]), "a join recorded after the handover put the master back"
            assert await _in_sync_is(client, [1])
    finally:
        monkeypatch.undo()
        await store.close()
