"""CheckBack: asks a transaction's producer for its outcome and ends the transaction on the broker accordingly.

One check (a Celery task runs `CheckBack.check`):

1. the half copy the scan found (the broker's record at its CommitLog offset),
   and its producer group's `checkback_url` and signing secret (the scan
   dispatches checks of open transactions only);
2. POST the check-back request (JSON, signed Standard Webhooks style with the
   group's secret, a fresh `webhook-id` per attempt) and read the answer,
   `{"status": "COMMIT" | "ROLLBACK" | "UNKNOWN"}`. No answer in time, a
   non-2xx, a redirect (not followed), a body past 64 KiB, anything else in
   the body: UNKNOWN. Right before the POST the URL's host is resolved and
   checked again (libs.egress, against DNS rebinding) and the connection goes
   to the address checked; a refused URL is logged and is UNKNOWN too;
3. COMMIT or ROLLBACK ends the transaction (`by: checkback`); one ended
   meanwhile the other way (409) is logged, not an error. UNKNOWN does nothing:
   the renewed half copy is checked again later.

A broker that does not answer raises `ServiceUnavailable`; `check_many` runs
the checks of a task side by side and says which to retry.
"""

from __future__ import annotations

import base64
import enum
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import httpx

from libs import jsonutil, webhooks
from libs.broker_api.transaction_ids import id_of_half
from libs.egress import EgressGuard, checked_request
from libs.errors import (
    InvalidRequest,
    OffsetOutOfRange,
    PetrelError,
    ServiceUnavailable,
    TransactionAlreadyEnded,
    TransactionNotFound,
)
from libs.events.writer import EventWriter
from libs.message import MessageRecord, Prop, SysFlag
from libs.producer_groups import ProducerGroup
from services.txcheck.brokers import Broker, Brokers
from services.txcheck.scan import CheckOrder

log = logging.getLogger(__name__)

USER_AGENT = "petrel-txcheck/1"
MAX_REASON = 200
MAX_ANSWER_BYTES = 64 * 1024


class Answer(enum.StrEnum):
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True, slots=True)
class Reply:
    answer: Answer
    reason: str
    """why the answer is UNKNOWN when the producer did not say so; empty otherwise"""
    latency_ms: int


def checkback_request(record: MessageRecord, broker: str, check_count: int) -> dict[str, Any]:
    """The JSON a producer's check-back endpoint receives."""
    message_id = record.message_id or ""
    request: dict[str, Any] = {
        "transaction_id": id_of_half(broker, record),
        "message_id": message_id,
        "topic": record.properties.get(Prop.REAL_TOPIC, ""),
        "producer_group": record.properties.get(Prop.PRODUCER_GROUP, ""),
        "check_count": check_count,
        "tag": record.tag,
        "keys": record.keys,
        "properties": record.user_properties,
    }
    text = None if record.sysflag & SysFlag.BINARY_BODY else _utf8(record.body)
    if text is None:
        request["body_base64"] = base64.b64encode(record.body).decode()
    else:
        request["body"] = text
    return request


def read_reply(response: httpx.Response) -> tuple[Answer, str]:
    """The producer's answer (its body read up to MAX_ANSWER_BYTES), and why it counts as UNKNOWN when it is
    not a proper one."""
    if not response.is_success:
        return Answer.UNKNOWN, f"answered HTTP {response.status_code}"
    content = bytearray()
    for chunk in response.iter_bytes():
        content += chunk
        if len(content) > MAX_ANSWER_BYTES:
            return Answer.UNKNOWN, f"the answer is longer than {MAX_ANSWER_BYTES} bytes"
    try:
        answer = jsonutil.loads(bytes(content))
    except ValueError:
        return Answer.UNKNOWN, f"the answer is not JSON: {_snippet(content)}"
    status = answer.get("status") if isinstance(answer, dict) else None
    if not isinstance(status, str) or status not in Answer.__members__:
        return Answer.UNKNOWN, f"the answer has no status COMMIT, ROLLBACK or UNKNOWN: {_snippet(content)}"
    return Answer(status), ""


def check_count_of(record: MessageRecord) -> int:
    """This check's number (1 for the first): the half copy counts the checks before it."""
    return int(record.properties.get(Prop.TRANSACTION_CHECK_TIMES, "0") or 0) + 1


