"""PETREL_REDIS_URL: a password and TLS, and how the URL is shown.

The URL may carry a password (`redis://:<password>@host:6379/0`, or
`redis://<user>:<password>@...` for a Redis ACL user) and ask for TLS with the
`rediss://` scheme; redis-py (idempotency keys, locks) and Celery's kombu (the
txcheck and ETL queues) read the same URL. TLS options go in its query:
`ssl_ca_certs=/path/ca.pem` (the CA that signed the server's certificate),
`ssl_certfile=` and `ssl_keyfile=` (a client certificate), `ssl_cert_reqs=required`.

The certificate is verified unless the URL says `ssl_cert_reqs=none`: redis-py
does so by default, kombu does not (it falls back to no verification when the
URL names no ssl_ option), so `celery_tls` asks it to.

A URL is shown (logs, readiness answers, `petrel up`) only through `masked`.
"""

from __future__ import annotations

import ssl
from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from redis.exceptions import AuthenticationError

MASK: Final = "***"


def masked(url: str) -> str:
    """`url` with its password replaced by ***: `redis://:***@host:6379/0`; the rest as it was."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, hostinfo = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{hostinfo}"))


def celery_tls(url: str) -> dict[str, Any]:
    """Celery's `broker_use_ssl` for `url`: a verified certificate for a rediss:// URL that names no ssl_ option;
    nothing for redis:// or a URL that names its own (redis-py then verifies unless told ssl_cert_reqs=none)."""
    parts = urlsplit(url)
    if parts.scheme != "rediss" or any(name.startswith("ssl_") for name, _ in parse_qsl(parts.query)):
        return {}
    return {"broker_use_ssl": {"ssl_cert_reqs": ssl.CERT_REQUIRED}}


def failure(url: str, exc: BaseException) -> str:
    """What a failed call to the Redis at `url` means, for a log or a readiness answer; its password masked."""
    if isinstance(exc, AuthenticationError):
        return f"Redis at {masked(url)} refused the credentials (the password in PETREL_REDIS_URL): {exc}"
    return f"Redis at {masked(url)} did not answer: {exc}"
