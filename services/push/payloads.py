"""How one leased message becomes one signed HTTP POST, in each `PayloadFormat`.

Every POST carries, whatever the format:

    webhook-id, webhook-timestamp, webhook-signature   Standard Webhooks; the id is the message id
                                                       (stable across retries: receivers dedupe by it),
                                                       one signature per secret during a rotation
    petrel-message-id, petrel-topic, petrel-group      which message, from which subscription
    petrel-delivery-attempt                            the group's count, 1 on the first delivery
    petrel-receipt-handle                              to ack or nack later (202 + Petrel-Ack: deferred)
    user-agent: petrel-push/1

The signature covers the exact body bytes sent. Per format:

    standard-webhooks       application/json {"type": "petrel.message", "timestamp": <RFC 3339, now>,
                            "data": {the fields of a received message, plus group}}: `body` (text) or
                            `body_base64` (the producer sent bytes), the other null
    cloudevents-binary      the body as sent; CloudEvents 1.0 attributes in ce-* headers
    cloudevents-structured  application/cloudevents+json: the attributes, and `data` (text, or the JSON
                            value when the content type is JSON) or `data_base64` (bytes)
    raw                     the body as sent; the message's fields in petrel-* headers

CloudEvents attributes: `id` the message id; `source` "petrel:/topics/<topic>" (no broker in it, so a
redelivery through another broker keeps the same source and id, which CloudEvents consumers treat
as a duplicate); `type` "petrel.message"; `time` when the message was born; `subject` its tag;
`datacontenttype` (below); extensions petrelgroup, petrelbroker, petrelqueueid, petrelqueueoffset,
petrelstoredat, and petrelkeys / petrelmessagegroup when the message has them.

Content type (raw and both CloudEvents modes): a user property named `content-type` (any case)
if the producer set one, else application/octet-stream for a body sent as bytes, text/plain;
charset=utf-8 for text.

Header text (tag, keys, message group, property values, ce-* values) is percent-encoded as the
CloudEvents HTTP binding asks: space, '"', '%' and anything outside printable ASCII (as UTF-8).
Keys are joined with ',': petrel-keys encodes each key so (',' too); the petrelkeys attribute
encodes only ',' and '%' in a key (in binary mode its header value is then encoded as any other).

User properties travel in raw and both CloudEvents modes as `petrel-property-<name>` headers (a
CloudEvents attribute cannot hold a map) when the name is lower-case letters, digits, '.', '_' and
'-' (HTTP header names lose case); the others are left out and counted in
`petrel-properties-skipped`. Only standard-webhooks carries every property, in `data.properties`.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import quote

import orjson

from libs import jsonutil, webhooks
from libs.broker_api.frames import Lease
from libs.message import MessageRecord, Prop
from libs.push_api.schemas import PayloadFormat

USER_AGENT: Final = "petrel-push/1"
EVENT_TYPE: Final = "petrel.message"
CONTENT_TYPE_PROPERTY: Final = "content-type"
TEXT: Final = "text/plain; charset=utf-8"
OCTETS: Final = "application/octet-stream"
CLOUDEVENTS_JSON: Final = "application/cloudevents+json"
PROPERTY_HEADER: Final = "petrel-property-"

_HEADER_NAME = re.compile(r"[a-z0-9._-]+")
# Printable ASCII but for space, '"' and '%': what a header value may hold unencoded (CloudEvents 3.1.3.2).
_HEADER_SAFE: Final = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '"%')


@dataclass(frozen=True, slots=True)
class PushedMessage:
    """One leased message as the push service delivers it: the fields a consumer's receive answers."""

    message_id: str
    topic: str
    """the topic it was sent to (also for a retry)"""
    group: str
    body: bytes
    binary: bool
    """the producer sent bytes (body_base64), not text"""
    tag: str | None
    keys: list[str]
    properties: dict[str, str]
    """user properties only"""
    message_group: str | None
    born_at: int
    stored_at: int
    broker: str
    queue_id: int
    queue_offset: int
    delivery_attempt: int
    receipt_handle: str
    invisible_until: int
    """ms since the epoch: the lease ends then"""


@dataclass(frozen=True, slots=True)
class Outgoing:
    """What to POST: header names in lower case, and the body the signature covers."""

    headers: dict[str, str]
    body: bytes


def pushed_message(record: MessageRecord, broker: str, group: str, lease: Lease) -> PushedMessage:
    """The message of a broker's receive answer, with its lease."""
    return PushedMessage(
        message_id=record.message_id or "",
        topic=record.properties.get(Prop.RETRY_TOPIC, record.topic),
        group=group,
        body=record.body,
        binary=record.binary_body,
        tag=record.tag,
        keys=record.keys,
        properties=record.user_properties,
        message_group=record.message_group,
        born_at=record.born_timestamp,
        stored_at=record.store_timestamp,
        broker=broker,
        queue_id=record.queue_id,
        queue_offset=record.queue_offset,
        delivery_attempt=lease.delivery_attempt,
        receipt_handle=lease.receipt_handle,
        invisible_until=lease.invisible_until,
    )


def render(message: PushedMessage, payload_format: PayloadFormat, secrets: list[str], now: float) -> Outgoing:
    """The POST of `message` in `payload_format`, signed with each of `secrets` at `now` (unix seconds)."""
    body, format_headers = _FORMATS[payload_format](message, now)
    headers = webhooks.sign(secrets, body, webhook_id=message.message_id, now=now)
    headers |= {
        "petrel-message-id": message.message_id,
        "petrel-topic": message.topic,
        "petrel-group": message.group,
        "petrel-delivery-attempt": str(message.delivery_attempt),
        "petrel-receipt-handle": message.receipt_handle,
        "user-agent": USER_AGENT,
    }
    return Outgoing(headers | format_headers, body)


