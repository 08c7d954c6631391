"""`/v1/keys`: create, list, describe and revoke API keys (an unrestricted admin key's calls)."""

from __future__ import annotations

import asyncio
import functools
from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from gateway.auth.audit import audit
from gateway.auth.principal import principal_of
from gateway.auth.route import AuthorizedRoute
from gateway.auth.schemas import CreatedKey, KeyInfo, KeyList, KeyRequest
from gateway.context import Context
from libs.auth.keys import KEY_ID_PATTERN, KeyNotFound
from libs.errors import InvalidRequest, ValidationFailed
from libs.problem import problem_responses

router = APIRouter(prefix="/v1/keys", tags=["keys"], route_class=AuthorizedRoute)

KeyId = Annotated[str, Path(pattern=KEY_ID_PATTERN, description="the key's public id")]


@router.post(
    "",
    operation_id="createKey",
    response_model=CreatedKey,
    status_code=201,
    responses=problem_responses(InvalidRequest, ValidationFailed),
)
async def create_key(ctx: Context, spec: KeyRequest, request: Request) -> CreatedKey:
    """Create a key; the answer's `key` is shown once. It works on this gateway at once, on others within seconds.

    It is never wider than the key that makes it: each allow grant lies within one of the maker's, the maker's
    deny grants are added, and its rate is at most the maker's (403 naming what is wider). With auth off it is
    made as asked."""
    principal = principal_of(request)
    if principal.key_id is None:  # auth off: whoever reaches the gateway holds everything anyway
        made = functools.partial(ctx.keys.create, created_by="gateway (auth off)")
    else:
        made = functools.partial(ctx.keys.create_by, principal.key_id, default_rate=ctx.settings.key_rate_per_second)
    key, text = await asyncio.to_thread(made, spec.name, spec.allow, spec.deny, rate_per_second=spec.rate_per_second)
    if ctx.key_directory is not None:
        ctx.key_directory.put(key)
    audit(request, "key_created", 201, principal, resource=key.key_id, reason=f"name {key.name}")
    return CreatedKey(**KeyInfo.of(key).model_dump(), key=text)


@router.get("", operation_id="listKeys", response_model=KeyList)
async def list_keys(ctx: Context) -> KeyList:
    """Every key, revoked ones included (with `revoked_at`); never a secret."""
    return KeyList(keys=[KeyInfo.of(key) for key in await asyncio.to_thread(ctx.keys.list_keys)])


@router.get(
    "/{key_id}",
    operation_id="getKey",
    response_model=KeyInfo,
    responses=problem_responses(KeyNotFound, ValidationFailed),
)
async def get_key(ctx: Context, key_id: KeyId) -> KeyInfo:
    return KeyInfo.of(await asyncio.to_thread(ctx.keys.get, key_id))


@router.delete(
    "/{key_id}",
    operation_id="revokeKey",
    status_code=204,
    responses=problem_responses(KeyNotFound, ValidationFailed),
)
async def revoke_key(ctx: Context, key_id: KeyId, request: Request) -> Response:
    """Revoke: refused on this gateway at once, on every other within seconds. Repeating it is harmless."""
    key = await asyncio.to_thread(ctx.keys.revoke, key_id)
    if ctx.key_directory is not None:
        ctx.key_directory.put(key)
    audit(request, "key_revoked", 204, principal_of(request), resource=key_id, reason=f"name {key.name}")
    return Response(status_code=204)
