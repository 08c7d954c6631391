"""A small webhook receiver for trying push subscriptions by hand (`petrel webhook-receiver`).

A push subscription POSTs each message to an endpoint. This one verifies the
Standard Webhooks signature with the subscription's signing secret (several
`--secret`s: any one of them), prints one line per delivery, and answers one
fixed status: 200 acks, 500 fails the attempt, 429 or 503 (with `--retry-after`)
slows the push down, 410 disables the subscription. With `--defer` it answers
202 `Petrel-Ack: deferred` and acks each message later through the gateway's
`/v1/groups/{group}/ack`, with the handle the delivery carried. It reads every
payload format (docs/push.md shows each). It is an example to copy, not a part
of the cluster.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import signal
import socket
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any
from urllib.parse import unquote

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from libs import webhooks
from libs.http.paths import path_segment

RETRY_AFTER_STATUSES = frozenset({429, 503})


@dataclass(frozen=True, slots=True)
class ReceiverOptions:
    secrets: list[str]
    answer: int = 200
    retry_after: int | None = None
    """seconds, sent as Retry-After (with a 429 or 503 answer)"""
    defer_seconds: float | None = None
    """answer 202 Petrel-Ack: deferred and ack this long after, through the gateway (None: don't)"""
    gateway: str = "http://127.0.0.1:8080"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One received POST, whatever its payload format."""

    payload_format: str
    message_id: str
    attempt: str
    topic: str
    group: str
    tag: str | None
    receipt_handle: str
    body: bytes
    text: str | None
    """the body as text, or None for bytes"""

    def line(self) -> str:
        shown = json.dumps(self.text, ensure_ascii=False) if self.text is not None else f"{len(self.body)} bytes"
        return (
            f"{self.message_id} attempt {self.attempt} {self.topic} tag={self.tag or '-'} "
            f"({self.payload_format}): {shown}"
        )


def read_delivery(headers: Mapping[str, str], body: bytes) -> Delivery:
    """The message in a verified POST: told apart by content type (and ce-* headers)."""
    media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type == "application/cloudevents+json":
        payload_format, content, text, tag = "cloudevents-structured", *_structured(json.loads(body))
    elif "ce-specversion" in headers:
        payload_format, content, text = "cloudevents-binary", body, _text(body, media_type)
        tag = _header_text(headers, "ce-subject")
    elif (standard := _standard_webhooks(body, media_type)) is not None:
        payload_format, content, text, tag = "standard-webhooks", *standard
    else:
        payload_format, content, text = "raw", body, _text(body, media_type)
        tag = _header_text(headers, "petrel-tag")
    return Delivery(
        payload_format=payload_format,
        message_id=headers.get("petrel-message-id") or headers.get(webhooks.ID_HEADER, "?"),
        attempt=headers.get("petrel-delivery-attempt", "?"),
        topic=headers.get("petrel-topic", "?"),
        group=headers.get("petrel-group", ""),
        tag=tag,
        receipt_handle=headers.get("petrel-receipt-handle", ""),
        body=content,
        text=text,
    )


def _structured(event: dict[str, Any]) -> tuple[bytes, str | None, str | None]:
    if "data_base64" in event:
        return base64.b64decode(event["data_base64"]), None, event.get("subject")
    data = event.get("data")
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return text.encode(), text, event.get("subject")


def _standard_webhooks(body: bytes, media_type: str) -> tuple[bytes, str | None, str | None] | None:
    if media_type != "application/json":
        return None
    try:
        envelope = json.loads(body)
    except ValueError:
        return None
    if not isinstance(envelope, dict) or envelope.get("type") != "petrel.message":
        return None
    data = envelope["data"]
    if data.get("body_base64") is not None:
        return base64.b64decode(data["body_base64"]), None, data.get("tag")
    return data["body"].encode(), data["body"], data.get("tag")


def _text(body: bytes, media_type: str) -> str | None:
    if media_type == "application/octet-stream":
        return None
    try:
        return body.decode()
    except UnicodeDecodeError:
        return None


def _header_text(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    return unquote(value) if value is not None else None


def refusal(secrets: list[str], headers: Mapping[str, str], body: bytes) -> str | None:
    """Why the POST is not signed by any of `secrets` (None: it is)."""
    reason = "no secret"
    for secret in secrets:
        try:
            webhooks.verify(secret, headers, body)
        except webhooks.VerificationFailed as exc:
            reason = str(exc)
        else:
            return None
    return reason


def create_app(options: ReceiverOptions) -> Starlette:
    """The receiver; a secret that is no signing secret is refused here, not at the first delivery."""
    for secret in options.secrets:
        webhooks.secret_key(secret)
    acks: set[asyncio.Task[None]] = set()
    client = httpx.AsyncClient(base_url=options.gateway, timeout=10.0, trust_env=False)  # no proxy: as Petrel's own

    async def receive(request: Request) -> Response:
        body = await request.body()
        if (reason := refusal(options.secrets, request.headers, body)) is not None:
            print(f"refused {request.headers.get(webhooks.ID_HEADER, '?')}: {reason}", flush=True)
            return JSONResponse({"error": reason}, status_code=401)
        delivery = read_delivery(request.headers, body)
        if options.defer_seconds is not None:
            print(f"{delivery.line()} -> 202 deferred", flush=True)
            task = asyncio.create_task(ack_later(client, delivery, options.defer_seconds))
            acks.add(task)
            task.add_done_callback(acks.discard)
            return Response(status_code=202, headers={"petrel-ack": "deferred"})
        print(f"{delivery.line()} -> {options.answer}", flush=True)
        headers = {"retry-after": str(options.retry_after)} if options.retry_after is not None else {}
        return Response(status_code=options.answer, headers=headers)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with client:
            yield
            for task in list(acks):
                task.cancel()

    return Starlette(routes=[Route("/{path:path}", receive, methods=["POST"])], lifespan=lifespan)


async def ack_later(client: httpx.AsyncClient, delivery: Delivery, delay: float) -> None:
    """The receiver's side of a deferred delivery: its work done, it acks with the handle it was given."""
    await asyncio.sleep(delay)
    try:
        answer = await client.post(
            f"/v1/groups/{path_segment(delivery.group)}/ack",
            json={"receipt_handles": [delivery.receipt_handle]},
        )
    except httpx.HTTPError as exc:
        print(f"ack of {delivery.message_id}: no answer from {client.base_url}: {exc!r}", flush=True)
        return
    print(f"ack of {delivery.message_id}: {_ack_outcome(answer)}", flush=True)


def _ack_outcome(answer: httpx.Response) -> str:
    try:
        result = answer.json()["results"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return f"{answer.status_code} {answer.text[:500]}"
    return "acked" if result.get("ok") else f"not acked: {(result.get('error') or {}).get('detail')}"


class _AnnouncingServer(uvicorn.Server):
    """uvicorn's server, which says where it listens once it does (a --port 0 shows the port chosen)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        for server in self.servers:
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                print(f"petrel webhook-receiver listening on http://{host}:{port}", flush=True)


def run(host: str, port: int, options: ReceiverOptions) -> None:
    """Serve until SIGINT or SIGTERM (uvicorn's handlers stop it cleanly)."""
    if not 200 <= options.answer <= 599:
        raise SystemExit(f"petrel webhook-receiver: --answer {options.answer}: an HTTP status, 200 to 599")
    if options.retry_after is not None and options.answer not in RETRY_AFTER_STATUSES:
        raise SystemExit("petrel webhook-receiver: --retry-after goes with --answer 429 or 503")
    if not options.secrets:
        raise SystemExit(
            "petrel webhook-receiver: --secret-file FILE (or PETREL_WEBHOOK_SECRET, or --secret): "
            "the subscription's secret"
        )
    try:
        app = create_app(options)
    except webhooks.InvalidSecret as exc:
        raise SystemExit(f"petrel webhook-receiver: --secret: {exc} (the subscription's signing_secret)") from exc
    server = _AnnouncingServer(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    # uvicorn stops on either signal, then raises it again: Ctrl-C would end in a traceback, a SIGTERM
    # in death by signal. Both are the way to stop this receiver, so both end with status 0.
    signal.signal(signal.SIGTERM, _stopped)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    print("petrel webhook-receiver stopped", flush=True)


def _stopped(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)
