"""A broker stand-in for the put coalescer's tests: it records what it was sent, and can be held or failed."""

import asyncio

from libs.broker_api.schemas import PutAnswer, PutEntry, PutFailure
from libs.errors import PetrelError, StoreFull


def entry(n: int) -> PutEntry:
    return PutEntry(topic="t", queue_id=0, queue_offset=n, physical_offset=n * 100, store_timestamp=0, message_id=None)


class Broker:
    """Stores everything it is sent (one byte per record), answering in order; can be held or failed."""

    def __init__(self, store_at_most: int | None = None) -> None:
        self.puts: list[bytes] = []
        self.release = asyncio.Event()
        self.release.set()
        self.failure: PetrelError | None = None
        self.store_at_most = store_at_most
        self.stored = 0

    async def put(self, records: bytes) -> PutAnswer:
        self.puts.append(records)
        await self.release.wait()
        if self.failure is not None:
            raise self.failure
        count = len(records) if self.store_at_most is None else min(len(records), self.store_at_most)
        stored = [entry(self.stored + i) for i in range(count)]
        self.stored += count
        failure = None
        if count < len(records):
            failure = PutFailure(index=count, type=StoreFull.problem_type(), status=507, detail="disk full")
        return PutAnswer(stored=stored, failure=failure)
