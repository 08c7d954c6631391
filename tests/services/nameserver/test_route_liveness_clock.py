"""Whether a broker lives is timed by the nameserver's monotonic clock: a step of its wall clock (NTP, an operator,
the nemesis run's clock step) neither drops the brokers that heartbeat nor keeps one gone silent for an hour."""

from __future__ import annotations

import time

import pytest

from libs.routing import BrokerRegistration, TopicConfigBody
from services.nameserver.route_table import RouteTable

EXPIRY = 120.0


def registration(address: str) -> BrokerRegistration:
    topics = [TopicConfigBody(name="orders", read_queues=4, write_queues=4)]
    return BrokerRegistration(cluster="DefaultCluster", address=address, data_version=1, topics=topics)


def test_a_wall_clock_step_ahead_drops_no_live_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    table = RouteTable()
    table.register("broker-a", 0, registration("127.0.0.1:10911"))
    true_now = time.time()

    monkeypatch.setattr(time, "time", lambda: true_now + 3600)

    assert table.expire_inactive(EXPIRY) == []
    assert table.route("orders") is not None, "the broker's routes went when the wall clock jumped an hour ahead"


def test_a_broker_heard_while_the_clock_was_ahead_still_expires_once_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    moments = iter([0.0, EXPIRY + 1])
    table = RouteTable(lambda: next(moments))
    true_now = time.time()
    monkeypatch.setattr(time, "time", lambda: true_now + 3600)
    table.register("broker-a", 0, registration("127.0.0.1:10911"))  # heard while the wall clock was an hour ahead
    monkeypatch.setattr(time, "time", lambda: true_now)  # stepped back; broker-a is silent from now on

    assert [i.broker_name for i in table.expire_inactive(EXPIRY)] == ["broker-a"]


def test_the_listing_shows_when_a_broker_was_heard_on_the_wall_clock() -> None:
    table = RouteTable()
    before = int(time.time() * 1000)
    table.register("broker-a", 0, registration("127.0.0.1:10911"))

    heard = table.clusters().clusters[0].brokers[0].instances[0].last_update_ms

    assert before <= heard <= int(time.time() * 1000)
