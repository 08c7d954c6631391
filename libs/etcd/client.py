"""An asyncio etcd v3 client over etcd's JSON gateway: keys, transactions, leases, a watch for the next change.

It speaks the grpc-gateway every etcd member serves beside gRPC on its client URL
(`/v3/kv/range`, `/v3/kv/txn`, `/v3/lease/grant` ...; etcd 3.4 and later), through the
house's httpx client (`libs.http.client.internal_http`: no proxy or certificate file from
the environment), rather than a Python gRPC client: python-etcd3 has had no release since 2020, its
asyncio forks (aetcd, aioetcd3) are unmaintained too, and what is alive brings a native binding or grpcio
for a handful of calls, while the gateway is part of etcd itself and needs nothing but httpx.

Members: a call goes to the member that answered last; when it cannot be reached, times out
or says it cannot serve now (no leader, leader changed, request timed out), the call goes to
the next; after a round of all of them it pauses and goes round again while `retry_seconds`
last (etcd electing a leader), then `EtcdUnavailable`. A call whose answer was lost may
have been applied (see libs.etcd.errors). Credentials: traded for a token at the first call
and again when etcd says the token is no longer valid. Keys: every key is under the
settings' prefix on the wire, and without it here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import httpx

from libs import jsonutil
from libs.etcd.errors import (
    INVALID_TOKEN,
    EtcdError,
    EtcdLeaseNotFound,
    EtcdRequestFailed,
    EtcdUnavailable,
    error_for,
)
from libs.etcd.settings import EtcdSettings
from libs.etcd.txn import Delete, Get, Put, Txn, op_results
from libs.etcd.wire import (
    DeleteResult,
    Key,
    KeyValue,
    Lease,
    LeaseStatus,
    PutResult,
    RangeResult,
    TxnResult,
    WatchEvent,
    as_bytes,
    b64,
    delete_result,
    number,
    put_result,
    range_result,
    revision_of,
    unb64,
)
from libs.http.client import internal_http

T = TypeVar("T")

RETRY_PAUSE = 0.1
MAX_RETRY_PAUSE = 1.0
"""Seconds between two rounds of the members: doubling from RETRY_PAUSE up to MAX_RETRY_PAUSE."""

UNREACHABLE = (httpx.TransportError, OSError)
"""A member that could not be reached or answered nothing; OSError: an ssl alert httpx lets through (under TLS 1.3 a
member refuses a client certificate after the handshake, so on the first read)."""

REQUIRE_LEADER = {"grpc-metadata-hasleader": "true"}
"""Asks a member to end a stream when it has no leader (etcd's WithRequireLeader), rather than hold it silently while
it is cut off from the majority."""


class EtcdClient:
    def __init__(self, settings: EtcdSettings, *, transports: Sequence[httpx.AsyncBaseTransport] | None = None) -> None:
        """`transports`: one per endpoint, for tests that stand in for etcd; TCP unless given."""
        if not settings.endpoints:
            raise ValueError("no etcd endpoints: set PETREL_ETCD_ENDPOINTS")
        self.settings = settings
        self.prefix = settings.key_prefix
        timeout = httpx.Timeout(settings.timeout_seconds, connect=settings.connect_timeout_seconds)
        verify = settings.tls_context()
        self.endpoints = list(settings.endpoints)
        self._members = [
            internal_http(url, None, timeout, verify=verify, transport=transports[i] if transports else None)
            for i, url in enumerate(self.endpoints)
        ]
        self._current = 0
        self._token: str | None = None
        self._auth_lock = asyncio.Lock()

    async def close(self) -> None:
        for member in self._members:
            await member.aclose()

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def current_endpoint(self) -> str:
        """The member the next call goes to first: the one that answered last."""
        return self.endpoints[self._current]

    # -- keys

    def _key(self, key: Key) -> str:
        return b64(self.prefix + as_bytes(key))

    async def range(self, key: Key, *, prefix: bool = False, limit: int = 0, serializable: bool = False) -> RangeResult:
        """The key (or every key starting with it); `serializable`: the member's own copy, without asking the leader
        (may be stale, answers while the member is cut off)."""
        body: dict[str, Any] = Get(key, prefix).to_wire(self.prefix)["request_range"]
        if limit:
            body["limit"] = str(limit)
        if serializable:
            body["serializable"] = True
        answer = await self.call("/v3/kv/range", body)
        return range_result(answer, self.prefix, revision_of(answer))

    async def get(self, key: Key) -> KeyValue | None:
        kvs = (await self.range(key)).kvs
        return kvs[0] if kvs else None

    async def get_prefix(self, prefix: Key) -> list[KeyValue]:
        """Every key starting with `prefix`, in key order."""
        return (await self.range(prefix, prefix=True)).kvs

    async def put(self, key: Key, value: Key, *, lease: int = 0, prev_kv: bool = False) -> PutResult:
        """Write the key; with `lease`, it goes when the lease does (EtcdLeaseNotFound when the lease is gone)."""
        answer = await self.call("/v3/kv/put", Put(key, value, lease, prev_kv).to_wire(self.prefix)["request_put"])
        return put_result(answer, self.prefix, revision_of(answer))

    async def delete(self, key: Key, *, prefix: bool = False, prev_kv: bool = False) -> DeleteResult:
        body = Delete(key, prefix, prev_kv).to_wire(self.prefix)["request_delete_range"]
        answer = await self.call("/v3/kv/deleterange", body)
        return delete_result(answer, self.prefix, revision_of(answer))

    def txn(self) -> Txn:
        """A transaction to build: `.when(compares).then(ops).otherwise(ops)`, then `await .commit()`."""
        return Txn(self)

    async def commit(self, txn: Txn) -> TxnResult:
        answer = await self.call("/v3/kv/txn", txn.to_wire(self.prefix))
        revision = revision_of(answer)
        return TxnResult(bool(answer.get("succeeded")), revision, op_results(answer, self.prefix, revision))

    # -- leases

    async def grant(self, ttl: int) -> Lease:
        """A new lease of `ttl` seconds (etcd raises a TTL below its minimum, 1.5 election timeouts, to it)."""
        answer = await self.call("/v3/lease/grant", {"TTL": str(ttl)})
        if answer.get("error"):
            raise EtcdRequestFailed(f"/v3/lease/grant: {answer['error']}")
        return Lease(number(answer, "ID"), number(answer, "TTL"))

    async def keep_alive_once(self, lease: int) -> int:
        """Renew the lease once; answers its TTL from now (seconds). EtcdLeaseNotFound when it has expired."""
        answer = await self.call("/v3/lease/keepalive", {"ID": str(lease)}, extra_headers=REQUIRE_LEADER)
        result = _stream_result("/v3/lease/keepalive", answer)
        ttl = number(result, "TTL")
        if ttl <= 0:
            raise EtcdLeaseNotFound(f"lease {lease:x} has expired or was revoked")
        return ttl

    async def revoke(self, lease: int) -> None:
        """End the lease now, deleting its keys. EtcdLeaseNotFound when it had already gone."""
        await self.call("/v3/lease/revoke", {"ID": str(lease)})

    async def time_to_live(self, lease: int, *, keys: bool = False) -> LeaseStatus:
        """What is left of the lease; EtcdLeaseNotFound when it has expired or was revoked."""
        answer = await self.call("/v3/lease/timetolive", {"ID": str(lease), "keys": keys})
        ttl = number(answer, "TTL")
        if ttl < 0:
            raise EtcdLeaseNotFound(f"lease {lease:x} has expired or was revoked")
        attached = [unb64(key) for key in answer.get("keys", [])]
        return LeaseStatus(
            lease,
            ttl,
            number(answer, "grantedTTL"),
            [key[len(self.prefix) :] for key in attached if key.startswith(self.prefix)],
        )

    # -- watch

    async def watch_once(
        self, key: Key, *, start_revision: int, prefix: bool = False, timeout: float
    ) -> list[WatchEvent]:
        """The first changes to the key (or the keys under it) at or after `start_revision`; [] when there were none
        within `timeout` seconds. EtcdUnavailable when no member would watch or the stream broke; a revision
        already compacted away is EtcdRequestFailed (read again, then watch from the read's revision + 1)."""
        body = Get(key, prefix).to_wire(self.prefix)["request_range"] | {"start_revision": str(start_revision)}
        payload = jsonutil.dumps({"create_request": body})
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                return await self._on_some_member("/v3/watch", lambda member: self._watch(member, payload))
        return []

    async def _watch(self, member: httpx.AsyncClient, payload: bytes) -> list[WatchEvent]:
        headers = await self._auth_headers(member) | REQUIRE_LEADER
        no_read_bound = httpx.Timeout(self.settings.timeout_seconds, read=None)
        async with member.stream("POST", "/v3/watch", content=payload, headers=headers, timeout=no_read_bound) as reply:
            if reply.status_code >= 400:
                raise error_for("/v3/watch", reply.status_code, _decoded(await reply.aread()))
            async for line in reply.aiter_lines():
                if not line.strip():
                    continue
                result = _stream_result("/v3/watch", jsonutil.loads(line))
                if number(result, "compact_revision"):
                    raise EtcdRequestFailed(f"/v3/watch: revision compacted up to {result['compact_revision']}")
                if result.get("canceled"):
                    raise EtcdUnavailable(f"/v3/watch: canceled: {result.get('cancel_reason', 'no reason given')}")
                events = [
                    WatchEvent(event.get("type", "PUT"), KeyValue.from_wire(event.get("kv", {}), self.prefix))
                    for event in result.get("events", [])
                ]
                if events:
                    return events
        raise EtcdUnavailable("/v3/watch: the member ended the stream")

    # -- calls

    async def call(self, path: str, body: dict[str, Any], *, extra_headers: dict[str, str] | None = None) -> Any:
        """POST one request to the first member that serves it; answers etcd's decoded JSON."""
        payload = jsonutil.dumps(body)
        return await self._on_some_member(path, lambda member: self._exchange(member, path, payload, extra_headers))

    async def _on_some_member(self, path: str, attempt: Callable[[httpx.AsyncClient], Awaitable[T]]) -> T:
        """`attempt` on each member in turn from the last that answered; rounds again after a pause while
        `retry_seconds` last (a leader election, a member restarting), then EtcdUnavailable with the last round's
        reasons."""
        deadline = time.monotonic() + self.settings.retry_seconds
        pause = RETRY_PAUSE
        while True:
            tried: list[str] = []
            for step in range(len(self._members)):
                index = (self._current + step) % len(self._members)
                try:
                    answer = await attempt(self._members[index])
                except UNREACHABLE as exc:
                    tried.append(f"{self.endpoints[index]}: {type(exc).__name__} {exc}".rstrip())
                    continue
                except EtcdUnavailable as exc:
                    tried.append(f"{self.endpoints[index]}: {exc}")
                    continue
                self._current = index
                return answer
            if time.monotonic() + pause > deadline:
                raise EtcdUnavailable(f"no etcd member answered {path}: {'; '.join(tried)}", tried=tried)
            await asyncio.sleep(pause)
            pause = min(pause * 2, MAX_RETRY_PAUSE)

    async def _exchange(
        self, member: httpx.AsyncClient, path: str, payload: bytes, extra_headers: dict[str, str] | None
    ) -> Any:
        for attempt in range(2):
            headers = await self._auth_headers(member) | (extra_headers or {})
            reply = await member.post(path, content=payload, headers=headers)
            answer = _decoded(reply.content)
            if reply.status_code < 400:
                return answer
            error = error_for(path, reply.status_code, answer)
            if attempt == 0 and self._token is not None and INVALID_TOKEN in str(error):
                self._token = None  # expired, or the user's password changed: authenticate again, once
                continue
            raise error
        raise AssertionError("unreachable")

    async def _auth_headers(self, member: httpx.AsyncClient) -> dict[str, str]:
        if not self.settings.user:
            return {}
        async with self._auth_lock:
            if self._token is None:
                self._token = await self._authenticate(member)
        return {"authorization": self._token}

    async def _authenticate(self, member: httpx.AsyncClient) -> str:
        password = self.settings.password.get_secret_value() if self.settings.password else ""
        body = jsonutil.dumps({"name": self.settings.user, "password": password})
        reply = await member.post("/v3/auth/authenticate", content=body)
        answer = _decoded(reply.content)
        if reply.status_code >= 400:
            raise error_for("/v3/auth/authenticate", reply.status_code, answer)
        if not isinstance(answer, dict) or not answer.get("token"):
            raise EtcdError("/v3/auth/authenticate answered no token (is auth enabled on the cluster?)")
        return str(answer["token"])


def _decoded(content: bytes) -> Any:
    try:
        return jsonutil.loads(content) if content else {}
    except ValueError:
        return None


def _stream_result(path: str, answer: Any) -> dict[str, Any]:
    """One message of a gateway stream: `{"result": ...}`, or `{"error": {"grpc_code", "message", ...}}`."""
    if not isinstance(answer, dict):
        raise EtcdRequestFailed(f"{path}: not JSON")
    if isinstance(answer.get("error"), dict):
        error = answer["error"]
        raise error_for(
            path, int(error.get("http_code") or 500), {"error": error.get("message"), "code": error.get("grpc_code")}
        )
    result = answer.get("result")
    return result if isinstance(result, dict) else {}
