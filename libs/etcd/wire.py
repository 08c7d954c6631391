"""etcd's v3 JSON as the grpc-gateway speaks it, and the values the client answers with.

The gateway maps etcd's protobuf messages to JSON by their field names: bytes (keys,
values) are base64, 64-bit integers are decimal strings, and a field at its zero value is
left out (`count` of an empty range, `succeeded` of a failed txn, `type` of a PUT event).
Keys on the wire carry the cluster's prefix; the values here carry keys without it.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

Key = str | bytes
"""A key as callers give it: text (UTF-8) or bytes, without the cluster's prefix."""


def as_bytes(data: Key) -> bytes:
    return data.encode() if isinstance(data, str) else data


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def number(raw: dict[str, Any], name: str) -> int:
    """An int64 field (a string on the wire; absent at zero)."""
    return int(raw.get(name) or 0)


def prefix_end(prefix: bytes) -> bytes:
    """The range end covering every key that starts with `prefix` (etcd's GetPrefixRangeEnd): its last byte below
    0xff plus one; b'\\0' (every key) when there is none."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    """without the cluster's prefix"""
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    @classmethod
    def from_wire(cls, raw: dict[str, Any], prefix: bytes) -> KeyValue:
        key = unb64(raw.get("key", ""))
        return cls(
            key=key[len(prefix) :] if key.startswith(prefix) else key,
            value=unb64(raw.get("value", "")),
            create_revision=number(raw, "create_revision"),
            mod_revision=number(raw, "mod_revision"),
            version=number(raw, "version"),
            lease=number(raw, "lease"),
        )


def revision_of(answer: dict[str, Any]) -> int:
    """The store's revision when the call was served (its header's)."""
    return number(answer.get("header") or {}, "revision")


@dataclass(frozen=True, slots=True)
class RangeResult:
    kvs: list[KeyValue]
    count: int
    """how many keys the range holds (more than `kvs` when a limit cut it)"""
    revision: int


@dataclass(frozen=True, slots=True)
class PutResult:
    revision: int
    """the revision the put made: the key's mod_revision now"""
    prev_kv: KeyValue | None = None


@dataclass(frozen=True, slots=True)
class DeleteResult:
    deleted: int
    revision: int
    prev_kvs: list[KeyValue] = field(default_factory=list)


OpResult = RangeResult | PutResult | DeleteResult


def range_result(raw: dict[str, Any], prefix: bytes, revision: int) -> RangeResult:
    return RangeResult([KeyValue.from_wire(kv, prefix) for kv in raw.get("kvs", [])], number(raw, "count"), revision)


def put_result(raw: dict[str, Any], prefix: bytes, revision: int) -> PutResult:
    prev = raw.get("prev_kv")
    return PutResult(revision, KeyValue.from_wire(prev, prefix) if prev else None)


def delete_result(raw: dict[str, Any], prefix: bytes, revision: int) -> DeleteResult:
    return DeleteResult(
        number(raw, "deleted"), revision, [KeyValue.from_wire(kv, prefix) for kv in raw.get("prev_kvs", [])]
    )


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    """the compares held: the success branch ran (else the failure branch)"""
    revision: int
    responses: list[OpResult]
    """one per operation of the branch that ran, in order"""


@dataclass(frozen=True, slots=True)
class Lease:
    id: int
    ttl: int
    """seconds, as granted"""


@dataclass(frozen=True, slots=True)
class LeaseStatus:
    id: int
    ttl: int
    """seconds left"""
    granted_ttl: int
    keys: list[bytes]
    """the keys attached to it (without the cluster's prefix), when asked for"""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    kind: str
    """PUT or DELETE"""
    kv: KeyValue
    """for a DELETE: the key and the revision that deleted it (mod_revision)"""
