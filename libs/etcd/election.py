"""Leader election on one etcd key held by a lease: who leads, campaigning, handing over, resigning.

A candidate campaigns with its own lease: a transaction puts the election key with its value
on that lease only if the key does not exist (create_revision == 0). Whoever holds the key
leads; its value names the leader (an address, say), so anyone can find it with `leader()`.
The key goes when the leader resigns or its lease ends (revoked, or expired because its
keep-alives stopped), and the next candidate's transaction succeeds: `campaign` waits on a
watch of the key for that. The leader's own writes can be made conditional on still leading
with `leads_compare()` in their transactions.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from libs.etcd.client import EtcdClient
from libs.etcd.errors import EtcdCompareFailed
from libs.etcd.txn import Compare, Delete, Get, Put
from libs.etcd.wire import Key, KeyValue, RangeResult, TxnResult, as_bytes


@dataclass(frozen=True, slots=True)
class Leader:
    value: bytes
    lease: int
    create_revision: int
    """when this leader won (its term's revision: higher for every later leader)"""

    @classmethod
    def of(cls, kv: KeyValue) -> Leader:
        return cls(kv.value, kv.lease, kv.create_revision)


class Election:
    def __init__(self, client: EtcdClient, key: Key, *, lease: int, value: Key) -> None:
        self.client = client
        self.key = as_bytes(key)
        self.lease = lease
        self.value = as_bytes(value)
        self._won_at = 0
        """create_revision of the key while this candidate holds it, else 0"""

    async def leader(self) -> Leader | None:
        """Who leads now, or None while nobody does."""
        kv = await self.client.get(self.key)
        return Leader.of(kv) if kv is not None else None

    async def try_campaign(self) -> bool:
        """Take the lead if nobody has it; True when this candidate leads (already led, too)."""
        result = await (
            self.client.txn()
            .when(Compare.create_revision(self.key, "==", 0))
            .then(Put(self.key, self.value, lease=self.lease))
            .otherwise(Get(self.key))
            .commit()
        )
        if result.succeeded:
            self._won_at = result.revision
            return True
        held = result.responses[0]
        assert isinstance(held, RangeResult)
        # the holder's lease is this candidate's: it won earlier (or a retried call won before its answer was lost)
        if held.kvs and held.kvs[0].lease == self.lease:
            self._won_at = held.kvs[0].create_revision
            return True
        self._won_at = 0
        return False

    async def campaign(self, timeout: float) -> None:
        """Lead, waiting (up to `timeout` seconds, then TimeoutError) for the leader to resign or lose its lease."""
        async with asyncio.timeout(timeout):
            while not await self.try_campaign():
                held = await self.client.range(self.key)
                if held.kvs:  # wait for its deletion; from the read's revision on, so none is missed
                    await self.client.watch_once(self.key, start_revision=held.revision + 1, timeout=timeout)

    async def is_leader(self) -> bool:
        """True while the key is still the one this candidate created."""
        if not self._won_at:
            return False
        held = await self.client.get(self.key)
        return held is not None and held.create_revision == self._won_at

    def leads_compare(self) -> Compare:
        """A compare that holds only while this candidate leads: put it in a leader's transactions."""
        return Compare.create_revision(self.key, "==", self._won_at)

    async def proclaim(self, value: Key) -> None:
        """Change the value the leader is known by; EtcdCompareFailed when this candidate no longer leads."""
        if not self._won_at:
            raise EtcdCompareFailed("not the leader", TxnResult(False, 0, []))
        await (
            self.client.txn().when(self.leads_compare()).then(Put(self.key, value, lease=self.lease)).commit_or_raise()
        )
        self.value = as_bytes(value)

    async def resign(self) -> bool:
        """Give up the lead (the key goes, the next candidate wins); False when this candidate did not lead."""
        if not self._won_at:
            return False
        result = await self.client.txn().when(self.leads_compare()).then(Delete(self.key)).commit()
        self._won_at = 0
        return result.succeeded
