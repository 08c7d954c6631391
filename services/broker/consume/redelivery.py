"""The copies of a failed message: to the group's retry topic, or to its dead-letter topic.

As RocketMQ's CONSUMER_SEND_MSG_BACK: the stored message is copied under a new
topic with its message id (UNIQ_KEY), body, tag, keys and properties unchanged,
its original topic in RETRY_TOPIC and `reconsume_times` counting the failed
attempts. A retry copy carries a delay (a level or exact milliseconds), so the
broker stores it in a schedule queue and the timer service hands it to the
retry queue when due; a copy without delay goes to the retry queue at once.

Retry and dead-letter copies carry a DEDUP token of the failed attempt (`attempt_token`):
a put of one that the store answered late (a SYNC_FLUSH flush timeout: stored, not
confirmed) or that is made again never stores a second copy, while every other attempt,
a redriven message's included, gets its own.
"""

from __future__ import annotations

from dataclasses import replace

from libs.codec import encode_record
from libs.delay import SCHEDULING_PROPERTIES
from libs.message import MessageRecord, Prop
from services.broker.schedule import schedule_batch

MAX_REASON_LENGTH = 1024


def original_topic(record: MessageRecord) -> str:
    return record.properties.get(Prop.RETRY_TOPIC, record.topic)


def attempt_token(group: str, record: MessageRecord, attempt: int) -> str:
    """The DEDUP token of the copy made when `attempt` at the stored `record` failed in `group`."""
    return f"{group}:{record.physical_offset}:{attempt}"


def _base_properties(record: MessageRecord) -> dict[str, str]:
    properties = {k: v for k, v in record.properties.items() if k not in SCHEDULING_PROPERTIES and k != Prop.DEDUP}
    properties[Prop.RETRY_TOPIC] = original_topic(record)
    if record.message_id is not None:
        properties.setdefault(Prop.ORIGIN_MESSAGE_ID, record.message_id)
    return properties


def retry_copy(
    record: MessageRecord,
    retry_topic: str,
    queue_id: int,
    failed_attempts: int,
    delay_level: int | None,
    delay_ms: int | None,
    now_ms: int,
    token: str,
) -> MessageRecord:
    """The message as it goes back to the group after `failed_attempts` failures; `token`: its DEDUP."""
    properties = _base_properties(record) | {Prop.DEDUP: token}
    properties.pop(Prop.DLQ_REASON, None)
    if delay_level is not None:
        properties[Prop.DELAY_LEVEL] = str(delay_level)
    elif delay_ms:
        properties[Prop.TIMER_DELIVER_MS] = str(now_ms + delay_ms)
    return _fresh(record, retry_topic, queue_id, properties, failed_attempts)


def dead_letter_copy(record: MessageRecord, dlq_topic: str, attempts: int, reason: str, token: str) -> MessageRecord:
    """The message as kept in the group's DLQ: `reconsume_times` + 1 is the attempts made; `token`: its DEDUP."""
    properties = _base_properties(record) | {Prop.DEDUP: token}
    properties[Prop.DLQ_REASON] = reason[:MAX_REASON_LENGTH]
    return _fresh(record, dlq_topic, 0, properties, attempts - 1)


def redriven_copy(record: MessageRecord, retry_topic: str, queue_id: int) -> MessageRecord:
    """A dead letter sent back to its group: a fresh start, no attempts counted, no DEDUP (a redrive is asked for)."""
    properties = _base_properties(record)
    properties.pop(Prop.DLQ_REASON, None)
    return _fresh(record, retry_topic, queue_id, properties, 0)


def _fresh(
    record: MessageRecord, topic: str, queue_id: int, properties: dict[str, str], reconsume_times: int
) -> MessageRecord:
    return replace(
        record,
        topic=topic,
        queue_id=queue_id,
        properties=properties,
        reconsume_times=reconsume_times,
        queue_offset=0,
        physical_offset=0,
        store_timestamp=0,
    )


def put_body(copy: MessageRecord, levels: tuple[int, ...], now_ms: int) -> bytes:
    """The copy encoded for MessageStore.put, moved to its schedule queue when it carries a delay."""
    body = encode_record(copy)
    if Prop.DELAY_LEVEL in copy.properties or Prop.TIMER_DELIVER_MS in copy.properties:
        body, _ = schedule_batch(body, levels, now_ms)
    return body
