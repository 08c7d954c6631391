from libs.routing import BrokerRegistration, TopicChanges, TopicConfigBody
from services.nameserver.route_table import RouteTable
from tests.support.clock import FakeClock


def registration(address: str, *topics: tuple[str, int], version: int = 1) -> BrokerRegistration:
    return BrokerRegistration(
        cluster="DefaultCluster",
        address=address,
        data_version=version,
        topics=[TopicConfigBody(name=name, read_queues=q, write_queues=q) for name, q in topics],
    )


def test_route_spans_every_broker_holding_the_topic() -> None:
    table = RouteTable(FakeClock())
    table.register("broker-a", 0, registration("127.0.0.1:10911", ("orders", 8), ("audit", 2)))
    table.register("broker-b", 0, registration("127.0.0.1:10912", ("orders", 4)))

    route = table.route("orders")

    assert route is not None, "no route for orders"
    assert [(q.broker_name, q.write_queues) for q in route.queues] == [("broker-a", 8), ("broker-b", 4)]
    assert {b.broker_name: b.master for b in route.brokers} == {
        "broker-a": "127.0.0.1:10911",
        "broker-b": "127.0.0.1:10912",
    }
    audit = table.route("audit")
    assert audit is not None, "no route for audit"
    assert [q.broker_name for q in audit.queues] == ["broker-a"]
    assert table.route("nothing") is None


def test_re_registration_replaces_the_brokers_topics() -> None:
    table = RouteTable(FakeClock())
    table.register("broker-a", 0, registration("127.0.0.1:10911", ("orders", 8), ("audit", 2)))
    table.register("broker-a", 0, registration("127.0.0.1:10911", ("orders", 8), version=2))

    assert table.route("audit") is None
    assert [r.topic for r in table.routes()] == ["orders"]


def test_broker_silent_past_expiry_is_dropped_with_its_routes() -> None:
    clock = FakeClock()
    table = RouteTable(clock)
    table.register("broker-a", 0, registration("127.0.0.1:10911", ("orders", 8)))
    table.register("broker-b", 0, registration("127.0.0.1:10912", ("orders", 8)))

    clock.advance(100)
    assert table.heartbeat("broker-b", 0, 1).known
    clock.advance(21)
    expired = table.expire_inactive(120)

    assert [i.broker_name for i in expired] == ["broker-a"]
    route = table.route("orders")
    assert route is not None, "no route for orders"
    assert [q.broker_name for q in route.queues] == ["broker-b"]
    assert [b.broker_name for c in table.clusters().clusters for b in c.brokers] == ["broker-b"]


def test_broker_heard_within_expiry_is_kept() -> None:
    clock = FakeClock()
    table = RouteTable(clock)
    table.register("broker-a", 0, registration("127.0.0.1:10911", ("orders", 8)))
    clock.advance(119.9)

    assert table.expire_inactive(120) == []
    route = table.route("orders")
    assert route is not None, "the route of orders went with its broker"
    assert [q.broker_name for q in route.queues] == ["broker-a"]


def test_heartbeat_tells_an_unknown_or_stale_broker_to_register() -> None:
    table = RouteTable(FakeClock())
    assert not table.heartbeat("broker-a", 0, 1).known

    table.register("broker-a", 0, registration("127.0.0.1:10911", ("orders", 8), version=3))
    stale = table.heartbeat("broker-a", 0, 4)
    assert stale.known
    assert not stale.in_sync
    assert table.heartbeat("broker-a", 0, 3).in_sync


def test_slave_adds_an_address_but_not_topics() -> None:
    table = RouteTable(FakeClock())
    table.register("broker-a", 0, registration("127.0.0.1:10911", ("orders", 8)))
    table.register("broker-a", 1, registration("127.0.0.1:10921"))

    route = table.route("orders")
    assert route is not None, "no route for orders"
    assert route.brokers[0].addresses == {0: "127.0.0.1:10911", 1: "127.0.0.1:10921"}


def test_unregister_of_last_instance_removes_the_route() -> None:
    table = RouteTable(FakeClock())
    table.register("broker-a", 0, registration("127.0.0.1:10911", ("orders", 8)))

    assert table.unregister("broker-a", 0)
    assert not table.unregister("broker-a", 0)
    assert table.route("orders") is None


def test_topic_changes_apply_what_changed_from_the_version_held() -> None:
    table = RouteTable(FakeClock())
    table.register("broker-a", 0, registration("127.0.0.1:10911", ("orders", 8), ("audit", 2), version=3))

    ack = table.change(
        "broker-a",
        0,
        TopicChanges(
            from_version=3,
            data_version=4,
            updated=[TopicConfigBody(name="payments", read_queues=2, write_queues=2)],
            removed=["audit"],
        ),
    )

    assert (ack.known, ack.in_sync) == (True, True)
    assert [r.topic for r in table.routes()] == ["orders", "payments"]
    assert table.heartbeat("broker-a", 0, 4).in_sync


def test_topic_changes_from_another_version_are_refused_and_change_nothing() -> None:
    table = RouteTable(FakeClock())
    table.register("broker-a", 0, registration("127.0.0.1:10911", ("orders", 8), version=3))

    stale = TopicChanges(from_version=5, data_version=6, removed=["orders"])
    ack = table.change("broker-a", 0, stale)

    assert (ack.known, ack.in_sync) == (True, False), "the broker must register in full"
    assert [r.topic for r in table.routes()] == ["orders"]
    unknown = table.change("broker-b", 0, stale)
    assert (unknown.known, unknown.in_sync) == (False, False)
