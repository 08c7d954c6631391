"""`petrel webhook-receiver` as a real process: verifies, prints one line per delivery, answers as told."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from gateway.app import create_app as gateway_app
from gateway.settings import GatewaySettings
from libs import webhooks
from libs.broker_api.frames import Lease
from libs.message import MessageRecord, Prop, SysFlag
from libs.push_api.schemas import PayloadFormat
from services.push.payloads import Outgoing, PushedMessage, pushed_message, render
from tests.support.serving import ServedApp, serving

SECRET = webhooks.new_secret()
LINE_TIMEOUT = 15.0


class Receiver:
    """The receiver's process, its stdout read line by line."""

    def __init__(self, *options: str) -> None:
        command = [sys.executable, "-m", "deploy", "webhook-receiver", "--port", "0", *options]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=os.environ | {"PETREL_WEBHOOK_SECRET": SECRET},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        started = self.line()
        assert "listening on http://127.0.0.1:" in started, started
        self.url = started.rsplit(" ", 1)[1]

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def line(self) -> str:
        try:
            return self.lines.get(timeout=LINE_TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"the receiver printed nothing within {LINE_TIMEOUT} s") from None

    def post(self, sent: Outgoing) -> httpx.Response:
        return httpx.post(f"{self.url}/hooks/orders", content=sent.body, headers=sent.headers)

    def stop(self, how: signal.Signals) -> int:
        self.process.send_signal(how)
        return self.process.wait(LINE_TIMEOUT)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.fixture
def receiver(request: pytest.FixtureRequest) -> Iterator[Receiver]:
    started = Receiver(*getattr(request, "param", ()))
    yield started
    started.close()


def message(body: bytes = b"hello", *, binary: bool = False, handle: str = "handle-1") -> PushedMessage:
    properties = {Prop.UNIQ_KEY: "0A0B0C", Prop.TAGS: "created"}
    record = MessageRecord(
        "orders", body, properties=properties, sysflag=SysFlag.BINARY_BODY if binary else 0, born_timestamp=1
    )
    return pushed_message(record, "broker-a", "billing", Lease(handle, 2, 0))


def signed(msg: PushedMessage, payload_format: PayloadFormat = PayloadFormat.STANDARD_WEBHOOKS) -> Outgoing:
    return render(msg, payload_format, [SECRET], time.time())


def test_a_delivery_in_each_format_is_verified_printed_and_acked(receiver: Receiver) -> None:
    for payload_format in PayloadFormat:
        answer = receiver.post(signed(message(), payload_format))
        assert answer.status_code == 200, answer.text
        assert receiver.line() == f'0A0B0C attempt 2 orders tag=created ({payload_format}): "hello" -> 200'
    assert receiver.post(signed(message(bytes(range(256)), binary=True), PayloadFormat.RAW)).status_code == 200
    assert receiver.line() == "0A0B0C attempt 2 orders tag=created (raw): 256 bytes -> 200"
    assert receiver.stop(signal.SIGINT) == 0
    assert receiver.line() == "petrel webhook-receiver stopped"


def test_a_forged_signature_is_refused_with_401_and_why(receiver: Receiver) -> None:
    sent = signed(message())
    forged = Outgoing(sent.headers, sent.body.replace(b"hello", b"HELLO"))
    answer = receiver.post(forged)
    assert answer.status_code == 401
    assert receiver.line() == "refused 0A0B0C: no signature matches: wrong secret, or the body or headers were changed"
    unsigned = Outgoing({k: v for k, v in sent.headers.items() if k != "webhook-signature"}, sent.body)
    assert receiver.post(unsigned).status_code == 401
    assert receiver.line() == "refused 0A0B0C: the webhook-signature header is missing"


@pytest.mark.parametrize("receiver", [("--answer", "429", "--retry-after", "7")], indirect=True)
def test_the_told_answer_with_retry_after(receiver: Receiver) -> None:
    answer = receiver.post(signed(message()))
    assert (answer.status_code, answer.headers["retry-after"]) == (429, "7")
    assert receiver.line().endswith("-> 429")
    assert receiver.stop(signal.SIGTERM) == 0


def test_retry_after_without_a_429_or_503_is_refused_at_start() -> None:
    command = [sys.executable, "-m", "deploy", "webhook-receiver", "--secret", SECRET, "--retry-after", "7"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=LINE_TIMEOUT, check=False)
    assert done.returncode == 1
    assert "--retry-after goes with --answer 429 or 503" in done.stderr


@pytest.fixture
def gateway(broker: ServedApp, nameserver: ServedApp) -> Iterator[ServedApp]:
    """A real gateway over a real broker: the one a deferred delivery's receiver acks through."""
    with serving(gateway_app(GatewaySettings(nameservers=[nameserver.address]))) as served:
        yield served


def test_a_deferred_delivery_is_acked_later_through_the_gateway(gateway: ServedApp) -> None:
    with httpx.Client(base_url=gateway.url) as client:
        client.put("/v1/topics/orders", json={"queues": 1}).raise_for_status()
        client.put("/v1/groups/billing", json={}).raise_for_status()
        client.post("/v1/topics/orders/messages", json={"body": "later", "tag": "created"}).raise_for_status()
        leased = client.post("/v1/groups/billing/topics/orders/receive", json={"wait_seconds": 5}).json()["messages"]
        handle = leased[0]["receipt_handle"]
        deferred = Receiver("--defer", "--defer-seconds", "0", "--gateway", gateway.url)
        try:
            answer = deferred.post(signed(message(b"later", handle=handle)))
            assert (answer.status_code, answer.headers["petrel-ack"]) == (202, "deferred")
            assert deferred.line().endswith('"later" -> 202 deferred')
            assert deferred.line() == "ack of 0A0B0C: acked"  # with the handle the delivery carried
            assert client.get("/v1/groups/billing/lag").json()["total_in_flight"] == 0
            assert deferred.stop(signal.SIGTERM) == 0
        finally:
            deferred.close()
