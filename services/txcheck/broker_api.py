"""BrokerApi: txcheck's synchronous calls to nameservers and brokers (Celery tasks are plain functions).

httpx's pooled sync client, with the cluster's internal token. A peer's
problem+json comes back as the same `PetrelError` subclass (as with the async
internal client); a connection that fails, times out or a peer that answers 503
is `BrokerUnavailable` (or `NameserverUnavailable`), the errors a check task
retries.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Any

import httpx

from libs import jsonutil
from libs.codec import decode_record, iter_records
from libs.errors import BrokerUnavailable, NameserverUnavailable, PetrelError, ServiceUnavailable
from libs.http.client import error_for_response
from libs.http.middleware import INTERNAL_TOKEN_HEADER
from libs.message import MessageRecord
from libs.routing import MASTER_ID, ClusterListing
from services.broker.messages import MAX_OFFSET, MIN_OFFSET, NEXT_OFFSET

log = logging.getLogger(__name__)

JSON = {"content-type": "application/json"}


@dataclass(frozen=True, slots=True)
class Broker:
    name: str
    address: str


@dataclass(frozen=True, slots=True)
class Pulled:
    records: list[MessageRecord]
    next_offset: int
    min_offset: int
    max_offset: int


def open_http(timeout: float, token: str | None, max_connections: int = 64) -> httpx.Client:
    headers = {INTERNAL_TOKEN_HEADER: token} if token else {}
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    return httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout, 1.0)), headers=headers, limits=limits)


class BrokerApi:
    def __init__(self, http: httpx.Client, nameservers: list[str]) -> None:
        self.http = http
        self.nameservers = list(nameservers)

    # ---- nameservers -------------------------------------------------------------------------

    def brokers(self) -> list[Broker]:
        """Every live broker (its master's address), from the first nameserver that answers."""
        failures = []
        for address in random.sample(self.nameservers, len(self.nameservers)):
            try:
                answer = self._call("GET", f"http://{address}/internal/clusters", unavailable=NameserverUnavailable)
            except NameserverUnavailable as exc:
                failures.append(exc.detail)
                continue
            listing = ClusterListing.model_validate_json(answer.content)
            return sorted(
                (
                    Broker(broker.broker_name, instance.address)
                    for cluster in listing.clusters
                    for broker in cluster.brokers
                    for instance in broker.instances
                    if instance.broker_id == MASTER_ID
                ),
                key=lambda b: b.name,
            )
        raise NameserverUnavailable("no nameserver answered: " + "; ".join(failures))

    # ---- queues and progress -----------------------------------------------------------------

    def pull(self, broker: Broker, topic: str, offset: int, count: int) -> Pulled:
        response = self._call(
            "GET",
            f"http://{broker.address}/internal/topics/{topic}/queues/0/messages",
            params={"offset": offset, "max": count},
        )
        headers = response.headers
        return Pulled(
            list(iter_records(response.content)),
            int(headers[NEXT_OFFSET]),
            int(headers[MIN_OFFSET]),
            int(headers[MAX_OFFSET]),
        )

    def progress(self, broker: Broker, group: str, topic: str) -> int | None:
        """The group's committed offset of the topic's queue 0 on this broker, if any."""
        answer = self._json("GET", f"http://{broker.address}/internal/consumer-offsets/{group}")
        return next((o["offset"] for o in answer["offsets"] if o["topic"] == topic and o["queue_id"] == 0), None)

    def commit_progress(self, broker: Broker, group: str, topic: str, offset: int) -> None:
        self._json("PUT", f"http://{broker.address}/internal/consumer-offsets/{group}/{topic}/0", {"offset": offset})

    # ---- transactions ------------------------------------------------------------------------

    def record(self, broker: Broker, physical_offset: int) -> MessageRecord:
        return decode_record(self._call("GET", f"http://{broker.address}/internal/commitlog/{physical_offset}").content)

    def transaction(self, broker: Broker, message_id: str) -> dict[str, Any]:
        return dict(self._json("GET", f"http://{broker.address}/internal/transactions/{message_id}"))

    def checked(self, broker: Broker, message_id: str, physical_offset: int, *, defer: bool = False) -> dict[str, Any]:
        url = f"http://{broker.address}/internal/transactions/{message_id}/checked"
        return dict(self._json("POST", url, {"physical_offset": physical_offset, "defer": defer}))

    def end(self, broker: Broker, message_id: str, outcome: str, by: str) -> dict[str, Any]:
        """Commit or roll back (`outcome` COMMIT or ROLLBACK); TransactionAlreadyEnded when ended the other way."""
        verb = "commit" if outcome == "COMMIT" else "rollback"
        return dict(
            self._json("POST", f"http://{broker.address}/internal/transactions/{message_id}/{verb}", {"by": by})
        )

    # ---- transport ---------------------------------------------------------------------------

    def _json(self, method: str, url: str, body: object = None) -> Any:
        content = None if body is None else jsonutil.dumps(body)
        response = self._call(method, url, content=content, headers=JSON if content is not None else None)
        return jsonutil.loads(response.content) if response.content else None

    def _call(
        self,
        method: str,
        url: str,
        *,
        params: dict[str, int] | None = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        unavailable: type[ServiceUnavailable] = BrokerUnavailable,
    ) -> httpx.Response:
        try:
            response = self.http.request(method, url, params=params, content=content, headers=headers)
        except httpx.TransportError as exc:
            raise unavailable(f"{method} {url} failed: {exc!r}") from exc
        if response.status_code < 400:
            return response
        error: PetrelError = error_for_response(
            method, url, response.status_code, response.headers.get("content-type", ""), response.content
        )
        if response.status_code == 503 and not isinstance(error, ServiceUnavailable):
            error = unavailable(f"{method} {url} answered 503: {error.detail}")
        raise error
