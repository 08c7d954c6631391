"""Finding a message by its id: when it was born (the id says), and asking every broker for it."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.context import GatewayContext
from libs.errors import MessageNotFound
from libs.message import is_message_id


def id_time(message_id: str) -> int:
    """When the message was born, in ms since the epoch; MessageNotFound for what is not a Petrel message id."""
    if not is_message_id(message_id):
        raise MessageNotFound(f"{message_id!r} is not a Petrel message id (32 hex digits)")
    return int(message_id[:12], 16)


async def ask_every_broker(ctx: GatewayContext, call: Any) -> list[tuple[str, str, bytes]]:
    """(broker, address, answer) of every broker name that answered `call(name, address)` with bytes: its master,
    or, the master gone, its slave."""
    targets = await ctx.nameservers.readers()
    answers = await asyncio.gather(*(call(n, a) for n, a in targets), return_exceptions=True)
    return [(n, a, r) for (n, a), r in zip(targets, answers, strict=True) if isinstance(r, bytes)]
