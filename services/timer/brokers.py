"""BrokerTimerClient: the timer service's calls to a broker's schedule-queue API."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final

from libs.http.client import InternalClient
from services.broker.messages import NEXT_OFFSET

UNIT: Final = struct.Struct(">qiq")


@dataclass(frozen=True, slots=True)
class DueUnit:
    """One message waiting in a schedule queue: where it is, and when it is due."""

    queue_offset: int
    physical_offset: int
    size: int
    due_ms: int


@dataclass(frozen=True, slots=True)
class QueueEnds:
    """A broker's queues of one topic: queue id -> (min, max) offset; their ends when it started, and that start."""

    incarnation: str
    offsets: dict[int, tuple[int, int]]
    at_start: dict[int, int]


class BrokerTimerClient:
    def __init__(self, client: InternalClient) -> None:
        self.client = client

    async def max_offsets(self, address: str, topic: str) -> QueueEnds:
        """Min and max offset of every queue of the topic, and their ends when the broker started."""
        answer = await self.client.json("GET", f"http://{address}/internal/topics/{topic}/offsets")
        return QueueEnds(
            answer["incarnation"],
            {q["queue_id"]: (q["min_offset"], q["max_offset"]) for q in answer["queues"]},
            {q["queue_id"]: q["max_offset_at_start"] for q in answer["queues"] if q["max_offset_at_start"] is not None},
        )

    async def units(self, address: str, topic: str, queue_id: int, offset: int, count: int) -> list[DueUnit]:
        response = await self.client.binary(
            "GET",
            f"http://{address}/internal/topics/{topic}/queues/{queue_id}/units",
            params={"offset": offset, "max": count},
        )
        start = int(response.headers[NEXT_OFFSET]) - len(response.body) // UNIT.size
        return [
            DueUnit(start + i, physical, size, due)
            for i, (physical, size, due) in enumerate(UNIT.iter_unpack(response.body))
        ]

    async def deliver(self, address: str, physical_offsets: list[int]) -> list[dict[str, Any]]:
        """Deliver due messages; one result per offset ('delivered' or 'failed' with type and detail)."""
        answer = await self.client.json(
            "POST", f"http://{address}/internal/timers/deliveries", body={"physical_offsets": physical_offsets}
        )
        return list(answer["results"])

    async def report(
        self, address: str, levels: dict[int, int], timer: int, wheel_offset: int | None
    ) -> tuple[int, int]:
        """Tell the broker what the timer still needs (as of its checkpoint); (roll below, log start)."""
        answer = await self.client.json(
            "POST",
            f"http://{address}/internal/timers/progress",
            body={"levels": {str(q): o for q, o in levels.items()}, "timer": timer, "wheel_offset": wheel_offset},
        )
        return int(answer["roll_below"]), int(answer["log_start"])

    async def roll(self, address: str, physical_offsets: list[int]) -> list[dict[str, Any]]:
        """Re-put pending messages at the log's end; one result per offset ('rolled' with new_offset, or not)."""
        answer = await self.client.json(
            "POST", f"http://{address}/internal/timers/rolls", body={"physical_offsets": physical_offsets}
        )
        return list(answer["results"])
