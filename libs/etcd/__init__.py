"""etcd for Petrel: the client, its settings and errors, transactions and leader election.

The contract (what the controller and the masters build on):

- `EtcdSettings` (`PETREL_ETCD_*`): the members, the cluster's key prefix, TLS and credentials.
- `EtcdClient(settings)`: `get`, `get_prefix`, `range`, `put` (optionally on a lease), `delete`,
  `txn()` (a `Txn`: `.when(Compare...)`, `.then(ops)`, `.otherwise(ops)`, `.commit()`),
  leases (`grant`, `keep_alive_once`, `revoke`, `time_to_live`) and `watch_once`. Keys are
  given and answered without the prefix. Calls move to the next member when one fails, and go round
  the members again while `retry_seconds` last.
- `Election(client, key, lease=..., value=...)`: `try_campaign`, `campaign`, `leader`,
  `is_leader`, `leads_compare`, `proclaim`, `resign`.
- `LeaseKeeper` (libs.etcd.lease_keeper): keeps a lease alive and says, on the holder's monotonic clock,
  until when etcd cannot have expired it (counted from each keep-alive's send, less a margin).
- Every failure is an `EtcdError` (libs.etcd.errors).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from libs.etcd.client import EtcdClient
    from libs.etcd.election import Election, Leader
    from libs.etcd.errors import (
        EtcdAuthFailed,
        EtcdCompareFailed,
        EtcdError,
        EtcdLeaseNotFound,
        EtcdRequestFailed,
        EtcdUnavailable,
    )
    from libs.etcd.lease_keeper import LeaseKeeper
    from libs.etcd.settings import EtcdSettings
    from libs.etcd.txn import Compare, Delete, Get, Put, Txn
    from libs.etcd.wire import DeleteResult, KeyValue, Lease, LeaseStatus, PutResult, RangeResult, TxnResult, WatchEvent

_HOMES = {
    "EtcdClient": "client",
    "Election": "election",
    "Leader": "election",
    "EtcdAuthFailed": "errors",
    "EtcdCompareFailed": "errors",
    "EtcdError": "errors",
    "EtcdLeaseNotFound": "errors",
    "EtcdRequestFailed": "errors",
    "EtcdUnavailable": "errors",
    "LeaseKeeper": "lease_keeper",
    "EtcdSettings": "settings",
    **dict.fromkeys(("Compare", "Delete", "Get", "Put", "Txn"), "txn"),
    **dict.fromkeys(
        ("DeleteResult", "KeyValue", "Lease", "LeaseStatus", "PutResult", "RangeResult", "TxnResult", "WatchEvent"),
        "wire",
    ),
}
"""Each name's module: imported on first use, so that a process that needs only the settings (the `petrel up`
supervisor, which stays up as long as the cluster) does not load the client and the web stack under it."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


__all__ = [
    "Compare",
    "Delete",
    "DeleteResult",
    "Election",
    "EtcdAuthFailed",
    "EtcdClient",
    "EtcdCompareFailed",
    "EtcdError",
    "EtcdLeaseNotFound",
    "EtcdRequestFailed",
    "EtcdSettings",
    "EtcdUnavailable",
    "Get",
    "KeyValue",
    "Leader",
    "Lease",
    "LeaseKeeper",
    "LeaseStatus",
    "Put",
    "PutResult",
    "RangeResult",
    "Txn",
    "TxnResult",
    "WatchEvent",
]
