"""Petrel's one exception tree; each class is a stable RFC 9457 problem type.

    PetrelError                        500 internal-error
     ├── InvalidRequest                400 invalid-request
     │    ├── MalformedBody            400 malformed-body
     │    ├── InvalidTopicName         400 invalid-topic-name
     │    ├── ReservedTopicName        400 reserved-topic-name
     │    ├── InvalidMessage           400 invalid-message
     │    ├── InvalidFilter            400 invalid-filter
     │    ├── InvalidReceiptHandle     400 invalid-receipt-handle
     │    ├── ForeignReceiptHandle     400 foreign-receipt-handle
     │    └── HostNotAllowed           400 host-not-allowed
     ├── Unauthorized                  401 unauthorized
     ├── Forbidden                     403 forbidden
     │    └── CrossSiteRequest         403 cross-site-request
     ├── NotFound                      404 not-found
     │    ├── TopicNotFound            404 topic-not-found
     │    ├── BrokerNotFound           404 broker-not-found
     │    ├── QueueNotFound            404 queue-not-found
     │    ├── MessageNotFound          404 message-not-found
     │    ├── GroupNotFound            404 group-not-found
     │    ├── ProducerGroupNotFound    404 producer-group-not-found
 │    ├── SubscriptionNotFound     404 subscription-not-found
     │    └── TransactionNotFound      404 transaction-not-found
     ├── RequestHeaderTimeout          408 request-header-timeout
     ├── RequestBodyTimeout            408 request-body-timeout
     ├── AlreadyDelivered              409 already-delivered
     ├── TransactionAlreadyEnded       409 transaction-already-ended
     ├── LeaseEnded                    409 lease-ended
     │    ├── LeaseExpired             409 lease-expired
     │    ├── LeaseSuperseded          409 lease-superseded
     │    ├── LeaseLost                409 lease-lost
     │    └── AlreadyAcked             409 already-acked
     ├── IdempotencyConflict           409 idempotency-key-in-use
     ├── NotMaster                     409 not-master
     ├── ReplicaDiverged               409 replica-diverged
     ├── PayloadTooLarge               413 payload-too-large
     ├── UnsupportedMediaType          415 unsupported-media-type
     ├── OffsetOutOfRange              416 offset-out-of-range
     ├── ValidationFailed              422 validation-failed
     ├── TooManyLongPolls              429 too-many-long-polls
     ├── RateLimited                   429 rate-limited
     ├── RequestHeaderTooLarge         431 request-header-too-large
     ├── CorruptRecord                 500 corrupt-record
     ├── StoreFull                     507 store-full
     ├── StoreReadOnly                 503 store-read-only
     ├── UpstreamError                 502 upstream-error
     └── ServiceUnavailable            503 service-unavailable
          ├── FlushTimeout             503 flush-timeout
          ├── NameserverUnavailable    503 nameserver-unavailable
          └── BrokerUnavailable        503 broker-unavailable
               └── PutQueueFull        503 put-queue-full

A service raises these; `libs.problem` turns them into problem+json in one
place, and `libs.http.client` turns a downstream service's problem+json back
into the same class, so an error crosses service boundaries unchanged.
"""

from __future__ import annotations

from typing import Any, ClassVar

PROBLEM_TYPE_BASE = "https://petrel.dev/problems/"


