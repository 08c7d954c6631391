"""The controller: first masters, failover to the most caught-up in-sync slave, epochs that survive a restart."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from libs.controller_api import BrokerReport, InSyncChange
from libs.errors import StaleEpoch
from libs.events.writer import EventWriter
from services.nameserver.app import create_app
from services.nameserver.controller import Controller
from services.nameserver.settings import NameserverSettings
from tests.support.apps import in_process
from tests.support.clock import FakeClock

TIMEOUT = 3.0


def controller(tmp_path: Path, clock: FakeClock) -> Controller:
    made = Controller(tmp_path, TIMEOUT, EventWriter(tmp_path / "export", "nameserver", enabled=False), clock)
    made.load()
    return made


def report(c: Controller, broker_id: int, log_end: int = 0, epoch: int = 0) -> tuple[int | None, int]:
    answer = c.report(
        "broker-a", broker_id, BrokerReport(address=f"127.0.0.1:{10911 + broker_id}", log_end=log_end, epoch=epoch)
    )
    return answer.master_id, answer.epoch


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_broker_id_0_begins_its_name_at_epoch_1_and_a_slave_alone_waits_for_it(
    tmp_path: Path, clock: FakeClock
) -> None:
    c = controller(tmp_path, clock)
    assert report(c, 1) == (None, 0)
    assert report(c, 0) == (0, 1)
    assert report(c, 1) == (0, 1)


def test_a_slave_becomes_the_first_master_when_id_0_never_comes(tmp_path: Path, clock: FakeClock) -> None:
    c = controller(tmp_path, clock)
    assert report(c, 2) == (None, 0)
    clock.advance(TIMEOUT)
    assert report(c, 2) == (2, 1)


def three_brokers(c: Controller, clock: FakeClock) -> None:
    report(c, 0, 5_000)
    report(c, 1, 4_000)
    report(c, 2, 4_500)
    c.change_in_sync("broker-a", InSyncChange(master_id=0, epoch=1, in_sync=[1, 2]))


def test_a_silent_master_is_replaced_by_the_in_sync_slave_whose_log_ends_furthest(
    tmp_path: Path, clock: FakeClock
) -> None:
    c = controller(tmp_path, clock)
    three_brokers(c, clock)
    clock.advance(TIMEOUT - 0.5)
    report(c, 1, 4_000)
    report(c, 2, 4_500)
    c.scan()
    assert report(c, 1, 4_000) == (0, 1), "the master is not yet silent for the timeout"
    clock.advance(0.5)
    c.scan()
    assert report(c, 1, 4_000) == (2, 2)
    assignment = c.view().broker_names[0].assignment
    assert (assignment.in_sync, assignment.master_address) == ([2], "127.0.0.1:10913")


def test_only_a_live_member_of_the_in_sync_set_is_promoted(tmp_path: Path, clock: FakeClock) -> None:
    c = controller(tmp_path, clock)
    report(c, 0, 5_000)
    report(c, 1, 9_000)  # further than anyone, but never in sync: it may lack acknowledged writes
    report(c, 2, 4_500)
    c.change_in_sync("broker-a", InSyncChange(master_id=0, epoch=1, in_sync=[2]))
    clock.advance(TIMEOUT)
    report(c, 1, 9_000)
    c.scan()
    assert report(c, 1, 9_000) == (0, 1), "the in-sync slave 2 is silent too: nobody is promoted"
    report(c, 2, 4_500)
    c.scan()
    assert report(c, 1, 9_000) == (2, 2)


def test_an_old_epoch_cannot_change_the_in_sync_set(tmp_path: Path, clock: FakeClock) -> None:
    c = controller(tmp_path, clock)
    three_brokers(c, clock)
    clock.advance(TIMEOUT)
    report(c, 1)
    c.scan()
    with pytest.raises(StaleEpoch):
        c.change_in_sync("broker-a", InSyncChange(master_id=0, epoch=1, in_sync=[2]))
    assert c.change_in_sync("broker-a", InSyncChange(master_id=1, epoch=2, in_sync=[0])).in_sync == [0, 1]


def test_the_epoch_and_master_survive_a_restart_of_the_controller(tmp_path: Path, clock: FakeClock) -> None:
    c = controller(tmp_path, clock)
    three_brokers(c, clock)
    clock.advance(TIMEOUT)
    report(c, 2, 4_500)
    c.scan()
    again = controller(tmp_path, clock)
    assert report(again, 0, 5_000, epoch=1) == (2, 2), "the old master comes back: it is not master again"
    assert (tmp_path / "controller.json").stat().st_mode & 0o777 == 0o600


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = NameserverSettings(data_dir=tmp_path, controller=True)
    async for c in in_process(create_app(settings)):
        yield c


async def test_over_http_a_report_is_answered_with_the_assignment_and_a_stale_epoch_is_409(
    client: httpx.AsyncClient,
) -> None:
    answer = await client.put(
        "/internal/controller/broker-a/0", json={"address": "127.0.0.1:10911", "log_end": 0, "epoch": 0}
    )
    assert answer.status_code == 200
    assert answer.json() == {
        "broker_name": "broker-a",
        "epoch": 1,
        "master_id": 0,
        "master_address": "127.0.0.1:10911",
        "in_sync": [0],
    }
    stale = await client.put("/internal/controller/broker-a/in-sync", json={"master_id": 0, "epoch": 7, "in_sync": []})
    assert stale.status_code == 409
    assert stale.json()["type"].endswith("/stale-epoch")
    view = (await client.get("/internal/controller")).json()
    assert view["broker_names"][0]["brokers"][0]["address"] == "127.0.0.1:10911"


async def test_a_nameserver_without_the_controller_says_so(tmp_path: Path) -> None:
    async for c in in_process(create_app(NameserverSettings(data_dir=tmp_path))):
        answer = await c.put(
            "/internal/controller/broker-a/0", json={"address": "127.0.0.1:1", "log_end": 0, "epoch": 0}
        )
        assert answer.status_code == 404
        assert "PETREL_NAMESERVER_CONTROLLER" in answer.json()["detail"]


def test_a_controller_that_lost_its_file_never_gives_an_epoch_a_broker_already_holds(
    tmp_path: Path, clock: FakeClock
) -> None:
    c = controller(tmp_path, clock)
    assert report(c, 0, 5_000, epoch=7) == (0, 8)
