"""BrokerClient: the gateway's calls to a broker's internal API (topics, messages, consumer groups, transactions).

A transport failure becomes BrokerUnavailable naming the broker, so the client
sees which broker is down rather than an address. A broker's FlushTimeout stays
what it is: the broker stored the records, it is not unavailable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.cluster.long_polls import LongPollGate
from gateway.groups.schemas import Group, GroupUpdate, RedriveRequest
from libs import jsonutil
from libs.errors import BrokerUnavailable, FlushTimeout, PetrelError, ServiceUnavailable
from libs.http.client import BINARY_TYPE, JSON_TYPE, BinaryResponse, InternalClient
from libs.receipt import Lease, decode_leased
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
    def __init__(self, client: InternalClient, long_polls: LongPollGate | None = None) -> None:
        self.client = client
        self.long_polls = long_polls or LongPollGate()
        """Bounds the pulls with a wait here, and the receiver's waiting receives."""

    async def _json(
        self,
        broker: str,
        address: str,
        method: str,
        path: str,
        body: object = None,
        *,
        params: Mapping[str, str | int] | None = None,
        timeout: float | None = None,
        idempotent: bool | None = None,
        waiting: bool = False,
    ) -> Any:
        try:
            return await self.client.json(
                method,
                f"http://{address}{path}",
                body=body,
                params=params,
                timeout=timeout,
                idempotent=idempotent,
                waiting=waiting,
            )
        except FlushTimeout:
            raise
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
        content_type: str = BINARY_TYPE,
        waiting: bool = False,
    ) -> BinaryResponse:
        try:
            return await self.client.binary(
                method,
                f"http://{address}{path}",
                body=body,
                params=params,
                timeout=timeout,
                content_type=content_type,
                waiting=waiting,
            )
        except FlushTimeout:
            raise
        except ServiceUnavailable as exc:
            raise BrokerUnavailable(
                f"broker {broker} at {address} did not answer: {exc.detail}", broker=broker
            ) from exc

    async def put(self, broker: str, address: str, records: bytes | bytearray) -> PutAnswer:
        """The broker's answer; BrokerUnavailable with `maybe_stored` when the put reached it but no answer came."""
        try:
            # Twice the call timeout: past the broker's sync_flush_timeout_ms (as long as it by default),
            # so that a slow disk is answered flush-timeout (stored, where) rather than "maybe stored".
            timeout = 2 * self.client.options.timeout
            response = await self._binary(
                broker, address, "POST", "/internal/messages", body=bytes(records), timeout=timeout
            )
        except BrokerUnavailable as exc:
            cause = exc.__cause__
            if isinstance(cause, ServiceUnavailable) and cause.extensions.get("request_sent"):
                raise BrokerUnavailable(
                    f"{exc.detail}; the message may have been stored: send it again only with the same Idempotency-Key",
                    broker=broker,
                    maybe_stored=True,
                ) from cause
            raise
        return PutAnswer.model_validate_json(response.body)

    async def pull(
        self, broker: str, address: str, topic: str, queue_id: int, params: Mapping[str, str | int], wait_ms: int
    ) -> PulledBatch:
        path = f"/internal/topics/{topic}/queues/{queue_id}/messages"
        timeout = self._waiting(wait_ms)
        if wait_ms <= 0:
            return PulledBatch(await self._binary(broker, address, "GET", path, params=params, timeout=timeout))
        with self.long_polls.hold():
            return PulledBatch(
                await self._binary(broker, address, "GET", path, params=params, timeout=timeout, waiting=True)
            )

    async def query_key(self, broker: str, address: str, params: Mapping[str, str | int]) -> bytes:
        return (await self._binary(broker, address, "GET", "/internal/messages", params=params)).body

    async def query_id(self, broker: str, address: str, message_id: str, params: Mapping[str, str | int]) -> bytes:
        path = f"/internal/messages/by-id/{message_id}"
        return (await self._binary(broker, address, "GET", path, params=params)).body

    def _waiting(self, wait_ms: int) -> float:
        """The HTTP timeout of a call the broker may hold for wait_ms (one that may wait uses the long-poll pool)."""
        return wait_ms / 1000 + self.client.options.timeout

    async def put_group(self, broker: str, address: str, group: str, update: GroupUpdate) -> tuple[Group, bool]:
        """The group as stored, and whether this broker created it (rather than updated it)."""
        answer = await self._json(broker, address, "PUT", f"/internal/groups/{group}", update.model_dump(mode="json"))
        return Group.model_validate(answer), bool(answer.get("created", False))

    async def get_group(self, broker: str, address: str, group: str) -> Group:
        return Group.model_validate(await self._json(broker, address, "GET", f"/internal/groups/{group}"))

    async def list_groups(self, broker: str, address: str) -> list[Group]:
        answer = await self._json(broker, address, "GET", "/internal/groups")
        return [Group.model_validate(g) for g in answer["groups"]]

    async def delete_group(self, broker: str, address: str, group: str) -> None:
        await self._json(broker, address, "DELETE", f"/internal/groups/{group}")

    async def receive(
        self, broker: str, address: str, group: str, topic: str, body: Mapping[str, Any]
    ) -> tuple[list[Lease], memoryview]:
        """Leased messages: one lease per record, in order (none when nothing came within body's wait_ms)."""
        path = f"/internal/groups/{group}/topics/{topic}/receive"
        wait_ms = int(body["wait_ms"])
        raw = await self._binary(
            broker,
            address,
            "POST",
            path,
            body=jsonutil.dumps(body),
            content_type=JSON_TYPE,
            timeout=self._waiting(wait_ms),
            waiting=wait_ms > 0,
        )
        return decode_leased(raw.body)

    async def ready(self, broker: str, address: str, group: str, topic: str, params: Mapping[str, str | int]) -> bool:
        """Whether something is there for the group to receive, waiting up to params' wait_ms for it."""
        path = f"/internal/groups/{group}/topics/{topic}/ready"
        wait_ms = int(params["wait_ms"])
        answer = await self._json(
            broker, address, "GET", path, params=params, timeout=self._waiting(wait_ms), waiting=wait_ms > 0
        )
        return bool(answer["ready"])

    async def ack(self, broker: str, address: str, group: str, handles: list[str]) -> list[dict[str, Any]]:
        """One result per handle, in order (HandleResult's fields)."""
        body = {"receipt_handles": handles}
        return list((await self._json(broker, address, "POST", f"/internal/groups/{group}/ack", body))["results"])

    async def nack(self, broker: str, address: str, group: str, body: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One result per handle of body's receipt_handles, in order (HandleResult's fields)."""
        return list((await self._json(broker, address, "POST", f"/internal/groups/{group}/nack", body))["results"])

    async def change_visibility(
        self, broker: str, address: str, group: str, handle: str, invisible_ms: int
    ) -> dict[str, Any]:
        body = {"receipt_handle": handle, "invisible_ms": invisible_ms}
        return dict(await self._json(broker, address, "POST", f"/internal/groups/{group}/visibility", body))

    async def lag(self, broker: str, address: str, group: str) -> list[dict[str, Any]]:
        return list((await self._json(broker, address, "GET", f"/internal/groups/{group}/lag"))["queues"])

    async def reset_offsets(
        self, broker: str, address: str, group: str, topic: str, body: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        path = f"/internal/groups/{group}/topics/{topic}/offsets:reset"
        return list((await self._json(broker, address, "POST", path, body))["queues"])

    async def dead_letters(self, broker: str, address: str, group: str, offset: int, max: int) -> PulledBatch:
        params = {"offset": offset, "max": max}
        return PulledBatch(await self._binary(broker, address, "GET", f"/internal/groups/{group}/dlq", params=params))

    async def redrive(self, broker: str, address: str, group: str, request: RedriveRequest) -> dict[str, Any]:
        """The broker sends dead letters back at request.per_second: the call lasts as long as that takes."""
        path = f"/internal/groups/{group}/dlq:redrive"
        count = min(request.max_messages, len(request.message_ids or ()) or request.max_messages)
        seconds = count / request.per_second
        return dict(
            await self._json(
                broker, address, "POST", path, request.model_dump(), timeout=self._waiting(int(seconds * 1000))
            )
        )

    async def end_transactions(
        self, broker: str, address: str, ends: list[dict[str, str]]
    ) -> list[dict[str, Any] | PetrelError]:
        """End many ({"message_id", "outcome": COMMIT or ROLLBACK, "by"}); per end, the broker's answer or refusal."""
        answer = await self._json(
            broker, address, "POST", "/internal/transactions:end", {"ends": ends}, idempotent=True
        )
        return [_ended_or_refused(r) for r in answer["results"]]

    async def get_transaction(self, broker: str, address: str, message_id: str) -> dict[str, Any]:
        return dict(await self._json(broker, address, "GET", f"/internal/transactions/{message_id}"))

    async def list_transactions(self, broker: str, address: str, state: str, max: int) -> list[dict[str, Any]]:
        params: dict[str, str | int] = {"state": state, "max": max}
        return list((await self._json(broker, address, "GET", "/internal/transactions", params=params))["transactions"])


def _ended_or_refused(result: dict[str, Any]) -> dict[str, Any] | PetrelError:
    failure = result.get("failure")
    if failure is None:
        return dict(result["ended"])
    cls = PetrelError.from_problem_type(failure["type"]) or PetrelError
    return cls.rebuild(failure["detail"], dict(failure.get("extensions") or {}))
