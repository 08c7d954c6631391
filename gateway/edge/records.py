"""A stored record as the fields of the public `Message` (and the models that extend it)."""

from __future__ import annotations

import base64
from typing import Any

from libs.message import MessageRecord, Prop


def message_fields(record: MessageRecord, broker: str) -> dict[str, Any]:
    """The record as `Message`'s fields: for models that extend it, and for answers built without one."""
    binary = record.binary_body
    return {
        "message_id": record.message_id or "",
        "topic": record.topic,
        "body": None if binary else record.body.decode(errors="replace"),
        "body_base64": base64.b64encode(record.body).decode() if binary else None,
        "tag": record.tag,
        "keys": record.keys,
        "properties": record.user_properties,
        "message_group": record.message_group,
        "born_at": record.born_timestamp,
        "stored_at": record.store_timestamp,
        "broker": broker,
        "queue_id": record.queue_id,
        "queue_offset": record.queue_offset,
        "reconsume_times": record.reconsume_times,
    }


def sent_to(record: MessageRecord) -> str:
    """The topic the copy's message was sent to: a retry's or dead letter's original topic, a scheduled or half
    copy's real topic, else its own (what a key must be permitted on to learn of the copy)."""
    properties = record.properties
    return properties.get(Prop.RETRY_TOPIC) or properties.get(Prop.REAL_TOPIC) or record.topic
