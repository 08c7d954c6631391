"""Runtime: what a txcheck task uses (HTTP clients, Redis, the producer groups, the event writer), per process.

Opened on first use in each process (a prefork worker's children each get
their own: neither sockets, nor SQLAlchemy pools, nor the event writer's thread
survive a fork), closed when the process ends.
"""

from __future__ import annotations

import os
import threading

import httpx
import redis

from libs.events.writer import EventWriter
from libs.producer_groups import ProducerGroupStore, open_metadata_engine
from services.txcheck.broker_api import BrokerApi, open_http
from services.txcheck.checkback import CheckBack
from services.txcheck.settings import TxcheckSettings


class Runtime:
    def __init__(self, settings: TxcheckSettings) -> None:
        token = settings.internal_token.get_secret_value() if settings.internal_token else None
        self.broker_http = open_http(
            settings.broker_timeout_seconds, token, max_connections=2 * settings.scan_parallelism
        )
        # no internal token towards producers: their endpoints are outside the cluster
        self.producer_http = httpx.Client(
            timeout=settings.checkback_timeout_seconds, follow_redirects=False, limits=httpx.Limits(max_connections=16)
        )
        self.api = BrokerApi(self.broker_http, settings.nameservers)
        self.redis = redis.Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=2)
        self.events = EventWriter(settings.data_dir / "export", "txcheck", enabled=settings.events_enabled)
        self.events.start()
        self.engine = open_metadata_engine(settings.metadata_url)
        self.producer_groups = ProducerGroupStore(self.engine)
        self.checkback = CheckBack(
            self.api, self.producer_groups.find, self.producer_http, self.events, settings.checkback_timeout_seconds
        )

    def close(self) -> None:
        self.events.close()
        self.broker_http.close()
        self.producer_http.close()
        self.redis.close()
        self.engine.dispose()


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
