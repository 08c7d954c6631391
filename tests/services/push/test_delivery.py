"""What an endpoint's answer means for the message, through real POSTs to a receiver on loopback."""

from __future__ import annotations

import asyncio
import logging
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from fastapi import FastAPI, Request, Response

from libs.egress import LOOPBACK_NETWORKS, EgressGuard
from services.push.attempts import Outcome
from services.push.delivery import Endpoint, Verdict
from tests.support.serving import ServedApp, free_port, serving

pytestmark = pytest.mark.asyncio

Post = Callable[..., Awaitable[Verdict]]


def answering_app() -> FastAPI:
    app = FastAPI()

    @app.post("/status/{code}")
    async def status(code: int, request: Request) -> Response:
        headers = {key[2:]: value for key, value in request.query_params.items() if key.startswith("h-")}
        return Response(b"x" * 100_000 if code == 418 else b"nope", status_code=code, headers=headers)

    @app.post("/slow")
    async def slow() -> Response:
        await asyncio.sleep(1)
        return Response(status_code=200)

    return app


@pytest.fixture(scope="module")
def receiver() -> Iterator[ServedApp]:
    with serving(answering_app()) as served:
        yield served


@pytest_asyncio.fixture
async def post(receiver: ServedApp) -> AsyncIterator[Post]:
    endpoints: list[Endpoint] = []

    async def call(path: str, timeout: float = 5.0, guard: EgressGuard | None = None) -> Verdict:
        endpoint = Endpoint(
            f"{receiver.url}{path}", guard or EgressGuard(LOOPBACK_NETWORKS), max_connections=4, max_answer_bytes=1024
        )
        endpoints.append(endpoint)
        return await endpoint.post(b"{}", {"content-type": "application/json"}, timeout)

    yield call
    for endpoint in endpoints:
        await endpoint.close()


@pytest.mark.parametrize(
    ("path", "outcome"),
    [
        ("/status/200", Outcome.ACKED),
        ("/status/204", Outcome.ACKED),
        ("/status/202", Outcome.ACKED),
        ("/status/202?h-petrel-ack=deferred", Outcome.DEFERRED),
        ("/status/400", Outcome.FAILED),
        ("/status/500", Outcome.FAILED),
        ("/status/410", Outcome.GONE),
        ("/status/429", Outcome.THROTTLED),
        ("/status/502", Outcome.THROTTLED),
        ("/status/503", Outcome.THROTTLED),
        ("/status/504", Outcome.THROTTLED),
    ],
)
async def test_each_answer_is_judged_as_the_issue_says(post: Post, path: str, outcome: Outcome) -> None:
    verdict = await post(path)
    assert verdict.outcome is outcome


async def test_retry_after_is_kept_and_an_error_names_the_status_and_the_answer(post: Post) -> None:
    throttled = await post("/status/429?h-retry-after=7")
    failed = await post("/status/500")

    assert (throttled.retry_after, throttled.status) == ("7", 429)
    assert failed.error == "HTTP 500: nope"


async def test_a_redirect_is_not_followed_but_failed(post: Post) -> None:
    verdict = await post("/status/302?h-location=http://169.254.169.254/")

    assert verdict.outcome is Outcome.FAILED
    assert "redirects are not followed" in str(verdict.error)


async def test_a_long_answer_is_read_only_up_to_the_bound(post: Post) -> None:
    verdict = await post("/status/418")
    assert verdict.outcome is Outcome.FAILED
    assert len(str(verdict.error)) < 300


async def test_no_answer_in_time_and_no_connection_are_the_endpoints_trouble(post: Post, receiver: ServedApp) -> None:
    late = await post("/slow", timeout=0.2)
    closed = Endpoint(
        f"http://127.0.0.1:{free_port()}/hook", EgressGuard(LOOPBACK_NETWORKS), max_connections=1, max_answer_bytes=1024
    )
    try:
        refused = await closed.post(b"{}", {}, 1.0)
    finally:
        await closed.close()

    assert (late.outcome, late.status, late.error) == (Outcome.THROTTLED, None, "no answer within 0.2 s")
    assert refused.outcome is Outcome.THROTTLED
    assert refused.error is not None
    assert refused.error.startswith("no connection")


async def test_an_address_the_guard_refuses_is_not_called(post: Post) -> None:
    verdict = await post("/status/200", guard=EgressGuard(()))

    assert verdict.outcome is Outcome.THROTTLED
    assert verdict.error is not None
    assert "refused by the egress guard" in verdict.error
    assert verdict.status is None


async def test_a_host_resolving_inside_is_not_called_and_the_attempts_error_names_no_address(
    receiver: ServedApp, caplog: pytest.LogCaptureFixture
) -> None:
    guard = EgressGuard(LOOPBACK_NETWORKS, resolve=lambda _host, _port: ["127.0.0.1", "100.100.100.200"])
    endpoint = Endpoint(
        f"http://metadata.test:{receiver.port}/status/200", guard, max_connections=1, max_answer_bytes=1024
    )
    try:
        with caplog.at_level(logging.WARNING, logger="libs.egress"):
            verdict = await endpoint.post(b"{}", {}, 0.5)
    finally:
        await endpoint.close()

    assert (verdict.outcome, verdict.status) == (Outcome.THROTTLED, None)
    assert verdict.error == (
        "refused by the egress guard: metadata.test does not resolve, or not only to public internet addresses; "
        "an operator allows other networks with PETREL_PUSH_ALLOWED_NETWORKS"
    )
    assert "metadata.test resolves to 127.0.0.1, 100.100.100.200; refused: 100.100.100.200" in caplog.text


@pytest.fixture(scope="module")
def tls_receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServedApp, Path]]:
    """An https receiver whose certificate (self-signed, by openssl) names push.test only."""
    folder = tmp_path_factory.mktemp("tls")
    certificate, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=push.test"),
            *("-addext", "subjectAltName=DNS:push.test", "-keyout", str(key), "-out", str(certificate)),
        ],
        check=True,
        capture_output=True,
    )
    with serving(answering_app(), tls=(certificate, key)) as served:
        yield served, certificate


@pytest.mark.parametrize(("host", "outcome"), [("push.test", Outcome.ACKED), ("other.test", Outcome.THROTTLED)])
async def test_https_goes_to_the_checked_address_and_verifies_the_urls_host(
    tls_receiver: tuple[ServedApp, Path], host: str, outcome: Outcome
) -> None:
    served, certificate = tls_receiver
    guard = EgressGuard(LOOPBACK_NETWORKS, resolve=lambda _host, _port: ["127.0.0.1"])
    endpoint = Endpoint(
        f"https://{host}:{served.port}/status/200",
        guard,
        max_connections=1,
        max_answer_bytes=1024,
        ssl=ssl.create_default_context(cafile=str(certificate)),
    )
    try:
        verdict = await endpoint.post(b"{}", {}, 5.0)
    finally:
        await endpoint.close()

    assert verdict.outcome is outcome
    if outcome is Outcome.THROTTLED:  # the certificate does not name other.test: no POST is made
        assert "certificate is not valid for 'other.test'" in str(verdict.error)