class PetrelError(Exception):
    status: ClassVar[int] = 500
    slug: ClassVar[str] = "internal-error"
    title: ClassVar[str] = "Internal error"
    by_slug: ClassVar[dict[str, type[PetrelError]]] = {}

    def __init__(self, detail: str, **extensions: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extensions = extensions

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.slug in PetrelError.by_slug:
            raise TypeError(f"problem slug {cls.slug!r} is used twice")
        PetrelError.by_slug[cls.slug] = cls

    @classmethod
    def rebuild(cls, detail: str, extensions: dict[str, Any]) -> PetrelError:
        """The exception a peer described in its problem+json, raised again on this side."""
        exc = cls.__new__(cls)
        PetrelError.__init__(exc, detail, **extensions)
        return exc

    @classmethod
    def problem_type(cls) -> str:
        return PROBLEM_TYPE_BASE + cls.slug

    @staticmethod
    def from_problem_type(problem_type: str) -> type[PetrelError] | None:
        if not problem_type.startswith(PROBLEM_TYPE_BASE):
            return None
        return PetrelError.by_slug.get(problem_type.removeprefix(PROBLEM_TYPE_BASE))


PetrelError.by_slug[PetrelError.slug] = PetrelError


class InvalidRequest(PetrelError):
    status = 400
    slug = "invalid-request"
    title = "Invalid request"


class MalformedBody(InvalidRequest):
    slug = "malformed-body"
    title = "Malformed request body"


class InvalidTopicName(InvalidRequest):
    slug = "invalid-topic-name"
    title = "Invalid topic name"


class ReservedTopicName(InvalidRequest):
    slug = "reserved-topic-name"
    title = "Reserved topic name"


class InvalidMessage(InvalidRequest):
    slug = "invalid-message"
    title = "Invalid message"


class InvalidFilter(InvalidRequest):
    slug = "invalid-filter"
    title = "Invalid filter expression"


class InvalidReceiptHandle(InvalidRequest):
    slug = "invalid-receipt-handle"
    title = "Invalid receipt handle"


class ForeignReceiptHandle(InvalidRequest):
    slug = "foreign-receipt-handle"
    title = "Receipt handle of another group"


class HostNotAllowed(InvalidRequest):
    """A service was called by a Host name it does not answer to (a DNS-rebinding page uses a name), or an open
    gateway through a proxy."""

    slug = "host-not-allowed"
    title = "Host not allowed"


class Unauthorized(PetrelError):
    """No credential, or one that is unknown, forged or revoked: the detail says which."""

    status = 401
    slug = "unauthorized"
    title = "Unauthorized"


class Forbidden(PetrelError):
    """A valid credential without the permission the call needs: the `required` extension names it."""

    status = 403
    slug = "forbidden"
    title = "Forbidden"


class CrossSiteRequest(Forbidden):
    """A browser sent the call for a page of another site (its Origin, or Sec-Fetch-Site: cross-site)."""

    slug = "cross-site-request"
    title = "Cross-site request"


class NotFound(PetrelError):
    status = 404
    slug = "not-found"
    title = "Not found"


class TopicNotFound(NotFound):
    slug = "topic-not-found"
    title = "Topic not found"


class BrokerNotFound(NotFound):
    slug = "broker-not-found"
    title = "Broker not found"


class QueueNotFound(NotFound):
    slug = "queue-not-found"
    title = "Queue not found"


class MessageNotFound(NotFound):
    slug = "message-not-found"
    title = "Message not found"


class GroupNotFound(NotFound):
    slug = "group-not-found"
    title = "Consumer group not found"


class ProducerGroupNotFound(NotFound):
    slug = "producer-group-not-found"
    title = "Producer group not found"


class SubscriptionNotFound(NotFound):
    slug = "subscription-not-found"
    title = "Push subscription not found"


class TransactionNotFound(NotFound):
    slug = "transaction-not-found"
    title = "Transaction not found"


class TransactionAlreadyEnded(PetrelError):
    """Commit after rollback, or the reverse: the `outcome` extension names the first one."""

    status = 409
    slug = "transaction-already-ended"
    title = "Transaction already ended the other way"


class LeaseEnded(PetrelError):
    """The receipt handle's lease is over: the message is no longer this consumer's to ack or nack."""

    status = 409
    slug = "lease-ended"
    title = "Lease ended"


class LeaseExpired(LeaseEnded):
    slug = "lease-expired"
    title = "Lease expired"


class LeaseSuperseded(LeaseEnded):
    slug = "lease-superseded"
    title = "Lease superseded by a newer receipt handle"


class LeaseLost(LeaseEnded):
    slug = "lease-lost"
    title = "Lease lost in a broker restart"


class AlreadyAcked(LeaseEnded):
    slug = "already-acked"
    title = "Already acknowledged"


class UnsupportedMediaType(PetrelError):
    """A body whose Content-Type the route does not take (JSON routes take only application/json)."""

    status = 415
    slug = "unsupported-media-type"
    title = "Unsupported media type"


class OffsetOutOfRange(PetrelError):
    status = 416
    slug = "offset-out-of-range"
    title = "Offset out of range"


class RequestHeaderTimeout(PetrelError):
    status = 408
    slug = "request-header-timeout"
    title = "Request header timeout"


class RequestBodyTimeout(PetrelError):
    """A request body that did not come, or came slower than the minimum rate (libs.http.connection_limits)."""

    status = 408
    slug = "request-body-timeout"
    title = "Request body timeout"


class AlreadyDelivered(PetrelError):
    status = 409
    slug = "already-delivered"
    title = "Already delivered"


class QueuesNotEmpty(PetrelError):
    """A topic's queues would shrink while a queue to be removed still holds messages within retention."""

    status = 409
    slug = "queues-not-empty"
    title = "Queues not empty"


class AlreadyExists(PetrelError):
    """A create-only PUT (`If-None-Match: *`) of something that exists."""

    status = 412
    slug = "already-exists"
    title = "Already exists"


class IdempotencyConflict(PetrelError):
    status = 409
    slug = "idempotency-key-in-use"
    title = "Idempotency key in use"


class NotMaster(PetrelError):
    """A write asked of a slave broker: only its broker name's master takes writes."""

    status = 409
    slug = "not-master"
    title = "Not the master"


class ReplicaDiverged(PetrelError):
    """A slave's log and its master's disagree where a chunk of replication would go."""

    status = 409
    slug = "replica-diverged"
    title = "Replica diverged"


class PayloadTooLarge(PetrelError):
    status = 413
    slug = "payload-too-large"
    title = "Payload too large"


class ValidationFailed(PetrelError):
    status = 422
    slug = "validation-failed"
    title = "Validation failed"


class TooManyLongPolls(PetrelError):
    """As many long polls wait as the gateway holds at once: ask again later, or without a wait."""

    status = 429
    slug = "too-many-long-polls"
    title = "Too many long polls"


class RateLimited(PetrelError):
    """The key made more calls than its rate allows: the `retry_after` extension (seconds) says when to ask again."""

    status = 429
    slug = "rate-limited"
    title = "Rate limited"


class RequestHeaderTooLarge(PetrelError):
    status = 431
    slug = "request-header-too-large"
    title = "Request header fields too large"


class CorruptRecord(PetrelError):
    slug = "corrupt-record"
    title = "Corrupt record"

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"record at offset {offset}: {reason}", offset=offset)
        self.offset = offset
        self.reason = reason

    @classmethod
    def rebuild(cls, detail: str, extensions: dict[str, Any]) -> PetrelError:
        offset = int(extensions.get("offset", -1))
        return cls(offset, detail.removeprefix(f"record at offset {offset}: "))


