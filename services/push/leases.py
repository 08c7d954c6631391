"""GroupLeases: the push service's ack, nack, extend and give-back of a leased message, at the broker its handle names.

The same calls a consumer makes through the gateway, through the broker's
contract (libs.broker_api). A handle whose lease already ended raises the
broker's `LeaseEnded` (the group delivers the message again); a broker that
does not answer raises `ServiceUnavailable`. Acks are the busy call (one per
message): the acks of many deliveries to one broker that come while another
ack call is under way go together in the next (libs.broker_api.coalescing),
as a consumer acks a batch of 32 in one call.
"""

from __future__ import annotations

from typing import Any

from libs.broker_api.client import BrokerClient
from libs.broker_api.coalescing import CallCoalescer
from libs.broker_api.consume import MAX_HANDLES
from libs.broker_api.frames import Lease
from libs.broker_api.route_cache import MasterDirectory
from libs.errors import BrokerUnavailable, PetrelError
from libs.receipt import ReceiptHandle

ACKS_IN_FLIGHT = 2
"""ack calls to one broker for one group at once; the acks that come meanwhile wait for the next"""


class GroupLeases:
    def __init__(self, brokers: BrokerClient, masters: MasterDirectory) -> None:
        self.brokers = brokers
        self.masters = masters
        self._acks: dict[tuple[str, str, str], CallCoalescer[str, dict[str, Any]]] = {}

    async def ack(self, group: str, handle: str) -> None:
        broker, address = await self._broker(handle)
        result = await self._ack_coalescer(group, broker, address).submit(handle)
        if isinstance(result, PetrelError):
            raise result
        _raise_failed([result])

    def _ack_coalescer(self, group: str, broker: str, address: str) -> CallCoalescer[str, dict[str, Any]]:
        key = (group, broker, address)
        coalescer = self._acks.get(key)
        if coalescer is None:

            async def ack_all(handles: list[str]) -> list[dict[str, Any] | PetrelError]:
                return list(await self.brokers.ack(broker, address, group, handles))

            coalescer = self._acks[key] = CallCoalescer(ack_all, ACKS_IN_FLIGHT, MAX_HANDLES)
        return coalescer

    async def nack(self, group: str, handle: str, reason: str) -> None:
        """A failed attempt: the group's retry levels, then its DLQ with `reason`."""
        broker, address = await self._broker(handle)
        body = {"receipt_handles": [handle], "reason": reason[:1024]}
        _raise_failed(await self.brokers.nack(broker, address, group, body))

    async def extend(self, group: str, handle: str, invisible_ms: int) -> Lease:
        """The lease from now for `invisible_ms`: a new handle (the old one no longer settles)."""
        broker, address = await self._broker(handle)
        answer = await self.brokers.change_visibility(broker, address, group, handle, invisible_ms)
        return Lease(str(answer["receipt_handle"]), 0, int(answer["invisible_until"]))

    async def give_back(self, group: str, handle: str) -> None:
        """End the lease now: the group delivers the message again (the broker counts a failed attempt)."""
        broker, address = await self._broker(handle)
        await self.brokers.change_visibility(broker, address, group, handle, 0)

    async def _broker(self, handle: str) -> tuple[str, str]:
        broker = ReceiptHandle.decode(handle).broker
        address = (await self.masters.lookup([broker])).get(broker)
        if address is None:
            raise BrokerUnavailable(f"broker {broker} of the receipt handle is not registered", broker=broker)
        return broker, address


def _raise_failed(results: list[dict[str, Any]]) -> None:
    result = results[0] if results else {"ok": False, "error": {"detail": "no result"}}
    if result.get("ok"):
        return
    error = result.get("error")
    if isinstance(error, dict):
        problem = PetrelError.from_problem_type(str(error.get("type", ""))) or PetrelError
        raise problem.rebuild(str(error.get("detail", "")), {})
    raise PetrelError("the broker did not settle the handle")
