"""The nameserver's path parameters, checked alike by its routes and its controller's."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path

from libs.errors import InvalidRequest
from libs.routing import check_broker_name


async def _broker_name(broker_name: Annotated[str, Path(description="the broker's name")]) -> str:
    try:
        return check_broker_name(broker_name)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc


BrokerName = Annotated[str, Depends(_broker_name)]
BrokerId = Annotated[int, Path(ge=0, le=1024, description="0 is the first master")]