class CheckBack:
    def __init__(
        self,
        api: Brokers,
        producer_groups: Callable[[str], ProducerGroup | None],
        http: httpx.Client,
        events: EventWriter,
        timeout: float,
        egress: EgressGuard,
    ) -> None:
        self.api = api
        self.producer_groups = producer_groups
        self.http = http
        self.egress = egress
        self.events = events
        self.timeout = timeout

    def check(self, order: CheckOrder) -> str:
        """Run one check; what came of it: COMMIT, ROLLBACK, UNKNOWN, or GONE when nobody was asked."""
        broker = Broker(order.broker, order.address)
        try:
            record = self.api.record(broker, order.physical_offset)
        except OffsetOutOfRange as exc:  # past retention: so is every copy of it
            log.warning("check of %s: %s", order.message_id, exc.detail)
            return "GONE"
        if record.message_id != order.message_id:
            log.error("check of %s: the record at %d is %s", order.message_id, order.physical_offset, record.message_id)
            return "GONE"
        reply = self.ask(record, broker.name)
        self.events.emit(
            "transaction_check",
            message_id=order.message_id,
            topic=record.properties.get(Prop.REAL_TOPIC, ""),
            transaction_id=id_of_half(broker.name, record),
            check_count=check_count_of(record),
            answer=reply.answer.value,
            latency_ms=reply.latency_ms,
        )
        if reply.answer is Answer.UNKNOWN:
            log.debug("check %d of %s: UNKNOWN (%s)", check_count_of(record), order.message_id, reply.reason or "said")
        else:
            self._end(broker, order.message_id, reply.answer)
        return reply.answer.value

    def check_many(self, orders: Sequence[CheckOrder], pool: Executor) -> tuple[list[str], list[CheckOrder]]:
        """Run the checks side by side; what came of each, and those whose broker did not answer (to retry).

        A check that failed otherwise is logged and not retried: its renewed half copy is checked later.
        """
        outcomes: list[str] = []
        unanswered: list[CheckOrder] = []
        for order, future in [(order, pool.submit(self.check, order)) for order in orders]:
            try:
                outcomes.append(future.result())
            except ServiceUnavailable as exc:
                log.warning("check of %s: %s; will retry", order.message_id, exc.detail)
                unanswered.append(order)
                outcomes.append("RETRY")
            except PetrelError as exc:
                log.error("check of %s failed: %s", order.message_id, exc.detail)
                outcomes.append("FAILED")
        return outcomes, unanswered

    def ask(self, record: MessageRecord, broker: str) -> Reply:
        """POST the signed check-back request to the producer group's endpoint; its answer."""
        name = record.properties.get(Prop.PRODUCER_GROUP, "")
        group = self.producer_groups(name)
        if group is None:
            return Reply(Answer.UNKNOWN, f"no producer group {name!r} is registered", 0)
        try:
            destination = self.egress.check(group.checkback_url)
        except InvalidRequest as exc:
            log.warning("check-back of %s to producer group %r refused: %s", record.message_id, name, exc.detail)
            return Reply(Answer.UNKNOWN, f"refused: {exc.detail}", 0)
        body = jsonutil.dumps(checkback_request(record, broker, check_count_of(record)))
        headers = {"content-type": "application/json", "user-agent": USER_AGENT}
        started = time.monotonic()
        try:
            headers |= webhooks.sign(group.signing_secrets(int(time.time() * 1000)), body)  # both, after a rotation
            request = checked_request(self.http, destination, body, headers, self.timeout)
            response = self.http.send(request, stream=True, follow_redirects=False)
            try:
                answer, reason = read_reply(response)
            finally:
                response.close()
        except (httpx.HTTPError, httpx.InvalidURL, webhooks.WebhookError) as exc:
            answer, reason = Answer.UNKNOWN, f"{group.checkback_url}: {type(exc).__name__}: {exc}"
        return Reply(answer, reason, int((time.monotonic() - started) * 1000))

    def _end(self, broker: Broker, message_id: str, answer: Answer) -> None:
        try:
            ended = self.api.end(broker, message_id, answer.value, by="checkback")
        except TransactionAlreadyEnded as exc:
            log.info("%s answered %s, but it was already ended: %s", message_id, answer.value, exc.detail)
            return
        except TransactionNotFound as exc:
            log.warning("%s answered %s, but the broker no longer has it: %s", message_id, answer.value, exc.detail)
            return
        log.debug("%s: %s by check-back (first: %s)", message_id, answer.value, ended.get("first"))


def _utf8(body: bytes) -> str | None:
    try:
        return body.decode()
    except UnicodeDecodeError:
        return None


def _snippet(content: bytes | bytearray) -> str:
    return repr(content[:MAX_REASON].decode(errors="replace"))
