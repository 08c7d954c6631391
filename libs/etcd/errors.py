"""What an etcd call can fail with: one exception tree, from etcd's JSON errors and from HTTP.

    EtcdError
    ├── EtcdUnavailable     no member answered (connection refused, timeout, no leader, TLS refused);
    │                       `tried` says what each member did. The call may have been applied by a
    │                       member whose answer was lost: a conditional write retried elsewhere then
    │                       fails its compare, so callers read again rather than trust either outcome.
    ├── EtcdCompareFailed   a transaction's compares did not hold (`commit_or_raise`); `result` holds
    │                       what its failure branch read
    ├── EtcdLeaseNotFound   the lease expired, was revoked, or never was
    ├── EtcdAuthFailed      wrong or missing credentials, or the user may not do this
    └── EtcdRequestFailed   etcd refused the request itself (bad argument, too large, compacted ...)

The grpc-gateway answers an error as `{"error": ..., "message": ..., "code": <gRPC code>}` with an
HTTP status derived from the code; `error_for` classifies by the code and etcd's message.
"""

from __future__ import annotations

from typing import Any

from libs.etcd.wire import TxnResult

# gRPC status codes etcd answers with (google.golang.org/grpc/codes)
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
UNAVAILABLE = 14
UNAUTHENTICATED = 16

MEMBER_TROUBLE = frozenset({DEADLINE_EXCEEDED, UNAVAILABLE, RESOURCE_EXHAUSTED})
"""Codes that say this member cannot serve now (no leader, leader changed, request timed out, too many requests):
another member may."""

INVALID_TOKEN = "etcdserver: invalid auth token"


class EtcdError(Exception):
    """Anything an etcd call failed with; `code` is etcd's gRPC code when etcd answered one."""

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class EtcdUnavailable(EtcdError):
    def __init__(self, message: str, *, tried: list[str] | None = None) -> None:
        super().__init__(message)
        self.tried = tried or []


class EtcdCompareFailed(EtcdError):
    def __init__(self, message: str, result: TxnResult) -> None:
        super().__init__(message)
        self.result = result


class EtcdLeaseNotFound(EtcdError):
    pass


class EtcdAuthFailed(EtcdError):
    pass


class EtcdRequestFailed(EtcdError):
    pass


def error_for(path: str, status: int, answer: Any) -> EtcdError:
    """The error an answer that is not 2xx stands for (`answer`: its decoded JSON, or None when it was not JSON)."""
    if not isinstance(answer, dict):
        if status >= 500:
            return EtcdUnavailable(f"{path}: HTTP {status}")
        return EtcdRequestFailed(f"{path}: HTTP {status}")
    message = str(answer.get("error") or answer.get("message") or f"HTTP {status}")
    code = answer.get("code")
    code = code if isinstance(code, int) else None
    text = f"{path}: {message}"
    if "lease not found" in message:
        return EtcdLeaseNotFound(text, code=code)
    if (
        code in {UNAUTHENTICATED, PERMISSION_DENIED}
        or "authentication failed" in message
        or "user name is empty" in (message)
    ):
        return EtcdAuthFailed(text, code=code)
    if code in MEMBER_TROUBLE or (code is None and status >= 500):
        return EtcdUnavailable(text)
    return EtcdRequestFailed(text, code=code)
