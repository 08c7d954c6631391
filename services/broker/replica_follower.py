"""ReplicaFollower: a slave's copy of its master, kept by one long-lived stream of the master's CommitLog.

The follower asks the master for its log from where the slave's own log ends
(`GET /internal/replication/commitlog?from=N`), writes each chunk at the master's offset
(MessageStore.replicate: same bytes, same offsets, dispatched as recovery does), and
follows the master's heartbeats to know how far behind it is. When the stream breaks (the
master restarts, the network drops, a chunk arrives damaged) it asks again from its end,
after `RETRY_SECONDS`; nothing is written twice. A slave with an empty log whose master's
retention has deleted the log's start begins at the master's oldest segment.

The master's topics are copied too (`GET /internal/topics`, every `TOPIC_SYNC_SECONDS`), so
a pull or query on the slave finds the topics its messages belong to; and its consumers'
offsets, groups and receipt key (services.broker.consumer_mirror), every second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import httpx

from libs.broker_api.replication import (
    COMMITLOG_STREAM_PATH,
    CONSUMERS_PATH,
    HEARTBEAT_SECONDS,
    SLAVE_ACK_PATH,
    ConsumerMetadata,
    FrameReader,
    SlaveAckAnswer,
)
from libs.broker_api.schemas import BrokerTopicList
from libs.errors import PetrelError, UpstreamError
from libs.http.client import internal_http
from libs.http.paths import internal_path
from libs.names import is_system_topic
from libs.store.config import FlushMode
from libs.store.message_store import MessageStore
from libs.tasks import cancelled
from libs.topic import TopicConfig
from services.broker.consumer_mirror import CONSUMERS_SYNC_SECONDS, ConsumerMirror
from services.broker.replication_state import FollowerState
from services.broker.topics import TopicTable

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0
TOPIC_SYNC_SECONDS = 5.0
SILENCE_SECONDS = HEARTBEAT_SECONDS * 5
"""A stream that brings nothing, not even a heartbeat, this long is given up and asked again."""


class ReplicaFollower:
    def __init__(
        self,
        state: FollowerState,
        store: MessageStore,
        topics: TopicTable,
        token: str | None,
        slave_id: int,
        address: str,
        consumers: ConsumerMirror | None = None,
    ) -> None:
        self.state = state
        self.consumers = consumers
        self.slave_id = slave_id
        self.address = address
        self._to_ack = 0
        self._ack_due = asyncio.Event()
        self._topics_due = asyncio.Event()
        self._topics_version: int | None = None
        """The master's topic table version this slave's copy is of (None: none yet)."""
        self._master_version: int | None = None
        self._unknown: dict[str, int] = {}
        """Topics the slave has messages of and no configuration for: the highest queue id seen."""
        store.listeners.append(self._dispatched)
        self.store = store
        self.topics = topics
        self.token = token
        self._begins_at = 0
        """Where an empty slave's log begins: the master's oldest offset, when retention deleted its start."""

    def _client(self) -> httpx.AsyncClient:
        timeout = httpx.Timeout(connect=3.0, read=SILENCE_SECONDS, write=3.0, pool=3.0)
        return internal_http(self.state.master, self.token, timeout)

    async def prepare(self) -> None:
        """Before the slave answers: copy the master's topics once, so that its first reads find them."""
        async with self._client() as client:
            try:
                await self.sync_topics(client)
            except (httpx.HTTPError, PetrelError, ValueError) as exc:
                log.warning("the master's topics were not copied at start (%s); the follower will try again", exc)

    async def run(self) -> None:
        """Follow the master until cancelled: a stream at a time, each on fresh connections (a stream that broke
        takes the client with it, and whatever it pooled of the old master)."""
        while True:
            try:
                async with self._client() as client:
                    await self._follow_with(client)
            except (httpx.HTTPError, PetrelError) as exc:
                log.warning("replication from %s stopped (%s); asking again", self.state.master, exc)
            finally:
                self.state.connected = False
            await self._adopt_unknown()  # the master may be gone: what this slave holds stays readable
            await asyncio.sleep(RETRY_SECONDS)

    async def _follow_with(self, client: httpx.AsyncClient) -> None:
        """One stream, with the topic copier and the acks beside it on the same client."""
        helpers = [
            asyncio.create_task(self._sync_topics_forever(client), name="replica-topics"),
            asyncio.create_task(self._send_acks_forever(client), name="replica-acks"),
            asyncio.create_task(self._sync_consumers_forever(client), name="replica-consumers"),
        ]
        try:
            await self._follow(client)
        finally:
            await cancelled(*helpers)

    async def _follow(self, client: httpx.AsyncClient) -> None:
        log_ = self.store.commitlog
        start = log_.write_offset if log_.segments else max(log_.write_offset, self._begins_at)
        async with client.stream("GET", COMMITLOG_STREAM_PATH, params={"from": start}) as answer:
            if answer.status_code != 200:
                await answer.aread()
                if answer.status_code == 416 and not log_.segments:
                    self._begins_at = int(answer.json()["min_offset"])
                    log.info("the master's log begins at %d: this empty slave begins there", self._begins_at)
                    return
                raise UpstreamError(f"the master answered {answer.status_code}: {answer.text[:300]}")
            self.state.connected = True
            reader = FrameReader()
            async for data in answer.aiter_raw():
                for offset, chunk in reader.feed(data):
                    end = self.store.replicate(offset, chunk) if chunk else offset
                    self.state.master_end = end
                await self._written()

    def _dispatched(self, topic: str, queue_id: int, queue_offset: int, code: int) -> None:
        if self.topics.find(topic) is None and self._unknown.get(topic, -1) < queue_id:
            self._unknown[topic] = queue_id
            self._topics_due.set()

    async def _written(self) -> None:
        """What arrived is written: say so to the master (a SYNC_FLUSH slave once it is on its disk)."""
        end = self.store.commitlog.write_offset
        if self.store.config.flush_mode is FlushMode.SYNC_FLUSH:
            await self.store.flusher.wait_durable(end)
        self._to_ack = end
        self._ack_due.set()

    async def _send_acks_forever(self, client: httpx.AsyncClient) -> None:
        """One ack in flight at a time, for the newest end: acks that pile up while one is sent become one."""
        path = internal_path(SLAVE_ACK_PATH, slave_id=self.slave_id)
        while True:
            await self._ack_due.wait()
            self._ack_due.clear()
            try:
                answer = await client.put(path, json={"offset": self._to_ack, "address": self.address})
                answer.raise_for_status()
                self._master_version = SlaveAckAnswer.model_validate_json(answer.content).topics_version
                if self._master_version != self._topics_version:
                    self._topics_due.set()
            except httpx.HTTPError as exc:
                log.warning("the master did not take this slave's ack (%s); will say it again", exc)
                self._ack_due.set()
                await asyncio.sleep(RETRY_SECONDS)

    async def _sync_topics_forever(self, client: httpx.AsyncClient) -> None:
        """Copy the master's topics every TOPIC_SYNC_SECONDS, and at once when its acks say they changed or a
        message of an unknown topic arrives; a topic the master cannot be asked about is adopted."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TOPIC_SYNC_SECONDS):  # not wait_for: on 3.11 it can swallow a cancel
                    await self._topics_due.wait()
            self._topics_due.clear()
            version = self._master_version
            try:
                await self.sync_topics(client)
                self._topics_version = version
            except (httpx.HTTPError, PetrelError, ValueError) as exc:
                log.warning("the master's topics were not copied (%s); will try again", exc)
            await self._adopt_unknown()

    async def _sync_consumers_forever(self, client: httpx.AsyncClient) -> None:
        """Copy the master's consumer offsets, groups and receipt key every CONSUMERS_SYNC_SECONDS."""
        if self.consumers is None:
            return
        while True:
            try:
                answer = await client.get(CONSUMERS_PATH)
                answer.raise_for_status()
                await self.consumers.apply(ConsumerMetadata.model_validate_json(answer.content))
            except (httpx.HTTPError, PetrelError, ValueError, OSError) as exc:
                log.warning("the master's consumer offsets were not copied (%s); will try again", exc)
            await asyncio.sleep(CONSUMERS_SYNC_SECONDS)

    async def _adopt_unknown(self) -> None:
        """Give each topic this slave has messages of, and no configuration for, one of its own (readable)."""
        unknown, self._unknown = self._unknown, {}
        for topic, highest in unknown.items():
            if self.topics.find(topic) is None:
                queues = highest + 1
                log.warning("topic %s is not known here (master unreachable?): adopted with %d queues", topic, queues)
                await self.topics.put(TopicConfig(topic, queues, queues))

    async def sync_topics(self, client: httpx.AsyncClient) -> None:
        """Make this slave's topics the master's: new and changed ones put, deleted ones deleted."""
        answer = await client.get("/internal/topics")
        answer.raise_for_status()
        theirs = {t.topic: t.to_config() for t in BrokerTopicList.model_validate_json(answer.content).topics}
        for name, config in theirs.items():
            if self.topics.find(name) != config:
                await self.topics.put(config)
        for config in self.topics.all():
            if config.name not in theirs and not is_system_topic(config.name):
                await self.topics.delete(config.name)
                await self.store.delete_topic(config.name)
