"""NameserverRegistrar: keeps every configured nameserver informed of this broker.

A full registration goes out at start, in pages of REGISTRATION_PAGE topics (the
first page replaces what the nameserver held, the others add to it at the same
data version), so no table is too large for one request. After that, a topic
change sends only what changed (TopicChanges from the version the nameserver
acknowledged to the new one). Every `interval` seconds a light heartbeat carries
the data version; a nameserver that has forgotten the broker (restarted), holds
another version, refuses a change, or missed part of a registration gets a full
registration again. A nameserver that does not answer is logged and retried on
the next round; it never stops the broker.
"""

from __future__ import annotations

import asyncio
import logging

from libs.errors import PetrelError
from libs.http.client import InternalClient
from libs.http.paths import internal_path
from libs.routing import REGISTRATION_PAGE, BrokerRegistration, HeartbeatAck, TopicChanges, TopicConfigBody
from libs.topic import TopicConfig
from services.broker.settings import BrokerSettings
from services.broker.topics import TopicChange, TopicTable

log = logging.getLogger(__name__)


class NameserverRegistrar:
    def __init__(
        self, settings: BrokerSettings, topics: TopicTable, client: InternalClient, page: int = REGISTRATION_PAGE
    ) -> None:
        self.settings = settings
        self.topics = topics
        self.client = client
        self.page = page
        self.registered: dict[str, int] = {}
        """nameserver address -> data version it holds in full (acknowledged)."""
        self._path = internal_path(
            "/internal/brokers/{broker_name}/{broker_id}",
            broker_name=settings.broker_name,
            broker_id=settings.broker_id,
        )
        self._lock = asyncio.Lock()
        self._master: bool | None = None
        self._epoch = 0

    def claim(self, master: bool, epoch: int) -> None:
        """What this broker registers as for this run: its broker name's master (at a controller's epoch) or not."""
        self._master, self._epoch = master, epoch

    def _snapshot(self) -> tuple[int, list[TopicConfig]]:
        """The table and its version, read together (no await between)."""
        return self.topics.data_version, self.topics.all()

    async def register_all(self) -> None:
        async with self._lock:
            version, topics = self._snapshot()
            await asyncio.gather(*(self._register(ns, version, topics) for ns in self.settings.nameservers))

    async def _register(self, nameserver: str, version: int, topics: list[TopicConfig]) -> None:
        pages = [topics[i : i + self.page] for i in range(0, len(topics), self.page)] or [[]]
        first = BrokerRegistration(
            cluster=self.settings.cluster,
            address=self.settings.address,
            data_version=version,
            topics=[TopicConfigBody.of(t) for t in pages[0]],
            master=self._master,
            epoch=self._epoch,
        )
        try:
            await self.client.json("PUT", f"http://{nameserver}{self._path}", body=first.model_dump(mode="json"))
            for page in pages[1:]:
                more = TopicChanges(
                    from_version=version, data_version=version, updated=[TopicConfigBody.of(t) for t in page]
                )
                if not (await self._send_changes(nameserver, more)).in_sync:
                    raise PetrelError("the nameserver lost the registration while its pages were being sent")
        except PetrelError as exc:
            self.registered.pop(nameserver, None)
            log.warning("registering with nameserver %s failed: %s", nameserver, exc.detail)
            return
        self.registered[nameserver] = version

    async def _send_changes(self, nameserver: str, changes: TopicChanges) -> HeartbeatAck:
        answer = await self.client.json(
            "POST", f"http://{nameserver}{self._path}/topics", body=changes.model_dump(mode="json"), idempotent=True
        )
        return HeartbeatAck.model_validate(answer)

    async def topic_changed(self, change: TopicChange) -> None:
        """Tell every nameserver what changed: that topic alone, or everything where it is out of step."""
        async with self._lock:
            await asyncio.gather(*(self._change(ns, change) for ns in self.settings.nameservers))

    async def _change(self, nameserver: str, change: TopicChange) -> None:
        held = self.registered.get(nameserver)
        if held is not None and held >= change.data_version:
            return  # a full registration since then already carried it
        if held == change.data_version - 1:
            updated = [TopicConfigBody.of(change.config)] if change.config is not None else []
            removed = [] if change.config is not None else [change.name]
            changes = TopicChanges(
                from_version=held, data_version=change.data_version, updated=updated, removed=removed
            )
            try:
                if (await self._send_changes(nameserver, changes)).in_sync:
                    self.registered[nameserver] = change.data_version
                    return
            except PetrelError as exc:
                self.registered.pop(nameserver, None)
                log.warning("sending a topic change to nameserver %s failed: %s", nameserver, exc.detail)
                return
        await self._register(nameserver, *self._snapshot())

    async def heartbeat_all(self) -> None:
        async with self._lock:
            version = self.topics.data_version
            await asyncio.gather(*(self._heartbeat(ns, version) for ns in self.settings.nameservers))

    async def _heartbeat(self, nameserver: str, version: int) -> None:
        if self.registered.get(nameserver) != version:
            await self._register(nameserver, *self._snapshot())  # never fully registered, or out of step
            return
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
            await self._register(nameserver, *self._snapshot())

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