def rfc3339(ms: int) -> str:
    """An instant in ms since the epoch as RFC 3339 in UTC: 2026-11-21T08:00:00.123Z."""
    moment = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    return moment.replace("+00:00", "Z")


def header_text(value: str, also: str = "") -> str:
    """`value` percent-encoded as a CloudEvents header value is; the characters in `also` too."""
    return quote(value, safe="".join(c for c in _HEADER_SAFE if c not in also))


def content_type(message: PushedMessage) -> str:
    for name, value in message.properties.items():
        if name.lower() == CONTENT_TYPE_PROPERTY and value.isascii() and value.isprintable():
            return value
    return OCTETS if message.binary else TEXT


def _standard_webhooks(message: PushedMessage, now: float) -> tuple[bytes, dict[str, str]]:
    data = {
        "message_id": message.message_id,
        "topic": message.topic,
        "group": message.group,
        "body": None if message.binary else message.body.decode(errors="replace"),
        "body_base64": base64.b64encode(message.body).decode() if message.binary else None,
        "tag": message.tag,
        "keys": message.keys,
        "properties": message.properties,
        "message_group": message.message_group,
        "born_at": message.born_at,
        "stored_at": message.stored_at,
        "broker": message.broker,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "delivery_attempt": message.delivery_attempt,
        "receipt_handle": message.receipt_handle,
        "invisible_until": message.invisible_until,
    }
    envelope = {"type": EVENT_TYPE, "timestamp": rfc3339(int(now * 1000)), "data": data}
    return jsonutil.dumps(envelope), {"content-type": "application/json"}


def _attributes(message: PushedMessage) -> dict[str, str | int]:
    """The CloudEvents context attributes and Petrel's extensions (lower-case alphanumeric names)."""
    attributes: dict[str, str | int] = {
        "specversion": "1.0",
        "id": message.message_id,
        "source": f"petrel:/topics/{message.topic}",
        "type": EVENT_TYPE,
        "time": rfc3339(message.born_at),
    }
    if message.tag:
        attributes["subject"] = message.tag
    attributes |= {
        "datacontenttype": content_type(message),
        "petrelgroup": message.group,
        "petrelbroker": message.broker,
        "petrelqueueid": message.queue_id,
        "petrelqueueoffset": message.queue_offset,
        "petrelstoredat": rfc3339(message.stored_at),
    }
    if message.keys:
        attributes["petrelkeys"] = ",".join(key.replace("%", "%25").replace(",", "%2C") for key in message.keys)
    if message.message_group:
        attributes["petrelmessagegroup"] = message.message_group
    return attributes


def _cloudevents_binary(message: PushedMessage, now: float) -> tuple[bytes, dict[str, str]]:
    attributes = _attributes(message)
    headers = {"content-type": str(attributes.pop("datacontenttype"))}
    headers |= {f"ce-{name}": header_text(str(value)) for name, value in attributes.items()}
    return message.body, headers | _property_headers(message)


def _cloudevents_structured(message: PushedMessage, now: float) -> tuple[bytes, dict[str, str]]:
    event: dict[str, Any] = dict(_attributes(message))
    if message.binary:
        event["data_base64"] = base64.b64encode(message.body).decode()
    else:
        event["data"] = _text_data(message.body.decode(errors="replace"), str(event["datacontenttype"]))
    return jsonutil.dumps(event), {"content-type": CLOUDEVENTS_JSON} | _property_headers(message)


def _text_data(text: str, media_type: str) -> Any:
    """The JSON value itself when the content type says JSON (as the CloudEvents JSON format asks), else the text."""
    essence = media_type.split(";", 1)[0].strip().lower()
    if essence == "application/json" or essence.endswith("+json"):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return text


def _raw(message: PushedMessage, now: float) -> tuple[bytes, dict[str, str]]:
    headers = {"content-type": content_type(message)}
    if message.tag:
        headers["petrel-tag"] = header_text(message.tag)
    if message.keys:
        headers["petrel-keys"] = ",".join(header_text(key, also=",") for key in message.keys)
    if message.message_group:
        headers["petrel-message-group"] = header_text(message.message_group)
    headers |= {
        "petrel-born-at": str(message.born_at),
        "petrel-stored-at": str(message.stored_at),
        "petrel-broker": message.broker,
        "petrel-queue-id": str(message.queue_id),
        "petrel-queue-offset": str(message.queue_offset),
        "petrel-invisible-until": str(message.invisible_until),
    }
    return message.body, headers | _property_headers(message)


def _property_headers(message: PushedMessage) -> dict[str, str]:
    headers = {
        PROPERTY_HEADER + name: header_text(value)
        for name, value in message.properties.items()
        if _HEADER_NAME.fullmatch(name)
    }
    if skipped := len(message.properties) - len(headers):
        headers["petrel-properties-skipped"] = str(skipped)
    return headers


_FORMATS: Final[dict[PayloadFormat, Callable[[PushedMessage, float], tuple[bytes, dict[str, str]]]]] = {
    PayloadFormat.STANDARD_WEBHOOKS: _standard_webhooks,
    PayloadFormat.CLOUDEVENTS_BINARY: _cloudevents_binary,
    PayloadFormat.CLOUDEVENTS_STRUCTURED: _cloudevents_structured,
    PayloadFormat.RAW: _raw,
}
