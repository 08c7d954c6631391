"""BrokerClient: the one async client of a broker's internal API, for the gateway, the timer and txcheck.

Every call names the broker and its address. A transport failure becomes
BrokerUnavailable naming the broker, so the caller sees which broker is down
rather than an address. A broker's FlushTimeout stays what it is: the broker
stored the records, it is not unavailable.

Calls the broker may hold (a pull or receive with a wait, a ready check) go through
the internal client's long-poll pool, each held by `long_polls` (the gateway's
LongPollGate bounds them; by default nothing does).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from libs import jsonutil
from libs.broker_api.consume import RedriveBody
from libs.broker_api.frames import DueUnit, KeyQueryAnswer, Lease, PulledBatch, decode_leased, read_units
from libs.broker_api.groups import GroupConfigAnswer, GroupConfigList, GroupUpdate
from libs.broker_api.overview import BrokerOverview
from libs.broker_api.schemas import BrokerTopic, ExpectedRecord, PutAnswer, QueueOffsets, TopicOffsets
from libs.broker_api.trace import TraceAnswer
from libs.codec import decode_record
from libs.errors import BrokerUnavailable, FlushTimeout, PetrelError, ServiceUnavailable
from libs.http.client import BINARY_TYPE, JSON_TYPE, BinaryResponse, InternalClient
from libs.http.paths import internal_path
from libs.message import MessageRecord
from libs.topic import MessageType, TopicConfig


class LongPollLimit(Protocol):
    def hold(self) -> AbstractContextManager[object]:
        """One long poll for as long as the block lasts (refused past the limit)."""
        ...


class Unlimited:
    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        yield


class BrokerClient:
    def __init__(self, client: InternalClient, long_polls: LongPollLimit | None = None) -> None:
        self.client = client
        self.long_polls: LongPollLimit = long_polls or Unlimited()

    # ---- transport ---------------------------------------------------------------------------

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
        url = f"http://{address}{path}"
        with _naming(broker, address):
            return await self.client.json(
                method, url, body=body, params=params, timeout=timeout, idempotent=idempotent, waiting=waiting
            )

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
        url = f"http://{address}{path}"
        with _naming(broker, address):
            return await self.client.binary(
                method, url, body=body, params=params, timeout=timeout, content_type=content_type, waiting=waiting
            )

    def _waiting(self, wait_ms: int) -> float:
        """The HTTP timeout of a call the broker may hold for wait_ms (one that may wait uses the long-poll pool)."""
        return wait_ms / 1000 + self.client.options.timeout

    # ---- topics ------------------------------------------------------------------------------

    async def change_topic(
        self,
        broker: str,
        address: str,
        topic: str,
        *,
        queues: int | None,
        message_type: MessageType | None,
        created_as: TopicConfig,
        create_only: bool = False,
    ) -> BrokerTopic:
        """Change only what is not None, or create the topic (as `created_as`, but what is not None); the
        broker merges under its lock. QueuesNotEmpty (409) when fewer queues would hide messages, AlreadyExists."""
        body: dict[str, object] = {
            "default_queues": created_as.write_queues,
            "default_message_type": created_as.message_type.value,
            "create_only": create_only,
        }
        if queues is not None:
            body |= {"read_queues": queues, "write_queues": queues}
        if message_type is not None:
            body["message_type"] = message_type.value
        path = internal_path("/internal/topics/{topic}", topic=topic)
        return BrokerTopic.model_validate(await self._json(broker, address, "PUT", path, body))

    async def get_topic(self, broker: str, address: str, topic: str) -> BrokerTopic:
        return BrokerTopic.model_validate(
            await self._json(broker, address, "GET", internal_path("/internal/topics/{topic}", topic=topic))
        )

    async def delete_topic(self, broker: str, address: str, topic: str) -> None:
        await self._json(broker, address, "DELETE", internal_path("/internal/topics/{topic}", topic=topic))

    async def topic_offsets(self, broker: str, address: str, topic: str) -> TopicOffsets:
        """Min and max offset of every queue of the topic, and a schedule queue's end when the broker started."""
        return TopicOffsets.model_validate(
            await self._json(broker, address, "GET", internal_path("/internal/topics/{topic}/offsets", topic=topic))
        )

    async def queue_offsets(
        self, broker: str, address: str, topic: str, queue_id: int, timestamp: int | None = None
    ) -> QueueOffsets:
        """One queue's min and max offset; with `timestamp` (ms), the first offset stored at or after it."""
        path = internal_path("/internal/topics/{topic}/queues/{queue_id}/offsets", topic=topic, queue_id=queue_id)
        params = {"timestamp": timestamp} if timestamp is not None else None
        return QueueOffsets.model_validate(await self._json(broker, address, "GET", path, params=params))

    # ---- messages ----------------------------------------------------------------------------

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
        self, broker: str, address: str, topic: str, queue_id: int, params: Mapping[str, str | int], wait_ms: int = 0
    ) -> PulledBatch:
        """Records of one queue from params' offset (at most params' max), waiting up to wait_ms for the first."""
        path = internal_path("/internal/topics/{topic}/queues/{queue_id}/messages", topic=topic, queue_id=queue_id)
        timeout = self._waiting(wait_ms)
        if wait_ms <= 0:
            response = await self._binary(broker, address, "GET", path, params=params, timeout=timeout)
            return PulledBatch.read(response.body, response.headers)
        with self.long_polls.hold():
            response = await self._binary(broker, address, "GET", path, params=params, timeout=timeout, waiting=True)
        return PulledBatch.read(response.body, response.headers)

    async def query_key(self, broker: str, address: str, params: Mapping[str, str | int]) -> KeyQueryAnswer:
        response = await self._binary(broker, address, "GET", "/internal/messages", params=params)
        return KeyQueryAnswer.read(response.body, response.headers)

    async def trace(self, broker: str, address: str, message_id: str, params: Mapping[str, str | int]) -> TraceAnswer:
        path = internal_path("/internal/messages/by-id/{message_id}/trace", message_id=message_id)
        return TraceAnswer.model_validate(await self._json(broker, address, "GET", path, params=params))

    async def query_id(self, broker: str, address: str, message_id: str, params: Mapping[str, str | int]) -> bytes:
        path = internal_path("/internal/messages/by-id/{message_id}", message_id=message_id)
        return (await self._binary(broker, address, "GET", path, params=params)).body

    async def record(self, broker: str, address: str, physical_offset: int) -> MessageRecord:
        """The record stored at this CommitLog offset."""
        response = await self._binary(
            broker,
            address,
            "GET",
            internal_path("/internal/commitlog/{physical_offset}", physical_offset=physical_offset),
        )
        return decode_record(response.body)

    async def progress(self, broker: str, address: str, group: str, topic: str, queue_id: int = 0) -> int | None:
        """The group's committed offset of one queue, if any."""
        answer = await self._json(
            broker, address, "GET", internal_path("/internal/consumer-offsets/{group}", group=group)
        )
        return next((o["offset"] for o in answer["offsets"] if o["topic"] == topic and o["queue_id"] == queue_id), None)

    async def commit_progress(
        self, broker: str, address: str, group: str, topic: str, offset: int, queue_id: int = 0
    ) -> None:
        path = internal_path(
            "/internal/consumer-offsets/{group}/{topic}/{queue_id}", group=group, topic=topic, queue_id=queue_id
        )
        await self._json(broker, address, "PUT", path, {"offset": offset})

    # ---- consumer groups ---------------------------------------------------------------------

    async def put_group(
        self,
        broker: str,
        address: str,
        group: str,
        update: GroupUpdate,
        *,
        created_as: GroupUpdate | None = None,
        create_only: bool = False,
    ) -> GroupConfigAnswer:
        """The group as stored; its `created` says whether this broker created it (rather than updated it).

        Only the fields `update` was given are sent: the broker changes those and keeps the rest. A broker that
        lacks the group creates it from `created_as` (the group as the others hold it; None: the defaults).
        """
        body = update.model_dump(mode="json", exclude_unset=True)
        if created_as is not None:
            body["created_as"] = created_as.model_dump(mode="json")
        path = internal_path("/internal/groups/{group}", group=group)
        params = {"create_only": "true"} if create_only else None
        return GroupConfigAnswer.model_validate(await self._json(broker, address, "PUT", path, body, params=params))

    async def get_group(self, broker: str, address: str, group: str) -> GroupConfigAnswer:
        return GroupConfigAnswer.model_validate(
            await self._json(broker, address, "GET", internal_path("/internal/groups/{group}", group=group))
        )

    async def list_groups(self, broker: str, address: str) -> list[GroupConfigAnswer]:
        return GroupConfigList.model_validate(await self._json(broker, address, "GET", "/internal/groups")).groups

    async def delete_group(self, broker: str, address: str, group: str) -> None:
        await self._json(broker, address, "DELETE", internal_path("/internal/groups/{group}", group=group))

    async def receive(
        self, broker: str, address: str, group: str, topic: str, body: Mapping[str, Any]
    ) -> tuple[list[Lease], memoryview]:
        """Leased messages: one lease per record, in order (none when nothing came within body's wait_ms)."""
        path = internal_path("/internal/groups/{group}/topics/{topic}/receive", group=group, topic=topic)
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
        path = internal_path("/internal/groups/{group}/topics/{topic}/ready", group=group, topic=topic)
        wait_ms = int(params["wait_ms"])
        answer = await self._json(
            broker, address, "GET", path, params=params, timeout=self._waiting(wait_ms), waiting=wait_ms > 0
        )
        return bool(answer["ready"])

    async def ack(self, broker: str, address: str, group: str, handles: list[str]) -> list[dict[str, Any]]:
        """One result per handle, in order (HandleResult's fields)."""
        body = {"receipt_handles": handles}
        return list(
            (
                await self._json(
                    broker, address, "POST", internal_path("/internal/groups/{group}/ack", group=group), body
                )
            )["results"]
        )

    async def nack(self, broker: str, address: str, group: str, body: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One result per handle of body's receipt_handles, in order (HandleResult's fields)."""
        return list(
            (
                await self._json(
                    broker, address, "POST", internal_path("/internal/groups/{group}/nack", group=group), body
                )
            )["results"]
        )

    async def change_visibility(
        self, broker: str, address: str, group: str, handle: str, invisible_ms: int
    ) -> dict[str, Any]:
        body = {"receipt_handle": handle, "invisible_ms": invisible_ms}
        return dict(
            await self._json(
                broker, address, "POST", internal_path("/internal/groups/{group}/visibility", group=group), body
            )
        )

    async def lag(self, broker: str, address: str, group: str) -> list[dict[str, Any]]:
        return list(
            (await self._json(broker, address, "GET", internal_path("/internal/groups/{group}/lag", group=group)))[
                "queues"
            ]
        )

    async def overview(self, broker: str, address: str) -> BrokerOverview:
        return BrokerOverview.model_validate(await self._json(broker, address, "GET", "/internal/overview"))

    async def lag_history(self, broker: str, address: str, group: str) -> dict[str, Any]:
        """The broker's samples of the group's lag (libs.broker_api.consume.LagHistoryAnswer's fields)."""
        path = internal_path("/internal/groups/{group}/lag/history", group=group)
        return dict(await self._json(broker, address, "GET", path))

    async def reset_offsets(
        self, broker: str, address: str, group: str, topic: str, body: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        path = internal_path("/internal/groups/{group}/topics/{topic}/offsets:reset", group=group, topic=topic)
        return list((await self._json(broker, address, "POST", path, body))["queues"])

    async def dead_letters(self, broker: str, address: str, group: str, offset: int, max: int) -> PulledBatch:
        params = {"offset": offset, "max": max}
        response = await self._binary(
            broker, address, "GET", internal_path("/internal/groups/{group}/dlq", group=group), params=params
        )
        return PulledBatch.read(response.body, response.headers)

    async def redrive(self, broker: str, address: str, group: str, request: RedriveBody) -> dict[str, Any]:
        """The broker sends dead letters back at request.per_second: the call lasts as long as that takes."""
        path = internal_path("/internal/groups/{group}/dlq:redrive", group=group)
        count = min(request.max_messages, len(request.message_ids or ()) or request.max_messages)
        timeout = self._waiting(int(count / request.per_second * 1000))
        return dict(await self._json(broker, address, "POST", path, request.model_dump(), timeout=timeout))

    # ---- transactions ------------------------------------------------------------------------

    async def end_transactions(
        self, broker: str, address: str, ends: list[dict[str, Any]]
    ) -> list[dict[str, Any] | PetrelError]:
        """End many ({"message_id", "outcome": COMMIT or ROLLBACK, "by"}, and "half_offset" when the transaction id
        carries one); per end, the broker's answer or refusal."""
        answer = await self._json(
            broker, address, "POST", "/internal/transactions:end", {"ends": ends}, idempotent=True
        )
        return [_ended_or_refused(r) for r in answer["results"]]

    async def end_transaction(
        self, broker: str, address: str, message_id: str, outcome: str, by: str
    ) -> dict[str, Any]:
        """Commit or roll back one (`outcome` COMMIT or ROLLBACK); TransactionAlreadyEnded when ended the other way."""
        verb = "commit" if outcome == "COMMIT" else "rollback"
        path = internal_path("/internal/transactions/{message_id}/{verb}", message_id=message_id, verb=verb)
        return dict(await self._json(broker, address, "POST", path, {"by": by}))

    async def get_transaction(self, broker: str, address: str, message_id: str) -> dict[str, Any]:
        return dict(
            await self._json(
                broker, address, "GET", internal_path("/internal/transactions/{message_id}", message_id=message_id)
            )
        )

    async def list_transactions(
        self, broker: str, address: str, state: str, max: int, after: str = ""
    ) -> list[dict[str, Any]]:
        params: dict[str, str | int] = {"state": state, "max": max, "after": after}
        return list((await self._json(broker, address, "GET", "/internal/transactions", params=params))["transactions"])

    async def checked(
        self, broker: str, address: str, message_id: str, physical_offset: int, *, defer: bool = False
    ) -> dict[str, Any]:
        """A check-back of this half copy was sent (or, with defer, is not due yet): renew it; its state."""
        path = internal_path("/internal/transactions/{message_id}/checked", message_id=message_id)
        return dict(
            await self._json(broker, address, "POST", path, {"physical_offset": physical_offset, "defer": defer})
        )

    # ---- the timer service's calls -----------------------------------------------------------

    async def units(
        self, broker: str, address: str, topic: str, queue_id: int, offset: int, count: int
    ) -> list[DueUnit]:
        """ConsumeQueue units of one queue from `offset` (a schedule queue's: due times and message ids, no bodies)."""
        path = internal_path("/internal/topics/{topic}/queues/{queue_id}/units", topic=topic, queue_id=queue_id)
        params: dict[str, str | int] = {"offset": offset, "max": count, "ids": "true"}
        response = await self._binary(broker, address, "GET", path, params=params)
        return read_units(response.body, response.headers)

    async def deliver(
        self, broker: str, address: str, physical_offsets: list[int], expected: list[ExpectedRecord]
    ) -> list[dict[str, Any]]:
        """Deliver due messages, each checked to be the message expected; one result per offset (DeliveryResult's)."""
        body = {"physical_offsets": physical_offsets, "expected": [e.model_dump() for e in expected]}
        return list((await self._json(broker, address, "POST", "/internal/timers/deliveries", body))["results"])

    async def report(
        self, broker: str, address: str, levels: dict[int, int], timer: int, wheel_offset: int | None
    ) -> tuple[int, int]:
        """Tell the broker what the timer still needs (as of its checkpoint); (roll below, log start)."""
        body = {"levels": {str(q): o for q, o in levels.items()}, "timer": timer, "wheel_offset": wheel_offset}
        answer = await self._json(broker, address, "POST", "/internal/timers/progress", body)
        return int(answer["roll_below"]), int(answer["log_start"])

    async def roll(
        self, broker: str, address: str, physical_offsets: list[int], expected: list[ExpectedRecord]
    ) -> list[dict[str, Any]]:
        """Re-put pending messages at the log's end, each checked to be the message expected; one result per
        offset (RollResult's fields)."""
        body = {"physical_offsets": physical_offsets, "expected": [e.model_dump() for e in expected]}
        return list((await self._json(broker, address, "POST", "/internal/timers/rolls", body))["results"])


@contextlib.contextmanager
def _naming(broker: str, address: str) -> Iterator[None]:
    """A transport failure as BrokerUnavailable naming the broker (a FlushTimeout stays one, as does a refusal
    that says `maybe_stored`, a replication-timeout: the records are, or may be, stored)."""
    try:
        yield
    except FlushTimeout:
        raise
    except ServiceUnavailable as exc:
        if exc.extensions.get("maybe_stored"):
            raise
        raise BrokerUnavailable(f"broker {broker} at {address} did not answer: {exc.detail}", broker=broker) from exc


def _ended_or_refused(result: dict[str, Any]) -> dict[str, Any] | PetrelError:
    failure = result.get("failure")
    if failure is None:
        return dict(result["ended"])
    cls = PetrelError.from_problem_type(failure["type"]) or PetrelError
    return cls.rebuild(failure["detail"], dict(failure.get("extensions") or {}))