class StoreFull(PetrelError):
    status = 507
    slug = "store-full"
    title = "Store full"


class StoreReadOnly(PetrelError):
    """A sync of the store failed: it takes no more writes until the broker is restarted (reads go on).

    After a failed fsync the kernel may have dropped the dirty pages and will not
    report the loss again, so nothing newer may be acknowledged over them. Not a
    ServiceUnavailable: nothing was stored, and the broker does answer.
    """

    status = 503
    slug = "store-read-only"
    title = "Store read-only until restart"


class UpstreamError(PetrelError):
    status = 502
    slug = "upstream-error"
    title = "Upstream service error"


class ServiceUnavailable(PetrelError):
    status = 503
    slug = "service-unavailable"
    title = "Service unavailable"


class FlushTimeout(ServiceUnavailable):
    """SYNC_FLUSH: stored, but the disk did not confirm it in time. Never a reason to send again.

    Answered with where the message is (`message_id`, `broker`, `queue_id`, `queue_offset`;
    a transaction end: its `outcome`, which stands).
    """

    slug = "flush-timeout"
    title = "Flush timed out"


class NameserverUnavailable(ServiceUnavailable):
    slug = "nameserver-unavailable"
    title = "No nameserver answered"


class BrokerUnavailable(ServiceUnavailable):
    slug = "broker-unavailable"
    title = "Broker unavailable"


class PutQueueFull(BrokerUnavailable):
    """The gateway already holds as many records for this broker as it queues: nothing of this put was sent."""

    slug = "put-queue-full"
    title = "Put queue full"


class StaleEpoch(PetrelError):
    """A broker spoke for an epoch of its broker name that the controller has moved past: it is no longer
    the master it thinks it is (libs.controller_api)."""

    status = 409
    slug = "stale-epoch"
    title = "Stale epoch"


class ReplicationTimeout(ServiceUnavailable):
    """SYNC_MASTER under a controller: stored here, but an in-sync slave did not confirm it in time and the
    controller could not be told that the slave left the in-sync set. Not acknowledged: it may or may not
    survive a failover (a send with an idempotency key can be sent again safely)."""

    slug = "replication-timeout"
    title = "Replication timed out"
