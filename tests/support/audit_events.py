"""Hand-written `audit` events of 2026-11-22 (tests.support.event_files' day): what audit_daily rolls up.

- A forged-key storm: from 03:00, every 500 ms for 10 minutes (`STORM` calls), a send with
  an unknown key to one of `STORM_TOPICS` topics (t0..t6, round robin), from three
  addresses in turn; at 09:00 and 09:01 two sends with no key at all, from a fourth.
- `ci-publisher` (k1) is refused a send to `payments` twice (403), a topic delete once
  (403), and is rate limited three times (429) from two addresses.
- `ops` (k9) creates k1 at 08:00, deletes two topics (admin calls), revokes k7 at 18:00
  and k8 at 23:59:50: that last event is written to the 23rd's files (`AUDIT_LATE_FOLDER`).
- `petrel keys create` creates k9 at 07:00: an event with no key, operation, path nor remote.
- On the 23rd, one more forged send (not the 22nd's), and two broken lines in the 22nd's
  files (`BROKEN_AUDIT_LINES`: no status; a status that is a string), which are quarantined.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.event_files import DAY, at, line, write_lines

STORM = 1200
STORM_TOPICS = 7
STORM_REMOTES = ("203.0.113.7", "203.0.113.8", "203.0.113.9")
NO_KEY_REMOTE = "198.51.100.4"
CI = {"key_id": "k1", "key_name": "ci-publisher"}
OPS = {"key_id": "k9", "key_name": "ops"}
AUDIT_LATE_FOLDER = ("2026-11-23", "00")
BROKEN_AUDIT_FOLDER = (DAY, "10")
BROKEN_AUDIT_LINES = [
    '{"ts": 1795341600000, "event": "audit", "service": "gateway", "pid": 7, "action": "unauthorized"}',
    '{"ts": 1795341600000, "event": "audit", "service": "gateway", "pid": 7, "action": "forbidden", "status": "403"}',
]
"""An audit with no status (missing_field); one whose status is not a number (wrong_type)."""


def audit(ts: int | str, action: str, status: int, **fields: Any) -> dict[str, Any]:
    """One audit event at `ts` (ms, or HH:MM[:SS] of D)."""
    when = at(f"{DAY} {ts}") if isinstance(ts, str) else ts
    return line("audit", when, action=action, status=status, **fields)


def send(topic: str) -> dict[str, str]:
    return {"operation": "send_message", "method": "POST", "path": f"/v1/topics/{topic}/messages"}


def forged_storm() -> list[dict[str, Any]]:
    start = at(f"{DAY} 03:00")
    return [
        audit(
            start + n * 500,
            "unauthorized",
            401,
            key_id=None,
            **send(f"t{n % STORM_TOPICS}"),
            reason="unknown key",
            remote=STORM_REMOTES[n % len(STORM_REMOTES)],
        )
        for n in range(STORM)
    ]


def audits_22nd() -> list[dict[str, Any]]:
    """Every audit event of the 22nd in the folder of its `ts` (but the last revocation: `late_revocation`)."""
    no_key = {"key_id": None, **send("orders"), "reason": "no bearer key", "remote": NO_KEY_REMOTE}
    denied_send = {**CI, **send("payments"), "resource": "topic:payments", "reason": "publish not allowed"}
    limited = {**CI, **send("orders"), "resource": "topic:orders", "reason": "over 100 requests/s"}
    delete = {"operation": "delete_topic", "method": "DELETE"}
    return [
        *forged_storm(),
        audit("09:00", "unauthorized", 401, **no_key),
        audit("09:01", "unauthorized", 401, **no_key),
        audit("07:00", "key_created", 201, resource="key:k9"),  # petrel keys create: no caller, no request
        audit(
            "08:00",
            "key_created",
            201,
            **OPS,
            operation="create_key",
            method="POST",
            path="/v1/keys",
            resource="key:k1",
            remote="10.0.0.2",
        ),
        audit("10:00", "forbidden", 403, **denied_send, remote="10.0.0.5"),
        audit("10:05", "forbidden", 403, **denied_send, remote="10.0.0.5"),
        audit(
            "10:10",
            "forbidden",
            403,
            **CI,
            **delete,
            path="/v1/topics/orders",
            resource="topic:orders",
            reason="admin required",
            remote="10.0.0.5",
        ),
        audit("11:00:00", "rate_limited", 429, **limited, remote="10.0.0.5"),
        audit("11:00:01", "rate_limited", 429, **limited, remote="10.0.0.6"),
        audit("11:00:02", "rate_limited", 429, **limited, remote="10.0.0.5"),
        audit(
            "12:00",
            "admin_call",
            204,
            **OPS,
            **delete,
            path="/v1/topics/old-a",
            resource="topic:old-a",
            remote="10.0.0.2",
        ),
        audit(
            "12:30",
            "admin_call",
            204,
            **OPS,
            **delete,
            path="/v1/topics/old-b",
            resource="topic:old-b",
            remote="10.0.0.2",
        ),
        audit("18:00", "key_revoked", 204, **OPS, **_revoke("k7"), remote="10.0.0.2"),
        audit(at("2026-11-23 00:00:05"), "unauthorized", 401, key_id=None, **send("t0"), remote=STORM_REMOTES[0]),
    ]


def late_revocation() -> dict[str, Any]:
    """k8's revocation at 23:59:50 on the 22nd, written to the 23rd's files (`AUDIT_LATE_FOLDER`)."""
    return audit("23:59:50", "key_revoked", 204, **OPS, **_revoke("k8"), remote="10.0.0.2")


def _revoke(key_id: str) -> dict[str, str]:
    return {"operation": "revoke_key", "method": "DELETE", "path": f"/v1/keys/{key_id}", "resource": f"key:{key_id}"}


def write_audits_22nd(root: Path) -> None:
    """The audits of the 22nd in the exporter's layout, the late one in the 23rd's folder, the broken lines."""
    write_lines(root, [*audits_22nd()])
    write_lines(root, [late_revocation()], folder=AUDIT_LATE_FOLDER)
    write_lines(root, list(BROKEN_AUDIT_LINES), folder=BROKEN_AUDIT_FOLDER)
