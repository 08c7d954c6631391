"""ProducerGroups: the gateway's async use of the shared producer-group store (libs.producer_groups).

The store is synchronous (SQLAlchemy); its calls run in a worker thread. A half
message only needs its producer group to exist, and groups are never deleted,
so a name once found is remembered: a busy producer costs no query per send.
"""

from __future__ import annotations

import asyncio
import functools

from libs.egress import EgressGuard
from libs.producer_groups import ProducerGroup, ProducerGroupStore, validate_checkback_url


class ProducerGroups:
    def __init__(self, store: ProducerGroupStore, egress: EgressGuard) -> None:
        self.store = store
        self.egress = egress
        self._known: set[str] = set()

    async def put(
        self, name: str, checkback_url: str | None, signing_secret: str | None, *, create_only: bool = False
    ) -> tuple[ProducerGroup, bool]:
        """The group as stored, and whether it was created; InvalidRequest for a bad URL or secret, or a new
        group without a URL; AlreadyExists for `create_only` and a group that exists. Fields not given keep
        their value (libs.producer_groups: read and changed in one transaction).

        A URL whose host is not on the public internet is refused (libs.egress), without what it resolved to;
        txcheck checks it again before each call.
        """
        if checkback_url is not None:
            await asyncio.to_thread(self._check_url, checkback_url)
        group, created = await asyncio.to_thread(
            functools.partial(self.store.put, name, checkback_url, signing_secret, create_only=create_only)
        )
        self._known.add(name)
        return group, created

    def _check_url(self, checkback_url: str) -> None:
        validate_checkback_url(checkback_url)  # a malformed URL is said so before any resolving
        self.egress.check(checkback_url)

    async def rotate_secret(self, name: str, overlap_seconds: int, now_ms: int) -> ProducerGroup:
        """The group with a new generated secret; the previous one signs too for `overlap_seconds` from `now_ms`."""
        return await asyncio.to_thread(self.store.rotate_secret, name, overlap_seconds, now_ms)

    async def get(self, name: str) -> ProducerGroup:
        """The group; ProducerGroupNotFound when there is none."""
        return await asyncio.to_thread(self.store.get, name)

    async def list(self) -> list[ProducerGroup]:
        return await asyncio.to_thread(self.store.list)

    async def require(self, name: str) -> None:
        """Return when the group exists; else ProducerGroupNotFound."""
        if name not in self._known:
            await self.get(name)
            self._known.add(name)
