"""Signing and verifying webhooks the Standard Webhooks way (https://www.standardwebhooks.com).

A sender signs each request with a secret shared with the receiver and puts
three headers on it:

    webhook-id         a fresh id per attempt (the receiver may use it to drop replays)
    webhook-timestamp  unix seconds when it was sent
    webhook-signature  "v1,<base64 HMAC-SHA256(key, f'{id}.{timestamp}.{raw body}')>"; several
                       signatures (a rotated secret) are separated by spaces

The secret is "whsec_" + base64 of the key bytes. A receiver verifies the
signature over the raw body bytes, before parsing it, and refuses timestamps
more than `tolerance` seconds away from its own clock (replays of old requests).
txcheck signs check-back requests with the producer group's secret; a producer's
receiver verifies them with `verify`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Final

SECRET_PREFIX: Final = "whsec_"
ID_HEADER: Final = "webhook-id"
TIMESTAMP_HEADER: Final = "webhook-timestamp"
SIGNATURE_HEADER: Final = "webhook-signature"
DEFAULT_TOLERANCE_SECONDS: Final = 300
SIGNATURE_VERSION: Final = "v1"


class WebhookError(Exception):
    """A webhook could not be signed or verified; the message says why."""


class InvalidSecret(WebhookError):
    """The secret is not "whsec_" followed by base64."""


class VerificationFailed(WebhookError):
    """A received webhook is missing a header, too old or too new, or no signature matches."""


def new_secret(key_bytes: int = 24) -> str:
    """A fresh random secret in the Standard Webhooks form."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(key_bytes)).decode()


def secret_key(secret: str) -> bytes:
    """The key bytes of a "whsec_<base64>" secret (the prefix is optional, as in the reference libraries)."""
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidSecret("a webhook secret is 'whsec_' followed by base64") from exc
    if not key:
        raise InvalidSecret("a webhook secret holds at least one byte of key")
    return key


def signature(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """The "v1,<base64>" signature of one request."""
    content = f"{webhook_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), content, hashlib.sha256).digest()
    return f"{SIGNATURE_VERSION},{base64.b64encode(digest).decode()}"


def sign(
    secret: str | Sequence[str], body: bytes, *, webhook_id: str | None = None, now: float | None = None
) -> dict[str, str]:
    """The three headers to send with `body`: a fresh id unless one is given, the current time unless given.

    Several secrets (a rotation's overlap) give one signature each, space-separated,
    so that a receiver that knows any one of them accepts the request.
    """
    signing = [secret] if isinstance(secret, str) else list(secret)
    if not signing:
        raise InvalidSecret("signing needs at least one secret")
    webhook_id = webhook_id or f"msg_{uuid.uuid4().hex}"
    timestamp = int(time.time() if now is None else now)
    return {
        ID_HEADER: webhook_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: " ".join(signature(s, webhook_id, timestamp, body) for s in signing),
    }


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> None:
    """Return when `body` was signed with `secret` recently; else raise VerificationFailed saying why.

    `headers` is looked up in lower case (Starlette's and httpx's header maps
    are case-insensitive; a plain dict must use lower-case names).
    """
    webhook_id, timestamp = _required(headers, ID_HEADER), _required(headers, TIMESTAMP_HEADER)
    signatures = _required(headers, SIGNATURE_HEADER)
    try:
        sent_at = int(timestamp)
    except ValueError:
        raise VerificationFailed(f"{TIMESTAMP_HEADER} {timestamp!r} is not unix seconds") from None
    current = int(time.time() if now is None else now)
    if abs(current - sent_at) > tolerance:
        raise VerificationFailed(
            f"{TIMESTAMP_HEADER} {sent_at} is {current - sent_at:+d} s from now (tolerance {tolerance} s)"
        )
    expected = signature(secret, webhook_id, sent_at, body).encode()
    for candidate in signatures.split():
        if candidate.startswith(f"{SIGNATURE_VERSION},") and hmac.compare_digest(candidate.encode(), expected):
            return
    raise VerificationFailed("no signature matches: wrong secret, or the body or headers were changed")


def _required(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name)
    if not value:
        raise VerificationFailed(f"the {name} header is missing")
    return value
