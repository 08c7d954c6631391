"""Runtime: what a txcheck task uses (HTTP clients, Redis, the producer groups, the event writer), per process.

Opened on first use in each process (a prefork worker's children each get
their own: neither sockets, nor SQLAlchemy pools, nor the event writer's thread
survive a fork), closed when the process ends.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import redis

from libs.events.writer import EventWriter
from libs.http.client import ClientOptions
from libs.producer_groups import ProducerGroup, ProducerGroupStore, open_metadata_engine
from services.txcheck.brokers import open_brokers
from services.txcheck.checkback import CheckBack
from services.txcheck.settings import TxcheckSettings

PRODUCER_GROUP_TTL_SECONDS = 2.0


class Runtime:
    def __init__(self, settings: TxcheckSettings) -> None:
        token = settings.cluster_token()
        self._opened = contextlib.ExitStack()
        timeout = settings.broker_timeout_seconds
        options = ClientOptions(
            connect_timeout=min(timeout, 1.0),
            timeout=timeout,
            max_connections=2 * settings.scan_parallelism,
            token=token,
        )
        # No internal token towards producers: their endpoints are outside the cluster. No proxy from the
        # environment either: the egress guard checked the address this connects to, a proxy would resolve the
        # name again (and see the check-back's body).
        self.producer_http = httpx.Client(
            timeout=settings.checkback_timeout_seconds,
            follow_redirects=False,
            limits=httpx.Limits(max_connections=16),
            trust_env=False,
        )
        self.api = self._opened.enter_context(open_brokers(settings.nameservers, options))
        self.redis = redis.Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=2)
        self.events = EventWriter(settings.data_dir / "export", "txcheck", enabled=settings.events_enabled)
        self.events.start()
        self.engine = open_metadata_engine(settings.metadata_url)
        self.producer_groups = ProducerGroupStore(self.engine)
        self.checkback = CheckBack(
            self.api,
            RecentProducerGroups(self.producer_groups, PRODUCER_GROUP_TTL_SECONDS),
            self.producer_http,
            self.events,
            settings.checkback_timeout_seconds,
            settings.egress_guard(),
        )

        self.check_pool = ThreadPoolExecutor(settings.check_batch, thread_name_prefix="txcheck-check")

    def close(self) -> None:
        self.check_pool.shutdown(wait=False, cancel_futures=True)
        self.events.close()
        self._opened.close()
        self.producer_http.close()
        self.redis.close()
        self.engine.dispose()


class RecentProducerGroups:
    """The producer groups as read at most `ttl` seconds ago (a changed URL or secret is used within `ttl`)."""

    def __init__(self, store: ProducerGroupStore, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.ttl = ttl
        self.clock = clock
        self._read: dict[str, tuple[float, ProducerGroup | None]] = {}

    def __call__(self, name: str) -> ProducerGroup | None:
        now = self.clock()
        read = self._read.get(name)
        if read is None or now - read[0] >= self.ttl:
            read = (now, self.store.find(name))
            self._read[name] = read
        return read[1]


class RuntimeHolder:
    """One Runtime per process, opened on first use."""

    def __init__(self, settings: TxcheckSettings) -> None:
        self.settings = settings
        self._runtime: Runtime | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def get(self) -> Runtime:
        with self._lock:
            if self._runtime is None or self._pid != os.getpid():
                self._runtime = Runtime(self.settings)  # a forked child drops its parent's without closing it
                self._pid = os.getpid()
            return self._runtime

    def close(self) -> None:
        with self._lock:
            if self._runtime is not None and self._pid == os.getpid():
                self._runtime.close()
            self._runtime = None
