"""No client Petrel builds reads proxy settings from the environment.

An HTTP_PROXY, HTTPS_PROXY or ALL_PROXY in a service's environment (set for the host's
package manager, say) must not carry the cluster token, a replication stream or a
check-back's body through that proxy, nor let a proxy resolve a user's URL after the
egress guard checked where it goes. Each kind of client is called here with those
variables pointing at a recording proxy on loopback: the proxy sees no connection, the
peer sees the call. A scan of the source tree keeps it so: every httpx or aiohttp client
is built with `trust_env=False`, and nothing calls `urlopen` (which reads them too).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import httpx
import pytest

from deploy.plan import ProcessSpec
from deploy.supervisor import Supervisor
from libs.broker_api.replication import EPOCHS_PATH
from libs.egress import LOOPBACK_NETWORKS, EgressGuard, checked_request
from libs.errors import PetrelError
from libs.etcd import EtcdClient, EtcdError, EtcdSettings
from libs.events.writer import EventWriter
from libs.http.client import ClientOptions, InternalClient
from libs.store.epochs import EpochFile
from libs.store.message_store import MessageStore
from services.broker.epoch_sync import _agree_with
from services.broker.replica_follower import ReplicaFollower
from services.broker.replication_state import FollowerState
from services.broker.topics import TopicTable
from services.push.delivery import Endpoint
from services.txcheck.runtime import Runtime
from services.txcheck.settings import TxcheckSettings
from tests.support.store import make_store

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("libs", "services", "gateway", "deploy")
"""What runs in a Petrel process or its launcher (bench/ and tests/ call the services from outside)."""
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
TOKEN = "cluster-secret-of-thirty-two-bytes"
PROBLEM = b'{"type": "https://petrel.dev/problems/service-unavailable", "status": 503}'
UNAVAILABLE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(PROBLEM), PROBLEM)
)


@dataclass
class Recorder:
    """A TCP server on loopback that writes down each connection's request head; a peer answers, a proxy hangs up."""

    port: int = 0
    seen: list[bytes] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, path: str = "/") -> str:
        return f"http://{self.address}{path}"

    def heads(self) -> list[str]:
        return [head.decode("latin-1").split("\r\n")[0] for head in self.seen]


@contextlib.asynccontextmanager
async def recording(answer: bytes | None) -> AsyncIterator[Recorder]:
    recorder = Recorder()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            recorder.seen.append(head)
            if answer is not None:
                await reader.readexactly(_content_length(head))
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            recorder.seen.append(b"(a connection that sent no whole request head)")
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    recorder.port = server.sockets[0].getsockname()[1]
    async with server:
        yield recorder


def _content_length(head: bytes) -> int:
    for line in head.lower().split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name == b"content-length":
            return int(value)
    return 0


@pytest.fixture
async def proxy(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Recorder]:
    """A proxy every proxy variable names (and no NO_PROXY excepts loopback from)."""
    async with recording(None) as recorder:
        for name in PROXY_VARIABLES:
            monkeypatch.setenv(name, recorder.url(""))
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        yield recorder


@pytest.fixture
async def peer() -> AsyncIterator[Recorder]:
    """The service or endpoint called: it answers 503 to everything."""
    async with recording(UNAVAILABLE) as recorder:
        yield recorder


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MessageStore]:
    opened = make_store(tmp_path / "broker")
    yield opened
    await opened.close()


def went_straight(proxy: Recorder, peer: Recorder, request_line: str, *, with_token: bool = True) -> None:
    assert proxy.seen == [], f"the proxy was called: {proxy.heads()}"
    assert peer.heads() == [request_line]
    assert (TOKEN.encode() in peer.seen[0]) is with_token


async def test_a_client_that_reads_the_environment_would_go_through_the_proxy(proxy: Recorder, peer: Recorder) -> None:
    async with httpx.AsyncClient() as client:  # the control: it reads the variables
        with pytest.raises(httpx.HTTPError):
            await client.get(peer.url("/internal/topics"))
    assert proxy.heads() == [f"GET {peer.url('/internal/topics')} HTTP/1.1"]
    assert peer.seen == []


async def test_the_internal_client_goes_straight_to_its_peer(proxy: Recorder, peer: Recorder) -> None:
    async with InternalClient(ClientOptions(token=TOKEN, retries=0)) as client:
        with pytest.raises(PetrelError):
            await client.json("GET", peer.url("/internal/topics"))
    went_straight(proxy, peer, "GET /internal/topics HTTP/1.1")


async def test_a_slaves_replication_client_goes_straight_to_its_master(
    proxy: Recorder, peer: Recorder, store: MessageStore
) -> None:
    follower = ReplicaFollower(FollowerState(peer.address), store, cast(TopicTable, None), TOKEN, 1, "127.0.0.1:1")
    await follower.prepare()  # copies the master's topics: a GET of its table
    went_straight(proxy, peer, "GET /internal/topics HTTP/1.1")


