"""Payload formats: what an endpoint receives, and that its signature verifies as Standard Webhooks say.

Signatures are checked with the reference implementation (PyPI `standardwebhooks`) for text
bodies. That library decodes the body as UTF-8 before checking, so it cannot verify a body of
bytes; those are checked with `spec_verify`, written from the spec's text, not with libs.webhooks.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
from collections.abc import Mapping

import pytest
import standardwebhooks

from libs import webhooks
from libs.broker_api.frames import Lease
from libs.message import MessageRecord, Prop, SysFlag
from libs.push_api.schemas import PayloadFormat
from services.push.payloads import Outgoing, PushedMessage, pushed_message, render

SECRET = webhooks.new_secret()
BORN_AT = 1_790_000_000_123
LEASE = Lease(receipt_handle="handle-1", delivery_attempt=3, invisible_until=BORN_AT + 60_000)
BYTES = bytes(range(256))
Properties = dict[str, str] | None


def record(
    body: bytes = b"hello \xe2\x98\x83", *, binary: bool = False, properties: Properties = None
) -> MessageRecord:
    return MessageRecord(
        topic="%RETRY%billing",
        body=body,
        queue_id=2,
        queue_offset=41,
        sysflag=SysFlag.BINARY_BODY if binary else 0,
        born_timestamp=BORN_AT,
        store_timestamp=BORN_AT + 5,
        properties={
            Prop.UNIQ_KEY: "0A0B0C",
            Prop.RETRY_TOPIC: "orders",
            Prop.TAGS: "created",
            Prop.KEYS: "k1 k,2",
            Prop.MESSAGE_GROUP: "customer-7",
            **(properties or {}),
        },
    )


def message(
    body: bytes = b"hello \xe2\x98\x83", *, binary: bool = False, properties: Properties = None
) -> PushedMessage:
    return pushed_message(record(body, binary=binary, properties=properties), "broker-a", "billing", LEASE)


def spec_verify(secret: str, headers: Mapping[str, str], body: bytes) -> bool:
    """Standard Webhooks, section "Verifying webhooks": HMAC-SHA256 of "{id}.{timestamp}.{body}"."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(
        version == "v1" and hmac.compare_digest(sent, expected)
        for version, _, sent in (part.partition(",") for part in headers["webhook-signature"].split(" "))
    )


def signed_now(
    payload_format: PayloadFormat, msg: PushedMessage | None = None, secrets: list[str] | None = None
) -> Outgoing:
    # The reference library checks the timestamp against its own clock.
    return render(msg or message(), payload_format, secrets or [SECRET], time.time())


@pytest.mark.parametrize("payload_format", list(PayloadFormat))
def test_every_format_verifies_with_the_reference_implementation(payload_format: PayloadFormat) -> None:
    sent = signed_now(payload_format)
    standardwebhooks.Webhook(SECRET).verify(sent.body, sent.headers, json_parse=False)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(webhooks.new_secret()).verify(sent.body, sent.headers, json_parse=False)


@pytest.mark.parametrize("payload_format", list(PayloadFormat))
def test_a_body_of_bytes_is_signed_as_sent(payload_format: PayloadFormat) -> None:
    sent = signed_now(payload_format, message(BYTES, binary=True))
    assert spec_verify(SECRET, sent.headers, sent.body)
    assert not spec_verify(SECRET, sent.headers, sent.body + b" ")


