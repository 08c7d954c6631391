"""Times as the public API takes them: RFC 3339 text or milliseconds since the epoch."""

from __future__ import annotations

from datetime import UTC, datetime

from libs.errors import InvalidRequest


def parse_time_ms(value: str | int, field: str) -> int:
    """Milliseconds since the epoch; InvalidRequest naming `field` when it is neither form."""
    if isinstance(value, int) or (isinstance(value, str) and value.isascii() and value.isdigit()):
        return int(value)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidRequest(
            f"{field} {value!r} is not a time: use RFC 3339 (2026-11-21T08:00:00Z) or epoch milliseconds"
        ) from None
    if moment.tzinfo is None:
        raise InvalidRequest(f"{field} {value!r} has no time zone: add Z or an offset such as +01:00")
    return int(moment.astimezone(UTC).timestamp() * 1000)
