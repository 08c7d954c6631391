"""KeyDirectory: the gateway's copy of the API keys, refreshed every few seconds, and who a bearer key is.

All keys are read at start; then every `refresh_seconds` only those whose change number
is above the highest one read so far (libs.auth.key_tables: numbers are taken in commit
order, so none committed late is skipped, and no host's clock is asked). A revocation
reaches every gateway within the interval. A key this gateway writes or looks up is
kept at once but moves no cursor: a change another writer committed before it is still
read by the next refresh, and a refresh's older copy of a key never replaces a newer
one. A key id the copy does not hold is looked up in the database at once (a key made a
moment ago by `petrel keys create` or another gateway works on its first call), within a
budget of lookups a second, and a miss is remembered until the next refresh, so forged
keys cannot make every call a database query. If the database cannot be read, the copy
keeps answering (revocations then wait) and the failure is logged.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError

from gateway.auth.audit import RateBudget
from gateway.auth.principal import Principal
from libs.auth.keys import ApiKey, Credential, KeyNotFound, KeyStore
from libs.errors import Unauthorized

log = logging.getLogger(__name__)

BEARER = "bearer "
LOOKUPS_PER_SECOND = 20.0
MAX_MISSES = 10_000


@dataclass(frozen=True, slots=True)
class _Entry:
    key: ApiKey
    principal: Principal


class KeyDirectory:
    def __init__(self, store: KeyStore, refresh_seconds: float, default_rate: float) -> None:
        self.store = store
        self.refresh_seconds = refresh_seconds
        self.default_rate = default_rate
        self._entries: dict[str, _Entry] = {}
        self._read_up_to = 0
        """the highest change number a load or refresh read: the next refresh reads the changes after it"""
        self._misses: set[str] = set()
        self._lookups = RateBudget(LOOKUPS_PER_SECOND)

    async def load(self) -> None:
        self._read(await asyncio.to_thread(self.store.list_keys))

    async def refresh(self) -> None:
        self._misses.clear()
        self._read(await asyncio.to_thread(self.store.changed_after, self._read_up_to))

    def _read(self, keys: list[ApiKey]) -> None:
        """Keys one statement read: every change up to the highest number among them is in it."""
        for key in keys:
            self.put(key)
            self._read_up_to = max(self._read_up_to, key.change_seq or 0)

    async def run(self) -> None:
        """Refresh forever (a task of the gateway's lifespan)."""
        while True:
            await asyncio.sleep(self.refresh_seconds)
            try:
                await self.refresh()
            except SQLAlchemyError as exc:  # a database that cannot be read: keep the copy, say so, try again
                log.warning("API keys not refreshed (revocations wait): %s", exc)

    def put(self, key: ApiKey) -> None:
        """Keep `key`, unless the copy held is of a later change (a refresh that began before a revocation here)."""
        held = self._entries.get(key.key_id)
        if held is not None and (held.key.change_seq or 0) > (key.change_seq or 0):
            return
        rate = self.default_rate if key.rate_per_second is None else key.rate_per_second
        self._entries[key.key_id] = _Entry(key, Principal(key.key_id, key.name, key.policy(), rate))

    def __len__(self) -> int:
        return len(self._entries)

    async def authenticate(self, authorization: str | None) -> Principal:
        """The key's principal; Unauthorized (401) saying what is wrong with the header or the key."""
        if not authorization:
            raise Unauthorized("this call needs an API key: send 'Authorization: Bearer <key>' (petrel keys create)")
        if authorization[: len(BEARER)].lower() != BEARER:
            raise Unauthorized("the Authorization header must read 'Bearer <key>'")
        credential = Credential.parse(authorization[len(BEARER) :].strip())
        if credential is None:
            raise Unauthorized("the bearer token is not a Petrel API key (ptk_<key id>_<secret>)")
        entry = self._entries.get(credential.key_id)
        if entry is None:
            entry = await self._look_up(credential.key_id)
        if entry is None or not entry.key.verifies(credential.secret):
            raise Unauthorized("the API key is not valid", key_id=credential.key_id)
        if entry.key.revoked:
            raise Unauthorized(f"the API key {credential.key_id} was revoked", key_id=credential.key_id)
        return entry.principal

    async def _look_up(self, key_id: str) -> _Entry | None:
        """A key made since the last refresh, straight from the database (misses remembered until the next)."""
        if key_id in self._misses or not self._lookups.take():
            return None
        try:
            self.put(await asyncio.to_thread(self.store.get, key_id))
        except KeyNotFound:
            if len(self._misses) >= MAX_MISSES:
                self._misses.clear()
            self._misses.add(key_id)
            return None
        except SQLAlchemyError as exc:
            log.warning("API key %s not looked up: %s", key_id, exc)
            return None
        return self._entries.get(key_id)
