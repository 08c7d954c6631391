"""ReceiptHandle: the signed token a consumer gets with each received message.

A handle names one lease: which broker leased which message (queue and offset)
to which group, and until when. The broker that issued it signs it (HMAC-SHA256,
truncated to 16 bytes, with a key kept in its store dir); the gateway reads only
the broker name, to route an ack, and the broker checks the signature, so a
forged or tampered handle is refused before anything happens. Clients treat the
text as opaque.

Text form: ``<payload>.<signature>``, both unpadded base64url; the payload is a
compact JSON array (version, then the fields in order), the signature the HMAC of
the payload text.

Signing set-up (issue 29): `hmac.digest` hashes the padded key anew for every
message (about 40 % of what a handle cost the broker, py-spy). `ReceiptKey` does
it once per key: the states after the inner and outer padded keys are kept, and
each handle signed or checked copies them. The signatures are HMAC-SHA256's, the
same as before, so every handle stays a whole token of its own (acked, nacked or
extended alone, on any gateway), handles issued before stay valid, and gateways
and brokers of either side of the change read each other's.

A broker's receive answer carries the leases beside the records::

    u32 length of the lease list | lease list (JSON) | records (libs.codec), end to end
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from typing import Final

from libs import jsonutil
from libs.errors import InvalidReceiptHandle

VERSION: Final = 1
SIGNATURE_BYTES: Final = 16
MAX_HANDLE_LENGTH: Final = 2048

_MALFORMED: Final = "the receipt handle is malformed: it is not one that Petrel issued"
_BLOCK: Final = 64
_IPAD: Final = bytes.maketrans(bytes(range(256)), bytes(b ^ 0x36 for b in range(256)))
_OPAD: Final = bytes.maketrans(bytes(range(256)), bytes(b ^ 0x5C for b in range(256)))


class ReceiptKey:
    """A broker's signing key with HMAC-SHA256's key set-up done once: signing a handle copies two hash states."""

    def __init__(self, key: bytes) -> None:
        block = (hashlib.sha256(key).digest() if len(key) > _BLOCK else key).ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha256(block.translate(_IPAD))
        self._outer = hashlib.sha256(block.translate(_OPAD))

    def sign(self, message: bytes) -> bytes:
        """HMAC-SHA256(key, message), truncated to SIGNATURE_BYTES: hmac.digest's, without its per-call set-up."""
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()[:SIGNATURE_BYTES]


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

    def encode(self, key: ReceiptKey) -> str:
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
        return f"{payload}.{_b64(key.sign(payload.encode()))}"

    @classmethod
    def decode(cls, text: str, key: ReceiptKey | None = None) -> ReceiptHandle:
        """The handle's fields; with `key`, only if its signature holds (else a clear 400)."""
        if not isinstance(text, str) or len(text) > MAX_HANDLE_LENGTH or text.count(".") != 1:
            raise InvalidReceiptHandle(_MALFORMED)
        payload, signature = text.split(".")
        if key is not None and not hmac.compare_digest(_unb64(signature), key.sign(payload.encode())):
            raise InvalidReceiptHandle("the receipt handle's signature does not match: it was altered or forged")
        try:
            version, *values = jsonutil.loads(_unb64(payload))
            if version != VERSION:
                raise InvalidReceiptHandle(f"receipt handle version {version!r} is not supported")
            handle = cls(*values)
        except (ValueError, TypeError) as exc:
            raise InvalidReceiptHandle(_MALFORMED) from exc
        if not _well_typed(values):
            raise InvalidReceiptHandle(_MALFORMED)
        return handle


_SHAPE: Final = (str,) * 4 + (int,) * 5


def _well_typed(values: list[object]) -> bool:
    """Four names, then five whole numbers (a bool is not one)."""
    return tuple(map(type, values)) == _SHAPE


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


_FROM_URLSAFE: Final = bytes.maketrans(b"-_", b"+/")


def _unb64(text: str) -> bytes:
    try:  # base64.urlsafe_b64decode's decoding (non-alphabet bytes dropped), without its per-call set-up
        # joined, not added: deploy/compiled.py (LEAKY_PRIMITIVES)
        padded = b"".join((text.encode("ascii").translate(_FROM_URLSAFE), b"=" * (-len(text) % 4)))
        return binascii.a2b_base64(padded)
    except (binascii.Error, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidReceiptHandle(_MALFORMED) from exc