async def test_the_epoch_sync_client_goes_straight_to_the_master(
    proxy: Recorder, peer: Recorder, store: MessageStore, tmp_path: Path
) -> None:
    events = EventWriter(tmp_path / "export", "broker", enabled=False)
    agreed = await _agree_with(peer.address, store, EpochFile(store.config.root), TOKEN, events, "broker-a")
    assert not agreed  # the peer answered 503
    went_straight(proxy, peer, f"GET {EPOCHS_PATH} HTTP/1.1")


async def test_the_etcd_client_goes_straight_to_etcd(proxy: Recorder, peer: Recorder) -> None:
    async with EtcdClient(EtcdSettings(endpoints=[peer.address], retry_seconds=0)) as client:
        with pytest.raises(EtcdError):
            await client.get("controller/leader")
    went_straight(proxy, peer, "POST /v3/kv/range HTTP/1.1", with_token=False)


async def test_a_check_back_goes_straight_to_the_producer(proxy: Recorder, peer: Recorder, tmp_path: Path) -> None:
    settings = TxcheckSettings(data_dir=tmp_path, events_enabled=False, push_allowed_networks=["127.0.0.0/8"])
    runtime = await asyncio.to_thread(Runtime, settings)  # as a txcheck worker opens it
    try:
        destination = settings.egress_guard().check(peer.url("/checkback"))
        request = checked_request(runtime.producer_http, destination, b'{"body": "a secret order"}', {}, 5.0)
        answer = await asyncio.to_thread(runtime.producer_http.send, request)  # as CheckBack.ask sends it
    finally:
        await asyncio.to_thread(runtime.close)
    assert answer.status_code == 503
    went_straight(proxy, peer, "POST /checkback HTTP/1.1", with_token=False)


async def test_a_push_delivery_goes_straight_to_the_endpoint(proxy: Recorder, peer: Recorder) -> None:
    endpoint = Endpoint(peer.url("/hook"), EgressGuard(LOOPBACK_NETWORKS), max_connections=1, max_answer_bytes=1024)
    try:
        verdict = await endpoint.post(b"{}", {"content-type": "application/json"}, 5.0)
    finally:
        await endpoint.close()
    assert verdict.status == 503
    went_straight(proxy, peer, "POST /hook HTTP/1.1", with_token=False)


async def test_petrel_ups_health_probe_goes_straight_to_the_child(proxy: Recorder, peer: Recorder) -> None:
    spec = ProcessSpec("nameserver", "services.nameserver", peer.port)
    assert not await asyncio.to_thread(Supervisor._answers, spec, "/healthz")  # the peer answers 503
    went_straight(proxy, peer, "GET /healthz HTTP/1.1", with_token=False)


# The source tree


CLIENT_CLASSES = frozenset({"AsyncClient", "Client", "ClientSession"})
"""httpx.AsyncClient, httpx.Client, aiohttp.ClientSession: each reads the proxy variables unless told not to."""


def source_files() -> Iterator[Path]:
    for folder in SCANNED:
        yield from sorted((ROOT / folder).rglob("*.py"))


def clients_reading_the_environment(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, what) of each client built without trust_env=False, and of each urlopen call."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _called_name(node.func)
        if name == "urlopen":
            yield node.lineno, "urlopen (use an opener without a ProxyHandler of the environment's)"
        elif name in CLIENT_CLASSES and not _trusts_no_environment(node):
            yield node.lineno, f"{name}(...) without trust_env=False"


def _called_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def _trusts_no_environment(call: ast.Call) -> bool:
    return any(
        k.arg == "trust_env" and isinstance(k.value, ast.Constant) and k.value.value is False for k in call.keywords
    )


def test_every_client_in_the_tree_is_built_without_the_environments_proxies() -> None:
    found = [
        f"{path.relative_to(ROOT).as_posix()}:{line} {what}"
        for path in source_files()
        for line, what in clients_reading_the_environment(ast.parse(path.read_text(), str(path)))
    ]
    assert found == [], f"clients that would go through HTTP_PROXY/ALL_PROXY (build them so they do not): {found}"


def test_the_scan_finds_a_client_built_without_it() -> None:
    tree = ast.parse(
        "import httpx, aiohttp, urllib.request\n"
        "httpx.AsyncClient(base_url='http://x')\n"
        "httpx.Client(trust_env=False)\n"
        "aiohttp.ClientSession(trust_env=True)\n"
        "urllib.request.urlopen('http://x')\n"
    )
    assert [line for line, _ in clients_reading_the_environment(tree)] == [2, 4, 5]
