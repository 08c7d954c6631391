"""BrokerClient: the gateway's calls to a broker's internal API.

A transport failure becomes BrokerUnavailable naming the broker, so the client
sees which broker is down rather than an address.
"""

from __future__ import annotations

from collections.abc import Mapping

from libs.errors import BrokerUnavailable, ServiceUnavailable
from libs.http.client import BinaryResponse, InternalClient
from libs.topic import TopicConfig
from services.broker.messages import MAX_OFFSET, MIN_OFFSET, NEXT_OFFSET
from services.broker.schemas import BrokerTopic, PutAnswer


class PulledBatch:
    """A broker's pull answer: records (binary codec, end to end) and the queue's offsets."""

    def __init__(self, response: BinaryResponse) -> None:
        self.records = response.body
        self.next_offset = int(response.headers[NEXT_OFFSET])
        self.min_offset = int(response.headers[MIN_OFFSET])
        self.max_offset = int(response.headers[MAX_OFFSET])


class BrokerClient:
    def __init__(self, client: InternalClient) -> None:
        self.client = client

    async def _json(self, broker: str, address: str, method: str, path: str, body: object = None) -> object:
        try:
            return await self.client.json(method, f"http://{address}{path}", body=body)
        except ServiceUnavailable as exc:
            raise BrokerUnavailable(
                f"broker {broker} at {address} did not answer: {exc.detail}", broker=broker
            ) from exc

    async def put_topic(self, broker: str, address: str, config: TopicConfig) -> BrokerTopic:
        body = {
            "read_queues": config.read_queues,
            "write_queues": config.write_queues,
            "perm": config.perm,
            "message_type": config.message_type.value,
        }
        return BrokerTopic.model_validate(
            await self._json(broker, address, "PUT", f"/internal/topics/{config.name}", body)
        )

    async def get_topic(self, broker: str, address: str, topic: str) -> BrokerTopic:
        return BrokerTopic.model_validate(await self._json(broker, address, "GET", f"/internal/topics/{topic}"))

    async def delete_topic(self, broker: str, address: str, topic: str) -> None:
        await self._json(broker, address, "DELETE", f"/internal/topics/{topic}")

    async def _binary(
        self,
        broker: str,
        address: str,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        params: Mapping[str, str | int] | None = None,
        timeout: float | None = None,
    ) -> BinaryResponse:
        try:
            return await self.client.binary(
                method, f"http://{address}{path}", body=body, params=params, timeout=timeout
            )
        except ServiceUnavailable as exc:
            raise BrokerUnavailable(
                f"broker {broker} at {address} did not answer: {exc.detail}", broker=broker
            ) from exc

    async def put(self, broker: str, address: str, records: bytes | bytearray) -> PutAnswer:
        response = await self._binary(broker, address, "POST", "/internal/messages", body=bytes(records))
        return PutAnswer.model_validate_json(response.body)

    async def pull(
        self, broker: str, address: str, topic: str, queue_id: int, params: Mapping[str, str | int], wait_ms: int
    ) -> PulledBatch:
        path = f"/internal/topics/{topic}/queues/{queue_id}/messages"
        timeout = wait_ms / 1000 + self.client.options.timeout
        return PulledBatch(await self._binary(broker, address, "GET", path, params=params, timeout=timeout))

    async def query_key(self, broker: str, address: str, params: Mapping[str, str | int]) -> bytes:
        return (await self._binary(broker, address, "GET", "/internal/messages", params=params)).body

    async def query_id(self, broker: str, address: str, message_id: str, params: Mapping[str, str | int]) -> bytes:
        path = f"/internal/messages/by-id/{message_id}"
        return (await self._binary(broker, address, "GET", path, params=params)).body