@pytest.mark.parametrize("payload_format", list(PayloadFormat))
def test_during_a_rotation_either_secret_verifies_alone(payload_format: PayloadFormat) -> None:
    old, new = webhooks.new_secret(), webhooks.new_secret()
    sent = signed_now(payload_format, secrets=[new, old])
    assert len(sent.headers["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        standardwebhooks.Webhook(secret).verify(sent.body, sent.headers, json_parse=False)


@pytest.mark.parametrize("payload_format", list(PayloadFormat))
def test_every_format_says_which_delivery_it_is(payload_format: PayloadFormat) -> None:
    sent = render(message(), payload_format, [SECRET], now=1_800_000_000.5)
    assert sent.headers["webhook-timestamp"] == "1800000000"
    assert sent.headers["webhook-id"] == sent.headers["petrel-message-id"] == "0A0B0C"
    assert sent.headers["petrel-topic"] == "orders"
    assert sent.headers["petrel-group"] == "billing"
    assert sent.headers["petrel-delivery-attempt"] == "3"
    assert sent.headers["petrel-receipt-handle"] == "handle-1"
    assert sent.headers["user-agent"] == "petrel-push/1"


def test_the_webhook_id_is_the_message_id_on_every_attempt() -> None:
    first = render(message(), PayloadFormat.STANDARD_WEBHOOKS, [SECRET], now=1_800_000_000)
    later = pushed_message(record(), "broker-b", "billing", Lease("handle-9", 4, BORN_AT))
    retried = render(later, PayloadFormat.STANDARD_WEBHOOKS, [SECRET], now=1_800_000_030)
    assert first.headers["webhook-id"] == retried.headers["webhook-id"] == "0A0B0C"
    assert retried.headers["petrel-delivery-attempt"] == "4"


def test_standard_webhooks_sends_the_fields_of_a_received_message() -> None:
    sent = render(
        message(properties={"color": "blue"}), PayloadFormat.STANDARD_WEBHOOKS, [SECRET], now=1_800_000_000.25
    )
    assert sent.headers["content-type"] == "application/json"
    assert json.loads(sent.body) == {
        "type": "petrel.message",
        "timestamp": "2027-01-15T08:00:00.250Z",
        "data": {
            "message_id": "0A0B0C",
            "topic": "orders",
            "group": "billing",
            "body": "hello \u2603",
            "body_base64": None,
            "tag": "created",
            "keys": ["k1", "k,2"],
            "properties": {"color": "blue"},
            "message_group": "customer-7",
            "born_at": BORN_AT,
            "stored_at": BORN_AT + 5,
            "broker": "broker-a",
            "queue_id": 2,
            "queue_offset": 41,
            "delivery_attempt": 3,
            "receipt_handle": "handle-1",
            "invisible_until": BORN_AT + 60_000,
        },
    }


def test_standard_webhooks_sends_bytes_as_base64() -> None:
    data = json.loads(signed_now(PayloadFormat.STANDARD_WEBHOOKS, message(BYTES, binary=True)).body)["data"]
    assert data["body"] is None
    assert base64.b64decode(data["body_base64"]) == BYTES


def test_cloudevents_binary_sends_the_body_and_the_attributes_in_headers() -> None:
    sent = signed_now(PayloadFormat.CLOUDEVENTS_BINARY, message(BYTES, binary=True))
    assert sent.body == BYTES
    assert sent.headers["content-type"] == "application/octet-stream"
    required = {name: sent.headers[f"ce-{name}"] for name in ("specversion", "id", "source", "type")}
    assert required == {
        "specversion": "1.0",
        "id": "0A0B0C",
        "source": "petrel:/topics/orders",
        "type": "petrel.message",
    }
    assert sent.headers["ce-time"] == "2026-09-21T14:13:20.123Z"
    assert sent.headers["ce-subject"] == "created"
    assert sent.headers["ce-petrelgroup"] == "billing"
    assert sent.headers["ce-petrelkeys"] == "k1,k%252C2"  # the attribute "k1,k%2C2", percent-encoded as a header
    for name in sent.headers:
        if name.startswith("ce-"):
            assert re.fullmatch(r"[a-z0-9]{1,20}", name[3:]), f"{name}: not a CloudEvents attribute name"


def test_cloudevents_binary_says_text_or_the_producers_content_type() -> None:
    text = signed_now(PayloadFormat.CLOUDEVENTS_BINARY)
    assert text.headers["content-type"] == "text/plain; charset=utf-8"
    assert text.body == "hello \u2603".encode()
    declared = signed_now(
        PayloadFormat.CLOUDEVENTS_BINARY, message(b"{}", properties={"Content-Type": "application/json"})
    )
    assert declared.headers["content-type"] == "application/json"


def test_cloudevents_structured_round_trips_bytes_through_data_base64() -> None:
    sent = signed_now(PayloadFormat.CLOUDEVENTS_STRUCTURED, message(BYTES, binary=True))
    assert sent.headers["content-type"] == "application/cloudevents+json"
    event = json.loads(sent.body)
    assert {"specversion", "id", "source", "type"} <= event.keys()
    assert (event["specversion"], event["id"], event["type"]) == ("1.0", "0A0B0C", "petrel.message")
    assert event["datacontenttype"] == "application/octet-stream"
    assert "data" not in event
    assert base64.b64decode(event["data_base64"]) == BYTES
    assert event["petrelqueueoffset"] == 41
    assert event["petrelkeys"] == "k1,k%2C2"


def test_cloudevents_structured_sends_text_as_data_and_json_as_its_value() -> None:
    text = json.loads(signed_now(PayloadFormat.CLOUDEVENTS_STRUCTURED).body)
    assert (text["data"], text["datacontenttype"]) == ("hello \u2603", "text/plain; charset=utf-8")
    as_json = message(b'{"total": 12}', properties={"content-type": "application/json"})
    assert json.loads(signed_now(PayloadFormat.CLOUDEVENTS_STRUCTURED, as_json).body)["data"] == {"total": 12}


def test_raw_sends_the_body_and_the_fields_in_headers() -> None:
    props = {"color": "dark blue", "region.id": "eu-1", "camelCase": "x", "b\u00e4r": "y"}
    sent = render(message(properties=props), PayloadFormat.RAW, [SECRET], now=1_800_000_000)
    assert sent.body == "hello \u2603".encode()
    assert sent.headers["content-type"] == "text/plain; charset=utf-8"
    assert sent.headers["petrel-tag"] == "created"
    assert sent.headers["petrel-keys"] == "k1,k%2C2"
    assert sent.headers["petrel-message-group"] == "customer-7"
    assert sent.headers["petrel-born-at"] == str(BORN_AT)
    assert sent.headers["petrel-property-color"] == "dark%20blue"
    assert sent.headers["petrel-property-region.id"] == "eu-1"
    assert sent.headers["petrel-properties-skipped"] == "2"
    assert all(value.isascii() and value.isprintable() for value in sent.headers.values())


def test_a_message_of_a_retry_topic_is_pushed_with_the_topic_it_was_sent_to() -> None:
    pushed = message(BYTES, binary=True, properties={"color": "blue"})
    assert (pushed.topic, pushed.group, pushed.broker) == ("orders", "billing", "broker-a")
    assert (pushed.binary, pushed.body) == (True, BYTES)
    assert pushed.properties == {"color": "blue"}
    assert (pushed.tag, pushed.keys, pushed.message_group) == ("created", ["k1", "k,2"], "customer-7")
    assert (pushed.delivery_attempt, pushed.receipt_handle, pushed.invisible_until) == (3, "handle-1", BORN_AT + 60_000)
