"""ReceiptHandle: the signed token a consumer gets with each received message.

A handle names one lease: which broker leased which message (queue and offset)
to which group, and until when. The broker that issued it signs it (HMAC-SHA256
with a key kept in its store dir); the gateway reads only the broker name, to
route an ack, and the broker checks the signature, so a forged or tampered
handle is refused before anything happens. Clients treat the text as opaque.

Text form: ``<payload>.<signature>``, both unpadded base64url; the payload is a
compact JSON array (see `_FIELDS`).

A broker's receive answer carries the leases beside the records::

    u32 length of the lease list | lease list (JSON) | records (libs.codec), end to end
"""

from __future__ import annotations

import base64
import binascii
import hmac
from dataclasses import dataclass
from typing import Final

from libs import jsonutil
from libs.errors import InvalidReceiptHandle

VERSION: Final = 1
SIGNATURE_BYTES: Final = 16
MAX_HANDLE_LENGTH: Final = 2048


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    broker: str
    group: str
    client_id: str
    """'' unless the group is a broadcast group (each client has its own offsets)."""
    topic: str
    """The queue's topic: the message's topic, or the group's retry topic."""
    queue_id: int
    queue_offset: int
    lease: int
    """Which lease of that message: a visibility change issues a new one."""
    epoch: int
    """The broker's start time (ms): leases do not outlive a restart."""
    expires_at: int

    def encode(self, key: bytes) -> str:
        fields = [
            VERSION,
            self.broker,
            self.group,
            self.client_id,
            self.topic,
            self.queue_id,
            self.queue_offset,
            self.lease,
            self.epoch,
            self.expires_at,
        ]  # not dataclasses.astuple: it deep-copies, and this runs for every message received
        payload = _b64(jsonutil.dumps(fields))
        return f"{payload}.{_b64(_sign(key, payload))}"

    @classmethod
    def decode(cls, text: str, key: bytes | None = None) -> ReceiptHandle:
        """The handle's fields; with `key`, only if its signature holds (else a clear 400)."""
        if not isinstance(text, str) or len(text) > MAX_HANDLE_LENGTH or text.count(".") != 1:
            raise InvalidReceiptHandle("the receipt handle is malformed: it is not one that Petrel issued")
        payload, signature = text.split(".")
        if key is not None and not hmac.compare_digest(_unb64(signature), _sign(key, payload)):
            raise InvalidReceiptHandle("the receipt handle's signature does not match: it was altered or forged")
        try:
            fields = jsonutil.loads(_unb64(payload))
            version, *values = fields
            if version != VERSION:
                raise InvalidReceiptHandle(f"receipt handle version {version!r} is not supported")
            handle = cls(*values)
        except (ValueError, TypeError) as exc:
            raise InvalidReceiptHandle("the receipt handle is malformed: it is not one that Petrel issued") from exc
        if not _well_typed(values):
            raise InvalidReceiptHandle("the receipt handle is malformed: it is not one that Petrel issued")
        return handle


def _well_typed(values: list[object]) -> bool:
    """Four names, then five whole numbers (a bool is not one)."""
    strings, numbers = values[:4], values[4:]
    return {type(v) for v in strings} <= {str} and {type(v) for v in numbers} <= {int}


def _sign(key: bytes, payload: str) -> bytes:
    return hmac.digest(key, payload.encode(), "sha256")[:SIGNATURE_BYTES]  # one-shot, in C


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


_FROM_URLSAFE: Final = bytes.maketrans(b"-_", b"+/")


def _unb64(text: str) -> bytes:
    try:  # base64.urlsafe_b64decode's decoding (non-alphabet bytes dropped), without its per-call set-up
        return binascii.a2b_base64(text.encode("ascii").translate(_FROM_URLSAFE) + b"=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidReceiptHandle("the receipt handle is malformed: it is not one that Petrel issued") from exc
