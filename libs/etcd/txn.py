"""etcd transactions: compares, the operations of each branch, and what a transaction answers.

    result = await client.txn().when(Compare.mod_revision("config", "==", seen)).then(
        Put("config", new)).otherwise(Get("config")).commit()

`commit` answers a `TxnResult` whether the compares held or not; `commit_or_raise` raises
`EtcdCompareFailed` (carrying the result, so the failure branch's reads) when they did not.
A compare on a key that does not exist sees create_revision, mod_revision and version 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from libs.etcd.errors import EtcdCompareFailed
from libs.etcd.wire import (
    Key,
    OpResult,
    TxnResult,
    as_bytes,
    b64,
    delete_result,
    prefix_end,
    put_result,
    range_result,
)

Operator = Literal["==", "!=", "<", ">"]
_RESULTS = {"==": "EQUAL", "!=": "NOT_EQUAL", "<": "LESS", ">": "GREATER"}
_TARGET_FIELDS = {"VERSION": "version", "CREATE": "create_revision", "MOD": "mod_revision", "VALUE": "value",
                  "LEASE": "lease"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Compare:
    key: Key
    target: Literal["VERSION", "CREATE", "MOD", "VALUE", "LEASE"]
    operator: Operator
    operand: int | bytes

    @classmethod
    def create_revision(cls, key: Key, operator: Operator, revision: int) -> Compare:
        """`create_revision(key, "==", 0)`: the key does not exist."""
        return cls(key, "CREATE", operator, revision)

    @classmethod
    def mod_revision(cls, key: Key, operator: Operator, revision: int) -> Compare:
        """`mod_revision(key, "==", seen)`: nobody wrote the key since it was read at `seen`."""
        return cls(key, "MOD", operator, revision)

    @classmethod
    def version(cls, key: Key, operator: Operator, version: int) -> Compare:
        return cls(key, "VERSION", operator, version)

    @classmethod
    def value(cls, key: Key, operator: Operator, value: Key) -> Compare:
        return cls(key, "VALUE", operator, as_bytes(value))

    @classmethod
    def lease(cls, key: Key, operator: Operator, lease: int) -> Compare:
        return cls(key, "LEASE", operator, lease)

    def to_wire(self, prefix: bytes) -> dict[str, Any]:
        operand = self.operand
        wire_operand = b64(operand) if isinstance(operand, bytes) else str(operand)
        return {
            "key": b64(prefix + as_bytes(self.key)),
            "target": self.target,
            "result": _RESULTS[self.operator],
            _TARGET_FIELDS[self.target]: wire_operand,
        }


def _key_range(prefix: bytes, key: Key, whole_prefix: bool) -> dict[str, str]:
    full = prefix + as_bytes(key)
    return {"key": b64(full), "range_end": b64(prefix_end(full))} if whole_prefix else {"key": b64(full)}


@dataclass(frozen=True, slots=True)
class Get:
    key: Key
    prefix: bool = False
    """every key starting with `key`"""

    def to_wire(self, prefix: bytes) -> dict[str, Any]:
        return {"request_range": _key_range(prefix, self.key, self.prefix)}


@dataclass(frozen=True, slots=True)
class Put:
    key: Key
    value: Key
    lease: int = 0
    """the key goes when this lease does (0: no lease)"""
    prev_kv: bool = False

    def to_wire(self, prefix: bytes) -> dict[str, Any]:
        body: dict[str, Any] = {"key": b64(prefix + as_bytes(self.key)), "value": b64(as_bytes(self.value))}
        if self.lease:
            body["lease"] = str(self.lease)
        if self.prev_kv:
            body["prev_kv"] = True
        return {"request_put": body}


@dataclass(frozen=True, slots=True)
class Delete:
    key: Key
    prefix: bool = False
    prev_kv: bool = False

    def to_wire(self, prefix: bytes) -> dict[str, Any]:
        body: dict[str, Any] = _key_range(prefix, self.key, self.prefix)
        if self.prev_kv:
            body["prev_kv"] = True
        return {"request_delete_range": body}


Op = Get | Put | Delete


def op_results(answer: dict[str, Any], prefix: bytes, revision: int) -> list[OpResult]:
    results: list[OpResult] = []
    for response in answer.get("responses", []):
        if "response_range" in response:
            results.append(range_result(response["response_range"], prefix, revision))
        elif "response_put" in response:
            results.append(put_result(response["response_put"], prefix, revision))
        elif "response_delete_range" in response:
            results.append(delete_result(response["response_delete_range"], prefix, revision))
    return results


class Committer(Protocol):
    """What commits a transaction: the client (libs.etcd.client), which builds Txns on itself."""

    async def commit(self, txn: Txn) -> TxnResult: ...


@dataclass
class Txn:
    """A transaction being built on `client`: compares (all must hold), then the operations of each branch."""

    client: Committer
    compares: list[Compare] = field(default_factory=list)
    success: list[Op] = field(default_factory=list)
    failure: list[Op] = field(default_factory=list)

    def when(self, *compares: Compare) -> Txn:
        self.compares.extend(compares)
        return self

    def then(self, *ops: Op) -> Txn:
        self.success.extend(ops)
        return self

    def otherwise(self, *ops: Op) -> Txn:
        self.failure.extend(ops)
        return self

    def to_wire(self, prefix: bytes) -> dict[str, Any]:
        return {
            "compare": [compare.to_wire(prefix) for compare in self.compares],
            "success": [op.to_wire(prefix) for op in self.success],
            "failure": [op.to_wire(prefix) for op in self.failure],
        }

    async def commit(self) -> TxnResult:
        return await self.client.commit(self)

    async def commit_or_raise(self) -> TxnResult:
        """`commit`, raising EtcdCompareFailed when the compares did not hold."""
        result = await self.commit()
        if not result.succeeded:
            keys = ", ".join(sorted({as_bytes(compare.key).decode(errors="replace") for compare in self.compares}))
            raise EtcdCompareFailed(f"the transaction's compares on {keys} did not hold", result)
        return result
