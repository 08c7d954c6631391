"""Topic configuration as brokers keep it and nameservers route it."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final


class MessageType(enum.StrEnum):
    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"


class Perm:
    """Permission bits of a topic on a broker (RocketMQ's PermName)."""

    READ: Final = 0x4
    WRITE: Final = 0x2
    INHERIT: Final = 0x1
    READ_WRITE: Final = READ | WRITE


MAX_QUEUES: Final = 1024
DEFAULT_QUEUES: Final = 8


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    read_queues: int = DEFAULT_QUEUES
    write_queues: int = DEFAULT_QUEUES
    perm: int = Perm.READ_WRITE
    message_type: MessageType = MessageType.NORMAL

    @property
    def readable(self) -> bool:
        return bool(self.perm & Perm.READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & Perm.WRITE)
