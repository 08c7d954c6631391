"""A public message as the sender takes it: the request model becomes a plain value at the edge."""

from __future__ import annotations

from typing import Any

from gateway.messages.records import OutgoingMessage
from gateway.messages.schemas import MessageContent, SendMessage


def outgoing(message: MessageContent) -> OutgoingMessage:
    """The message's content, and a SendMessage's delay (a transactional message has none)."""
    delays: dict[str, Any] = {}
    if isinstance(message, SendMessage):
        delays = {"delay_level": message.delay_level, "delay_ms": message.delay_ms, "deliver_at": message.deliver_at}
    return OutgoingMessage(
        body=message.body,
        body_base64=message.body_base64,
        tag=message.tag,
        keys=tuple(message.keys),
        properties=dict(message.properties),
        message_group=message.message_group,
        **delays,
    )
