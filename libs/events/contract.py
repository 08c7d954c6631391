"""The lifecycle events every service writes: the nightly ETL's input contract.

Files: `<data>/export/events/dt=YYYY-MM-DD/hour=HH/<service>-<pid>.jsonl`, UTC, one
JSON object per line, rotated at each UTC hour. Every line carries the common
fields, then the event's own. A field not listed is never written; a required
field is always written (null where the value is unknown, e.g. `queue_id` of a
message not yet stored). Change this table only by adding: the ETL reads old
files too.

Common fields (every event):
    ts        int   milliseconds since the epoch, when the event happened
    event     str   one of the names below
    service   str   nameserver, broker, gateway, timer, txcheck, push
    pid       int   the writing process

Batch lines (added after the first files were written; both forms are read): the events
of one call (a batch of sends, a receive, an ack of many handles) may be one line, with
the fields they share on the line and a `batch` list holding each message's own fields:

    {"ts": 1, "event": "acked", "service": "broker", "pid": 9, "broker": "b", "group": "g",
     "batch": [{"message_id": "m1", "topic": "t", ...}, {"message_id": "m2", "topic": "t", ...}]}

is the two events `{"ts": 1, "event": "acked", ..., "group": "g", "message_id": "m1", ...}`
and `{... "message_id": "m2" ...}`, in that order; an item's field is that message's, else
the line's (the writer puts a field in one place only). Each event so made is checked
against the table as a plain line is. `events_of` gives a line's events; a batch of one is
written as a plain line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

COMMON_FIELDS: tuple[str, ...] = ("ts", "event", "service", "pid")
BATCH = "batch"
"""The field of a batch line that lists its messages' own fields."""


@dataclass(frozen=True, slots=True)
class EventSpec:
    name: str
    description: str
    required: frozenset[str]
    optional: frozenset[str] = frozenset()
    fields: frozenset[str] = field(init=False)
    """required | optional, computed once: every emit checks against it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", self.required | self.optional)


def _spec(name: str, description: str, required: str, optional: str = "") -> EventSpec:
    return EventSpec(name, description, frozenset(required.split()), frozenset(optional.split()))


_MESSAGE = "message_id topic"
_STORED = "message_id topic queue_id queue_offset broker"

EVENTS: dict[str, EventSpec] = {
    spec.name: spec
    for spec in (
        _spec("sent", "the gateway accepted a send", _MESSAGE, "tag keys size idempotency_key delay_ms"),
        _spec(
            "stored", "a broker appended the message to its CommitLog", _STORED, "size physical_offset flush durable"
        ),
        _spec("delivered", "a consumer received the message", _STORED + " group delivery_attempt", "client_id"),
        _spec("acked", "a consumer acknowledged the message", _STORED + " group delivery_attempt"),
        _spec("nacked", "a consumer gave the message back", _STORED + " group delivery_attempt", "delay_ms reason"),
        _spec("retried", "the message went to its group's retry queue", _MESSAGE + " group delivery_attempt delay_ms"),
        _spec("dead_lettered", "the message went to its group's DLQ", _MESSAGE + " group delivery_attempt reason"),
        _spec("redriven", "an operator sent a dead letter back", _MESSAGE + " group"),
        _spec("delay_scheduled", "a delayed message was stored", _MESSAGE + " deliver_at", "delay_level"),
        _spec("delay_rolled", "a far timer was re-enqueued nearer its time", _MESSAGE + " deliver_at roll_times"),
        _spec("delay_fired", "a delayed message was put to its real topic", _MESSAGE + " deliver_at lateness_ms"),
        _spec(
            "delay_failed",
            "a scheduled message was dropped: its delivery was refused max attempts times",
            _MESSAGE + " deliver_at attempts reason",
            "broker physical_offset",
        ),
        _spec(
            "delay_lost",
            "a pending scheduled message is gone: disk pressure deleted its segment before it could be rolled, "
            "or after a failover the new master's log does not hold it",
            _MESSAGE + " deliver_at physical_offset reason",
        ),
        _spec("delay_cancelled", "a scheduled message was cancelled", _MESSAGE + " deliver_at"),
        _spec("transaction_half", "a half message was stored", _MESSAGE + " transaction_id producer_group"),
        _spec("transaction_commit", "a transaction was committed", _MESSAGE + " transaction_id", "by"),
        _spec("transaction_rollback", "a transaction was rolled back", _MESSAGE + " transaction_id", "by"),
        _spec(
            "transaction_check",
            "a check-back asked the producer",
            _MESSAGE + " transaction_id check_count answer latency_ms",
        ),
        _spec("transaction_abandoned", "a half message passed the check limit", _MESSAGE + " transaction_id"),
        _spec(
            "push_attempt",
            "a webhook push was tried (status null: no answer; outcome acked, deferred, failed, throttled, gone, lost)",
            _MESSAGE + " group endpoint status latency_ms outcome delivery_attempt",
            "error",
        ),
        _spec(
            "replica_in_sync",
            "a slave caught up with its master and joined the in-sync set (SYNC_MASTER puts wait for it)",
            "broker slave_id slave acked_offset master_offset",
        ),
        _spec(
            "replica_out_of_sync",
            "a slave did not confirm a put in time and left the in-sync set (puts no longer wait for it)",
            "broker slave_id slave acked_offset master_offset",
        ),
        _spec(
            "master_elected",
            "the controller made a broker its broker name's master, at a new epoch (a first master or a failover)",
            "broker broker_id address epoch log_end",
            "previous_master_id",
        ),
        _spec(
            "replica_truncated",
            "a broker returning as a slave dropped the end of its log that its new master never had (an old "
            "master's unreplicated writes)",
            "broker master from_offset to_offset",
        ),
        _spec(
            "audit",
            "a security-relevant call: action key_created, key_revoked, admin_call, unauthorized (401), forbidden "
            "(403) or rate_limited (429); key_id null when no valid key was given",
            "action status",
            "key_id key_name operation method path resource reason remote",
        ),
    )
}


def events_of(line: dict[str, Any]) -> list[dict[str, Any]]:
    """The events a line holds: itself (a plain line), or one a `batch` item (see the module docstring)."""
    items = line.get(BATCH)
    if not isinstance(items, list):
        return [line]
    shared = {name: value for name, value in line.items() if name != BATCH}
    return [{**shared, **item} for item in items]
