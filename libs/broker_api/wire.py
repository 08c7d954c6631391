"""The wire constants of the broker's internal API: header names, content types, limits, property values."""

from __future__ import annotations

from typing import Final

from libs.message import Prop

BINARY: Final = "application/octet-stream"
"""Records in the binary codec (libs.codec), laid end to end: a put's body, a pull's or query's answer."""

NEXT_OFFSET: Final = "x-petrel-next-offset"
MIN_OFFSET: Final = "x-petrel-min-offset"
MAX_OFFSET: Final = "x-petrel-max-offset"
"""Headers of a pull's (and a units read's) answer: where the next read starts, and the queue's ends."""
UNIT_IDS: Final = "x-petrel-unit-ids"
"""Header of a units read's answer, "true" when each unit is followed by its message id (asked with `ids`): a
broker older than ids answers bare units, which the reader then takes as such."""
TRUNCATED: Final = "x-petrel-truncated"
"""Header of a query by key's answer, "true" when the broker stopped reading its index at its bound."""

CHECK_IMMUNITY: Final = Prop.CHECK_IMMUNITY
"""A half message's property: seconds before its first check-back."""
FIRST_STORED: Final = Prop.TRANSACTION_FIRST_STORED
"""A renewed half copy's property: when the first copy was stored (ms)."""
OP_TAG: Final = "d"
"""The tag of an op record (RMQ_SYS_TRANS_OP_HALF_TOPIC) that ends a transaction."""

MAX_ENDS: Final = 1000
"""Transaction ends in one `POST /internal/transactions:end`."""
