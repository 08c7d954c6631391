"""Receipt handles as brokers signed them before ReceiptKey (hmac.digest, issue 29): still taken."""

from __future__ import annotations

import base64
import hmac

from libs import jsonutil
from libs.receipt import SIGNATURE_BYTES, ReceiptHandle


def version_1(handle: ReceiptHandle, key: bytes) -> str:
    """`<payload>.<signature>`: the payload the version and every field as a JSON array, the HMAC of the payload."""
    fields = [1, handle.broker, handle.group, handle.client_id, handle.topic, handle.queue_id, handle.queue_offset]
    payload = _b64(jsonutil.dumps([*fields, handle.lease, handle.epoch, handle.expires_at]))
    signature = hmac.digest(key, payload.encode(), "sha256")[:SIGNATURE_BYTES]
    return f"{payload}.{_b64(signature)}"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
