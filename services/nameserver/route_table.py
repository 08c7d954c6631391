"""RouteTable: which brokers are alive and which queues of which topic each one holds.

The state of a broker is what it last registered: a full registration replaces
its topics wholesale, and TopicChanges apply what changed since the data version
the nameserver holds (a change from any other version is refused: the broker
then registers in full). A broker instance not heard from for `expiry` seconds is
dropped by `expire_inactive`; a broker name whose last instance is gone takes
its queues with it. Those seconds are the monotonic clock's: a step of the wall
clock (which only the listing's `last_update_ms` shows) neither drops brokers that
heartbeat nor keeps one silent for as long as the step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from libs.routing import (
    MASTER_ID,
    BrokerData,
    BrokerLiveness,
    BrokerRegistration,
    ClusterBroker,
    ClusterInfo,
    ClusterListing,
    HeartbeatAck,
    QueueData,
    TopicChanges,
    TopicRoute,
)
from libs.topic import TopicConfig


@dataclass(slots=True)
class BrokerInstance:
    cluster: str
    broker_name: str
    broker_id: int
    address: str
    data_version: int
    last_update: float
    """the table's monotonic clock when it was last heard from"""
    claims_master: bool
    epoch: int
    last_update_ms: int = 0
    """the wall clock then (ms), for the listing"""


class RouteTable:
    def __init__(self, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        """`clock` times liveness (monotonic); `wall` only says when, in the listing."""
        self.clock = clock
        self.wall = wall
        self._instances: dict[tuple[str, int], BrokerInstance] = {}
        self._topics: dict[str, dict[str, TopicConfig]] = {}
        """broker name -> topic -> config, as the broker's master registered them."""

    def register(self, broker_name: str, broker_id: int, registration: BrokerRegistration) -> None:
        claims = registration.master if registration.master is not None else broker_id == MASTER_ID
        instance = self._instances[(broker_name, broker_id)] = BrokerInstance(
            registration.cluster,
            broker_name,
            broker_id,
            registration.address,
            registration.data_version,
            self.clock(),
            claims,
            registration.epoch,
            self._wall_ms(),
        )
        if self._speaks_for_topics(instance):
            self._topics[broker_name] = {t.name: t.to_config() for t in registration.topics}

    def _wall_ms(self) -> int:
        return int(self.wall() * 1000)

    def _speaks_for_topics(self, instance: BrokerInstance) -> bool:
        """The master's topics are its broker name's; a slave's (a copy) only while no master is known."""
        return self.master_of(instance.broker_name) is instance or instance.broker_name not in self._topics

    def master_of(self, broker_name: str) -> BrokerInstance | None:
        """Of the instances that say they are the master, the one at the highest epoch (a promoted slave's
        over an old master that has not come back yet)."""
        claims = [i for (name, _), i in self._instances.items() if name == broker_name and i.claims_master]
        return max(claims, key=lambda i: (i.epoch, -i.broker_id)) if claims else None

    def change(self, broker_name: str, broker_id: int, changes: TopicChanges) -> HeartbeatAck:
        """Apply a broker's topic changes; `in_sync: false` (nothing applied) unless it holds from_version."""
        instance = self._instances.get((broker_name, broker_id))
        if instance is None:
            return HeartbeatAck(known=False, in_sync=False)
        if instance.data_version != changes.from_version:
            return HeartbeatAck(known=True, in_sync=False)
        instance.data_version = changes.data_version
        instance.last_update, instance.last_update_ms = self.clock(), self._wall_ms()
        if self._speaks_for_topics(instance):
            topics = self._topics.setdefault(broker_name, {})
            for name in changes.removed:
                topics.pop(name, None)
            topics.update((t.name, t.to_config()) for t in changes.updated)
        return HeartbeatAck(known=True, in_sync=True)

    def heartbeat(self, broker_name: str, broker_id: int, data_version: int) -> HeartbeatAck:
        instance = self._instances.get((broker_name, broker_id))
        if instance is None:
            return HeartbeatAck(known=False, in_sync=False)
        instance.last_update, instance.last_update_ms = self.clock(), self._wall_ms()
        return HeartbeatAck(known=True, in_sync=instance.data_version == data_version)

    def unregister(self, broker_name: str, broker_id: int) -> bool:
        removed = self._instances.pop((broker_name, broker_id), None)
        if removed is not None:
            self._forget_if_gone(broker_name)
        return removed is not None

    def expire_inactive(self, expiry: float) -> list[BrokerInstance]:
        deadline = self.clock() - expiry
        expired = [i for i in self._instances.values() if i.last_update < deadline]
        for instance in expired:
            del self._instances[(instance.broker_name, instance.broker_id)]
            self._forget_if_gone(instance.broker_name)
        return expired

    def _forget_if_gone(self, broker_name: str) -> None:
        if not any(name == broker_name for name, _ in self._instances):
            self._topics.pop(broker_name, None)

    def route(self, topic: str) -> TopicRoute | None:
        queues = [
            _queue_data(broker_name, configs[topic])
            for broker_name, configs in sorted(self._topics.items())
            if topic in configs
        ]
        if not queues:
            return None
        return TopicRoute(topic=topic, queues=queues, brokers=[self._broker_data(q.broker_name) for q in queues])

    def routes(self) -> list[TopicRoute]:
        names = sorted({topic for configs in self._topics.values() for topic in configs})
        return [route for name in names if (route := self.route(name)) is not None]

    def clusters(self) -> ClusterListing:
        by_cluster: dict[str, dict[str, list[BrokerLiveness]]] = {}
        for instance in sorted(self._instances.values(), key=lambda i: (i.broker_name, i.broker_id)):
            by_cluster.setdefault(instance.cluster, {}).setdefault(instance.broker_name, []).append(
                BrokerLiveness(
                    broker_id=instance.broker_id,
                    address=instance.address,
                    master=self.master_of(instance.broker_name) is instance,
                    epoch=instance.epoch,
                    data_version=instance.data_version,
                    last_update_ms=instance.last_update_ms,
                )
            )
        return ClusterListing(
            clusters=[
                ClusterInfo(
                    name=cluster, brokers=[ClusterBroker(broker_name=b, instances=i) for b, i in brokers.items()]
                )
                for cluster, brokers in sorted(by_cluster.items())
            ]
        )

    @property
    def instance_count(self) -> int:
        return len(self._instances)

    def _broker_data(self, broker_name: str) -> BrokerData:
        instances = [i for (name, _), i in self._instances.items() if name == broker_name]
        cluster = instances[0].cluster if instances else ""
        master = self.master_of(broker_name)
        return BrokerData(
            cluster=cluster,
            broker_name=broker_name,
            addresses={i.broker_id: i.address for i in instances},
            master_id=None if master is None else master.broker_id,
            epoch=0 if master is None else master.epoch,
        )


def _queue_data(broker_name: str, config: TopicConfig) -> QueueData:
    return QueueData(
        broker_name=broker_name,
        read_queues=config.read_queues,
        write_queues=config.write_queues,
        perm=config.perm,
        message_type=config.message_type,
    )
