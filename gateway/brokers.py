"""BrokerClient: the gateway's calls to a broker's internal API.

A transport failure becomes BrokerUnavailable naming the broker, so the client
sees which broker is down rather than an address.
"""

from __future__ import annotations

from libs.errors import BrokerUnavailable, ServiceUnavailable
from libs.http.client import InternalClient
from libs.topic import TopicConfig
from services.broker.schemas import BrokerTopic


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
