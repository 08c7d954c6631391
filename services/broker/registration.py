"""NameserverRegistrar: keeps every configured nameserver informed of this broker.

A full registration goes out at start and after each topic change; every
`interval` seconds a light heartbeat follows, and a nameserver that answers that
it has forgotten the broker, or holds an older data version, gets a full
registration again. A nameserver that does not answer is logged and retried on
the next round; it never stops the broker.
"""

from __future__ import annotations

import asyncio
import logging

from libs.errors import PetrelError
from libs.http.client import InternalClient
from libs.routing import BrokerRegistration, HeartbeatAck, TopicConfigBody
from services.broker.settings import BrokerSettings
from services.broker.topics import TopicTable

log = logging.getLogger(__name__)


class NameserverRegistrar:
    def __init__(self, settings: BrokerSettings, topics: TopicTable, client: InternalClient) -> None:
        self.settings = settings
        self.topics = topics
        self.client = client
        self.registered: dict[str, int] = {}
        """nameserver address -> data version it acknowledged."""
        self._path = f"/internal/brokers/{settings.broker_name}/{settings.broker_id}"
        self._lock = asyncio.Lock()

    def registration(self) -> BrokerRegistration:
        return BrokerRegistration(
            cluster=self.settings.cluster,
            address=self.settings.address,
            data_version=self.topics.data_version,
            topics=[TopicConfigBody.of(t) for t in self.topics.all()],
        )

    async def register_all(self) -> None:
        async with self._lock:
            body = self.registration().model_dump(mode="json")
            await asyncio.gather(*(self._register(ns, body) for ns in self.settings.nameservers))

    async def _register(self, nameserver: str, body: dict[str, object]) -> None:
        try:
            await self.client.json("PUT", f"http://{nameserver}{self._path}", body=body)
        except PetrelError as exc:
            self.registered.pop(nameserver, None)
            log.warning("registering with nameserver %s failed: %s", nameserver, exc.detail)
            return
        self.registered[nameserver] = int(str(body["data_version"]))

    async def heartbeat_all(self) -> None:
        async with self._lock:
            version = self.topics.data_version
            await asyncio.gather(*(self._heartbeat(ns, version) for ns in self.settings.nameservers))

    async def _heartbeat(self, nameserver: str, version: int) -> None:
        try:
            answer = await self.client.json(
                "POST",
                f"http://{nameserver}{self._path}/heartbeat",
                body={"data_version": version},
                idempotent=True,
            )
            ack = HeartbeatAck.model_validate(answer)
        except PetrelError as exc:
            self.registered.pop(nameserver, None)
            log.warning("heartbeat to nameserver %s failed: %s", nameserver, exc.detail)
            return
        if not (ack.known and ack.in_sync):
            await self._register(nameserver, self.registration().model_dump(mode="json"))

    async def unregister_all(self) -> None:
        async def one(nameserver: str) -> None:
            try:
                await self.client.json("DELETE", f"http://{nameserver}{self._path}", timeout=2.0)
            except PetrelError as exc:
                log.info("unregistering from nameserver %s: %s", nameserver, exc.detail)

        await asyncio.gather(*(one(ns) for ns in self.settings.nameservers))

    async def run(self) -> None:
        """The periodic round: heartbeat, re-registering where a nameserver needs it."""
        while True:
            await asyncio.sleep(self.settings.register_interval_seconds)
            await self.heartbeat_all()
