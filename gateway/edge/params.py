"""Path parameters shared by the routers: validated once, named in the handlers' signatures."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from libs.names import validate_group_name


async def _group(group: str) -> str:
    return validate_group_name(group)


GroupName = Annotated[str, Depends(_group)]
"""A consumer group's name, as the `{group}` path parameter."""
