"""Hand-written `push_attempt` events of 2026-11-22 (tests.support.event_files' day): what push_hourly rolls up.

Two groups push `orders` (and `audit` `payments` too) to three endpoints. `billing`'s
endpoint throttles p2 twice (a 503, then no answer in time) before acking it, defers p3,
loses p4's lease before the call (no answer) and is told 429 for p5; `audit`'s fails p1
with a 500, again from its retry queue with a 400, then answers 410 (gone). p6's ack, at
23:59:50, is written to the 23rd's files (`PUSH_LATE_FOLDER`); p7 is pushed on the 23rd.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.event_files import DAY, at, line, write_lines

BILLING = "https://billing.example/hooks"
AUDIT = "http://audit.internal:8081/in"
AUDIT_PAYMENTS = "http://audit.internal:8081/pay"
PUSH_LATE_FOLDER = ("2026-11-23", "00")


def attempt(
    clock: str, message_id: str, group: str, endpoint: str, status: int | None, outcome: str, **more: Any
) -> dict[str, Any]:
    """One push_attempt at `clock` (HH:MM[:SS]) of `day` (D); `topic`, `latency_ms`, `delivery_attempt`, `error`."""
    fields = {"day": DAY, "topic": "orders", "latency_ms": 10, "delivery_attempt": 1} | more
    return line(
        "push_attempt",
        at(f"{fields.pop('day')} {clock}"),
        service="push",
        message_id=message_id,
        group=group,
        endpoint=endpoint,
        status=status,
        outcome=outcome,
        **fields,
    )


def pushes_22nd() -> list[dict[str, Any]]:
    """The sends of p1-p9 at 09:00, and every attempt in the folder of its `ts` (but p6's: `late_push`)."""
    sends = [
        line("sent", at(f"{DAY} 09:00"), message_id=f"p{n}", topic="payments" if n == 9 else "orders", size=10)
        for n in range(1, 10)
    ]
    return [
        *sends,
        attempt("10:01", "p1", "billing", BILLING, 200, "acked", latency_ms=40),
        attempt("10:02", "p2", "billing", BILLING, 503, "throttled", latency_ms=30),
        attempt("10:03", "p2", "billing", BILLING, None, "throttled", latency_ms=5000, error="timeout"),
        attempt("10:04", "p2", "billing", BILLING, 200, "acked", latency_ms=60),
        attempt("10:05", "p3", "billing", BILLING, 202, "deferred", latency_ms=20),
        attempt("10:01", "p1", "audit", AUDIT, 500, "failed", latency_ms=15, error="HTTP 500"),
        attempt("10:10", "p1", "audit", AUDIT, 400, "failed", latency_ms=10, topic="%RETRY%audit", delivery_attempt=2),
        attempt("10:20", "p1", "audit", AUDIT, 410, "gone", latency_ms=12, topic="%RETRY%audit", delivery_attempt=3),
        attempt("10:30", "p9", "audit", AUDIT_PAYMENTS, 200, "acked", latency_ms=7, topic="payments"),
        attempt("11:00", "p4", "billing", BILLING, None, "lost", latency_ms=0, delivery_attempt=2),
        attempt("11:30", "p5", "billing", BILLING, 429, "throttled", latency_ms=8),
        attempt("00:00:05", "p7", "billing", BILLING, 200, "acked", day="2026-11-23"),
    ]


def late_push() -> dict[str, Any]:
    """p6's ack at 23:59:50 on the 22nd, written to the 23rd's files (`PUSH_LATE_FOLDER`)."""
    return attempt("23:59:50", "p6", "billing", BILLING, 204, "acked", latency_ms=100)


def write_pushes_22nd(root: Path) -> None:
    """The pushes of the 22nd in the exporter's layout, the late one in the 23rd's folder."""
    write_lines(root, [*pushes_22nd()])
    write_lines(root, [late_push()], folder=PUSH_LATE_FOLDER)
