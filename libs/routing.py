"""The wire schemas of routing: broker registration and topic routes.

Brokers send `BrokerRegistration` to every nameserver; the gateway reads
`TopicRoute`s back. These are HTTP-edge models shared by the three services.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from libs.names import validate_topic_name
from libs.topic import MAX_QUEUES, MessageType, Perm, TopicConfig

_BROKER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_ADDRESS = re.compile(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):\d{1,5}")

MASTER_ID = 0


def check_address(value: str) -> str:
    if not _ADDRESS.fullmatch(value) or not 0 < int(value.rsplit(":", 1)[1]) < 65536:
        raise ValueError(f"address {value!r} is not host:port")
    return value


def check_broker_name(value: str) -> str:
    if not _BROKER_NAME.fullmatch(value):
        raise ValueError(f"broker name {value!r} must be 1-64 characters from A-Z a-z 0-9 _ . -")
    return value


class TopicConfigBody(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    read_queues: int = Field(ge=0, le=MAX_QUEUES)
    write_queues: int = Field(ge=0, le=MAX_QUEUES)
    perm: int = Field(default=Perm.READ_WRITE, ge=0, le=7)
    message_type: MessageType = MessageType.NORMAL

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        try:
            return validate_topic_name(value, allow_system=True)
        except Exception as exc:
            raise ValueError(str(exc)) from exc

    @classmethod
    def of(cls, config: TopicConfig) -> TopicConfigBody:
        return cls(
            name=config.name,
            read_queues=config.read_queues,
            write_queues=config.write_queues,
            perm=config.perm,
            message_type=config.message_type,
        )

    def to_config(self) -> TopicConfig:
        return TopicConfig(self.name, self.read_queues, self.write_queues, self.perm, self.message_type)


MAX_TOPICS_PER_REQUEST = 100_000
"""Of one registration or one change; a broker sends a larger table in pages (REGISTRATION_PAGE topics)."""
REGISTRATION_PAGE = 5_000


class BrokerRegistration(BaseModel):
    """A broker's full state at `data_version`: replaces what the nameserver held of it.

    A broker with more than REGISTRATION_PAGE topics sends the first page here and
    the rest as TopicChanges from and to the same data_version.
    """

    model_config = ConfigDict(extra="forbid")

    cluster: str = Field(min_length=1, max_length=64)
    address: str
    data_version: int = Field(ge=0, description="increases on every topic change")
    topics: list[TopicConfigBody] = Field(max_length=MAX_TOPICS_PER_REQUEST)
    master: bool | None = Field(
        default=None,
        description="it takes its broker name's writes (default: broker id 0 does, as without a controller)",
    )
    epoch: int = Field(
        default=0, ge=0, description="the controller's epoch it is master at: of two masters the higher epoch wins"
    )

    _address = field_validator("address")(check_address)


class TopicChanges(BaseModel):
    """What changed in a broker's topics from `from_version` to `data_version`: only that is sent.

    Applied only when the nameserver holds exactly `from_version` of the broker;
    otherwise it answers `in_sync: false` and the broker registers in full.
    """

    model_config = ConfigDict(extra="forbid")

    from_version: int = Field(ge=0)
    data_version: int = Field(ge=0)
    updated: list[TopicConfigBody] = Field(default_factory=list, max_length=MAX_TOPICS_PER_REQUEST)
    """Topics created or changed (their whole configuration)."""
    removed: list[str] = Field(default_factory=list, max_length=MAX_TOPICS_PER_REQUEST)


class RegistrationAck(BaseModel):
    broker_name: str
    broker_id: int
    data_version: int
    expires_after_ms: int


class Heartbeat(BaseModel):
    model_config = ConfigDict(extra="forbid")

    data_version: int = Field(ge=0)


class HeartbeatAck(BaseModel):
    known: bool = Field(description="false: the nameserver has forgotten this broker; register again")
    in_sync: bool = Field(description="false: the nameserver holds another data_version; register again")


class QueueData(BaseModel):
    broker_name: str
    read_queues: int
    write_queues: int
    perm: int
    message_type: MessageType


class BrokerData(BaseModel):
    cluster: str
    broker_name: str
    addresses: dict[int, str] = Field(description="broker id -> host:port of each live instance")
    master_id: int | None = Field(
        default=MASTER_ID, description="which of them is the master (id 0 unless a controller promoted another)"
    )
    epoch: int = Field(default=0, description="the controller's epoch of that master (0: no controller)")

    @property
    def master(self) -> str | None:
        return None if self.master_id is None else self.addresses.get(self.master_id)

    @property
    def reader(self) -> str | None:
        """Where reads go: the master, else (the master gone) its slave of the lowest id, which has its log."""
        if self.master is not None:
            return self.master
        slaves = [i for i in self.addresses if i != self.master_id]
        return self.addresses[min(slaves)] if slaves else None


class TopicRoute(BaseModel):
    topic: str
    queues: list[QueueData]
    brokers: list[BrokerData]

    def broker(self, broker_name: str) -> BrokerData | None:
        return next((b for b in self.brokers if b.broker_name == broker_name), None)


class TopicRouteList(BaseModel):
    routes: list[TopicRoute]


class BrokerLiveness(BaseModel):
    broker_id: int
    address: str
    master: bool = Field(default=False, description="the one instance that takes its broker name's writes")
    epoch: int = 0
    data_version: int
    last_update_ms: int


class ClusterBroker(BaseModel):
    broker_name: str
    instances: list[BrokerLiveness]

    @property
    def master(self) -> BrokerLiveness | None:
        return next((i for i in self.instances if i.master), None)

    @property
    def reader(self) -> BrokerLiveness | None:
        """The master, else its slave of the lowest id (which has its log)."""
        return self.master or (min(self.instances, key=lambda i: i.broker_id) if self.instances else None)


class ClusterInfo(BaseModel):
    name: str
    brokers: list[ClusterBroker]


class ClusterListing(BaseModel):
    clusters: list[ClusterInfo]
