"""EndedTransactions: the message ids a broker's op queue says were committed or rolled back, kept in Redis.

One sorted set per broker (`<prefix>ended:<broker>`), scored by the op record's
store time. The scan adds the ids of the op records it reads before it reads
half copies, and skips a half copy whose id is there (RocketMQ keeps this in
memory, per op-queue window; Redis lets any worker run the next scan).

An id is needed while a copy of its half message may still lie ahead of the
half queue's progress. Copies are appended in store-time order and no copy is
renewed after the end, so once the progress reaches copies stored well after
an op record, that id can go (`forget_before`). The whole set expires when a
broker is no longer scanned. Losing the set (a Redis without persistence
restarted) costs only redundant check tasks: a check asks the broker for the
transaction's state first and does nothing for an ended one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import cast

import redis


class EndedTransactions:
    def __init__(self, client: redis.Redis, prefix: str, broker: str, ttl_seconds: int) -> None:
        self.client = client
        self.key = f"{prefix}ended:{broker}"
        self.ttl_seconds = ttl_seconds

    def add(self, ended: Iterable[tuple[str, int]]) -> None:
        """(message id, op store time in ms) pairs."""
        mapping = dict(ended)
        if not mapping:
            return
        pipe = self.client.pipeline(transaction=False)
        pipe.zadd(self.key, mapping)
        pipe.expire(self.key, self.ttl_seconds)
        pipe.execute()

    def which(self, message_ids: Sequence[str]) -> set[str]:
        """Those of `message_ids` that have ended."""
        if not message_ids:
            return set()
        scores = cast(list[float | None], self.client.zmscore(self.key, list(message_ids)))
        return {mid for mid, score in zip(message_ids, scores, strict=True) if score is not None}

    def forget_before(self, store_ms: int) -> int:
        """Drop ids whose op record was stored before `store_ms`; how many."""
        return cast(int, self.client.zremrangebyscore(self.key, "-inf", f"({store_ms}"))

    def __len__(self) -> int:
        return cast(int, self.client.zcard(self.key))
