"""GroupLeases: the push service's ack, nack, extend and give-back of a leased message, at the broker its handle names.

The same calls a consumer makes through the gateway, through the broker's
contract (libs.broker_api). A handle whose lease already ended raises the
broker's `LeaseEnded` (the group delivers the message again); a broker that
does not answer raises `ServiceUnavailable`.
"""

from __future__ import annotations

from libs.broker_api.client import BrokerClient
from libs.broker_api.frames import Lease
from libs.broker_api.route_cache import MasterDirectory
from libs.errors import BrokerUnavailable, PetrelError
from libs.receipt import ReceiptHandle


class GroupLeases:
    def __init__(self, brokers: BrokerClient, masters: MasterDirectory) -> None:
        self.brokers = brokers
        self.masters = masters

    async def ack(self, group: str, handle: str) -> None:
        broker, address = await self._broker(handle)
        _raise_failed(await self.brokers.ack(broker, address, group, [handle]))

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


def _raise_failed(results: list[dict[str, object]]) -> None:
    result = results[0] if results else {"ok": False, "error": {"detail": "no result"}}
    if result.get("ok"):
        return
    error = result.get("error")
    if isinstance(error, dict):
        problem = PetrelError.from_problem_type(str(error.get("type", ""))) or PetrelError
        raise problem.rebuild(str(error.get("detail", "")), {})
    raise PetrelError("the broker did not settle the handle")
