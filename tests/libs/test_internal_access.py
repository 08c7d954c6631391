"""Who may call an internal service: the cluster token on every path but health ones, Host names, loopback starts."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, WebSocket
from pydantic import SecretStr, ValidationError
from starlette.types import Message

from gateway.settings import GatewaySettings
from libs.cluster_token import INTERNAL_TOKEN_HEADER, ClusterTokenError
from libs.egress import is_loopback_host as is_loopback
from libs.http.app import service_app
from libs.settings import ServiceSettings
from services.broker.settings import BrokerSettings

TOKEN = "cluster-secret-of-thirty-two-bytes"
FILED_TOKEN = "the-token-of-the-file-is-this-one"
ENVIRONMENT_TOKEN = "the-token-of-the-environment-variable"
PROBLEM = "application/problem+json"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("PETREL_"):
            monkeypatch.delenv(name)


@contextlib.asynccontextmanager
async def no_resources(app: FastAPI) -> AsyncIterator[None]:
    yield


def internal_app(settings: ServiceSettings | None = None, *, public: bool = False) -> FastAPI:
    """A service built with service_app; `app.state.calls` lists the paths its routes were reached by."""
    settings = settings or ServiceSettings(internal_token=SecretStr(TOKEN), events_enabled=False)
    app = service_app("testsvc", settings, lifespan=no_resources, public=public)
    app.state.calls = []

    @app.get("/internal/topics/{topic}")
    async def topic(topic: str) -> dict[str, str]:
        app.state.calls.append(topic)
        return {"topic": topic}

    @app.websocket("/internal/stream")
    async def stream(websocket: WebSocket) -> None:
        app.state.calls.append("stream")
        await websocket.accept()
        await websocket.send_text("hello")
        await websocket.close()

    return app


@contextlib.asynccontextmanager
async def client_for(app: FastAPI, host: str = "127.0.0.1:10911", **headers: str) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url=f"http://{host}", headers=headers) as client:
        yield client


def token_file(tmp_path: Path, content: str = f"{TOKEN}\n", mode: int = 0o600) -> Path:
    path = tmp_path / "cluster.token"
    path.write_text(content)
    path.chmod(mode)
    return path


# The token


@pytest.mark.parametrize(
    "path", ["/internal/topics/orders", "/internal/nope", "/nope", "/docs", "/redoc", "/openapi.json", "/healthz/"]
)
@pytest.mark.parametrize("headers", [{}, {INTERNAL_TOKEN_HEADER: "wrong"}], ids=["missing", "wrong"])
async def test_every_path_routed_or_not_refuses_a_call_without_the_right_token(
    path: str, headers: dict[str, str]
) -> None:
    app = internal_app()
    async with client_for(app, **headers) as client:
        for method in ("GET", "POST", "DELETE"):
            answer = await client.request(method, path)
            assert (answer.status_code, answer.headers["content-type"]) == (401, PROBLEM), f"{method} {path}"
            assert answer.json()["detail"] == "missing or wrong x-petrel-internal-token header"
    assert app.state.calls == []


@pytest.mark.parametrize("path", ["/internal/topics/orders", "/docs", "/openapi.json"])
async def test_the_right_token_passes(path: str) -> None:
    async with client_for(internal_app(), **{INTERNAL_TOKEN_HEADER: TOKEN}) as client:
        assert (await client.get(path)).status_code == 200


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
async def test_health_readiness_and_metrics_are_open_without_the_token(path: str) -> None:
    async with client_for(internal_app()) as client:
        assert (await client.get(path)).status_code == 200


async def websocket_session(app: FastAPI, **headers: str) -> list[Message]:
    """What the app sends to a WebSocket client that connects (Host 127.0.0.1), then leaves."""
    scope = {
        "type": "websocket",
        "asgi": {"version": "3.0"},
        "scheme": "ws",
        "path": "/internal/stream",
        "raw_path": b"/internal/stream",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")] + [(k.encode(), v.encode()) for k, v in headers.items()],
        "server": ("127.0.0.1", 10911),
        "client": ("127.0.0.1", 50000),
        "subprotocols": [],
    }
    incoming: list[Message] = [{"type": "websocket.connect"}, {"type": "websocket.disconnect", "code": 1000}]
    sent: list[Message] = []

    async def receive() -> Message:
        return incoming.pop(0)

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def test_a_websocket_without_the_token_is_refused_before_the_handshake() -> None:
    app = internal_app()
    refused = await websocket_session(app)
    assert [(m["type"], m.get("code")) for m in refused] == [("websocket.close", 1008)]
    assert app.state.calls == []
    accepted = await websocket_session(app, **{INTERNAL_TOKEN_HEADER: TOKEN})
    assert [m["type"] for m in accepted][:2] == ["websocket.accept", "websocket.send"]
    assert app.state.calls == ["stream"]


async def test_the_token_is_read_from_its_file_which_wins_over_the_variable(tmp_path: Path) -> None:
    settings = ServiceSettings(
        internal_token=SecretStr(ENVIRONMENT_TOKEN), internal_token_file=token_file(tmp_path, f" {FILED_TOKEN} \n")
    )
    assert settings.cluster_token() == FILED_TOKEN
    async with client_for(internal_app(settings), **{INTERNAL_TOKEN_HEADER: FILED_TOKEN}) as client:
        assert (await client.get("/internal/topics/orders")).status_code == 200
    async with client_for(internal_app(settings), **{INTERNAL_TOKEN_HEADER: ENVIRONMENT_TOKEN}) as client:
        assert (await client.get("/internal/topics/orders")).status_code == 401


def test_the_token_file_is_a_cluster_wide_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert (ServiceSettings().cluster_token(), ServiceSettings().allowed_hosts) == (None, [])
    path = token_file(tmp_path)
    monkeypatch.setenv("PETREL_INTERNAL_TOKEN_FILE", str(path))
    monkeypatch.setenv("PETREL_ALLOWED_HOSTS", "broker-a.petrel.internal, ns1.petrel.internal")

    settings = BrokerSettings()

    assert (settings.internal_token_file, settings.cluster_token()) == (path, TOKEN)
    assert settings.allowed_hosts == ["broker-a.petrel.internal", "ns1.petrel.internal"]
    monkeypatch.setenv("PETREL_INTERNAL_TOKEN_FILE", "")
    assert ServiceSettings().internal_token_file is None


@pytest.mark.parametrize(
    ("content", "mode", "says"),
    [
        ("", 0o600, "is empty"),
        (" \n", 0o600, "is empty"),
        (TOKEN, 0o644, "is open to its group or others (mode 0644)"),
        (TOKEN, 0o640, "is open to its group or others (mode 0640)"),
    ],
    ids=["empty", "blank", "world-readable", "group-readable"],
)
def test_a_service_refuses_to_start_on_a_token_file_it_cannot_use(
    tmp_path: Path, content: str, mode: int, says: str
) -> None:
    settings = ServiceSettings(internal_token_file=token_file(tmp_path, content, mode))
    with pytest.raises(ClusterTokenError, match=r"PETREL_INTERNAL_TOKEN_FILE") as refused:
        internal_app(settings)
    assert says in str(refused.value)


@pytest.mark.parametrize("token", ["cluster-secret", "x" * 31, "\u00e9" * 15 + "x"], ids=["14", "31", "31-utf8"])
def test_a_token_shorter_than_32_bytes_is_refused_naming_the_variable_not_the_token(token: str) -> None:
    with pytest.raises(ValidationError) as refused:
        ServiceSettings(internal_token=SecretStr(token))
    [error] = refused.value.errors()
    assert error["loc"] == ("internal_token",)
    assert error["msg"] == f"Value error, {short_token(len(token.encode()))}"
    assert token not in str(refused.value)
    assert ServiceSettings(internal_token=SecretStr("x" * 32)).cluster_token() == "x" * 32


def test_a_token_file_shorter_than_32_bytes_is_refused(tmp_path: Path) -> None:
    settings = ServiceSettings(internal_token_file=token_file(tmp_path, "x" * 31 + "\n"))
    with pytest.raises(ClusterTokenError) as refused:
        internal_app(settings)
    assert str(
        refused.value
    ) == f"the cluster token file {tmp_path / 'cluster.token'} (PETREL_INTERNAL_TOKEN_FILE) " + (
        short_token(31).removeprefix("the cluster token ")
    )


def short_token(size: int) -> str:
    return (
        f"the cluster token is {size} bytes long; it must be at least 32: a short one can be guessed by whoever "
        "reaches an internal port (`petrel up` makes one of 43 characters in <data_dir>/cluster.token)"
    )


def test_a_service_refuses_to_start_on_a_missing_token_file_or_a_directory(tmp_path: Path) -> None:
    settings = ServiceSettings(internal_token_file=tmp_path / "nowhere.token")
    with pytest.raises(ClusterTokenError, match=r"cannot read .*nowhere\.token.*No such file or directory"):
        internal_app(settings)
    with pytest.raises(ClusterTokenError, match=r"token file .* is not a regular file"):
        internal_app(ServiceSettings(internal_token_file=tmp_path))


# Listening beyond loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.2.1", "::1", "localhost", "LOCALHOST", "[::1]"])
def test_a_service_on_loopback_starts_without_a_token(host: str) -> None:
    assert is_loopback(host)
    internal_app(ServiceSettings(host=host))


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.12", "broker-a.petrel.internal"])
@pytest.mark.parametrize("public", [False, True], ids=["internal", "gateway"])
def test_a_service_beyond_loopback_refuses_to_start_without_a_token(host: str, public: bool) -> None:
    assert not is_loopback(host)
    with pytest.raises(ClusterTokenError) as refused:
        internal_app(ServiceSettings(host=host), public=public)
    assert str(refused.value) == (
        f"the testsvc listens on {host}, which other machines can reach, and has no cluster token: set "
        "PETREL_INTERNAL_TOKEN_FILE to the cluster's token file (`petrel up` writes <data_dir>/cluster.token; "
        "copy it, mode 0600, to each host) or PETREL_INTERNAL_TOKEN"
    )
    internal_app(ServiceSettings(host=host, internal_token=SecretStr(TOKEN)), public=public)


def test_the_gateway_beyond_loopback_needs_a_token_to_call_the_others(tmp_path: Path) -> None:
    from gateway.app import create_app

    with pytest.raises(ClusterTokenError, match=r"the gateway listens on 0\.0\.0\.0"):
        create_app(GatewaySettings(host="0.0.0.0"))
    create_app(GatewaySettings(host="0.0.0.0", internal_token_file=token_file(tmp_path)))


# The Host header


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "127.0.0.1:10911",
        "10.0.0.12:10911",
        "[::1]:10911",
        "[::1]",
        "[fe80::1]:80",
        "localhost",
        "localhost:9876",
        "LocalHost.:9876",
        "broker-a.petrel.internal:10911",
        "BROKER-A.petrel.internal",
    ],
)
async def test_ip_addresses_localhost_and_the_listed_names_are_answered(host: str) -> None:
    settings = ServiceSettings(allowed_hosts=["broker-a.petrel.internal"])
    async with client_for(internal_app(settings), host) as client:
        assert (await client.get("/internal/topics/orders")).json() == {"topic": "orders"}


@pytest.mark.parametrize(
    "host",
    [
        "rebind.attacker.example",
        "rebind.attacker.example:10911",
        "127.0.0.1.nip.io:10911",
        "localhost.attacker.example",
        "broker-b.petrel.internal",
        "petrel.internal",
    ],
)
@pytest.mark.parametrize("path", ["/internal/topics/orders", "/healthz", "/metrics", "/nope"])
async def test_any_other_host_name_is_refused_on_every_path_with_the_setting_that_allows_it(
    host: str, path: str
) -> None:
    settings = ServiceSettings(allowed_hosts=["broker-a.petrel.internal"], internal_token=SecretStr(TOKEN))
    app = internal_app(settings)
    async with client_for(app, host, **{INTERNAL_TOKEN_HEADER: TOKEN}) as client:
        answer = await client.get(path)
    assert (answer.status_code, answer.headers["content-type"]) == (400, PROBLEM)
    problem: dict[str, Any] = answer.json()
    assert problem["type"] == "https://petrel.dev/problems/host-not-allowed"
    assert problem["detail"] == (
        f"this service does not answer to the Host {host!r}: call it by IP address or localhost, "
        "or list the name in PETREL_ALLOWED_HOSTS"
    )
    assert (problem["host"], problem["setting"]) == (host, "PETREL_ALLOWED_HOSTS")
    assert app.state.calls == []


async def test_a_service_also_answers_to_the_nameservers_names_and_its_own() -> None:
    settings = BrokerSettings(
        nameservers=["ns1.petrel.internal:9876"],
        host="0.0.0.0",
        advertised_address="broker-b.petrel.internal:10911",
        internal_token=SecretStr(TOKEN),
    )
    for host in ("ns1.petrel.internal:9876", "broker-b.petrel.internal:10911", "broker-b.petrel.internal"):
        async with client_for(internal_app(settings), host, **{INTERNAL_TOKEN_HEADER: TOKEN}) as client:
            assert (await client.get("/internal/topics/orders")).status_code == 200, host
    async with client_for(internal_app(settings), "ns2.petrel.internal:9876") as client:
        assert (await client.get("/healthz")).status_code == 400


async def test_the_gateway_answers_to_any_host_name() -> None:
    async with client_for(internal_app(public=True), "petrel.example.com") as client:
        assert (await client.get("/internal/topics/orders")).status_code == 200
