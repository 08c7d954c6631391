"""txcheck's tests' tools: the test Redis, a served broker with transactions, worker and beat as real processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request, Response

from libs import webhooks
from libs.codec import encode_record, iter_records
from libs.message import MessageRecord, Prop
from services.txcheck.brokers import Broker
from tests.support.serving import ServedApp


class TxcheckProcess:
    """`python -m services.txcheck <role>` in its own session, its output in `<log_dir>/txcheck-<role>.log`."""

    def __init__(self, role: str, env: dict[str, str], log_dir: Path) -> None:
        self.role = role
        self.env = env
        self.log_path = log_dir / f"txcheck-{role}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "services.txcheck", self.role],
                env=os.environ | self.env | {"PYTHONUNBUFFERED": "1"},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        assert self.process is not None, f"the {self.role} was not started"
        return self.process.pid

    def children(self) -> list[int]:
        """The pool processes of a prefork worker."""
        path = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        return [int(pid) for pid in path.read_text().split()]

    def kill(self) -> None:
        """kill -9 of the process and everything it started."""
        assert self.process is not None
        os.killpg(self.pid, signal.SIGKILL)
        self.process.wait(10)
        self.process = None

    def stop(self) -> None:
        """kill -9 as well: a graceful stop takes seconds, and nothing a test needs is in flight by then."""
        if self.process is not None:
            self.kill()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


REDIS_URL = "redis://127.0.0.1:6379/0"


class Producer:
    """A check-back receiver: answers by message id; can hold requests until released."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.answers: dict[str, str] = {}
        self.requests: list[tuple[str, str]] = []
        """(message id, webhook-id) of each verified request"""
        self.hold_first = 0
        self.released = threading.Event()

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/checkback")
        async def checkback(request: Request) -> Response:
            body = await request.body()
            webhooks.verify(self.secret, request.headers, body)
            message_id = (await request.json())["message_id"]
            self.requests.append((message_id, request.headers["webhook-id"]))
            if len(self.requests) <= self.hold_first:  # the worker asking is killed meanwhile
                await asyncio.to_thread(self.released.wait, 10)  # let go at the end of the test
            status = self.answers.get(message_id, "UNKNOWN")
            return Response(f'{{"status": "{status}"}}', media_type="application/json")

        return app


@dataclass
class TxBroker:
    """A broker served on loopback, and the calls a producer and a test make to it."""

    served: ServedApp
    http: httpx.Client
    name: str = "broker-a"

    @property
    def ref(self) -> Broker:
        return Broker(self.name, self.served.address)

    def put_half(
        self, message_id: str, props: dict[str, str] | None = None, *, body: bytes = b"pay order 7", group: str = "shop"
    ) -> dict[str, Any]:
        properties = {
            Prop.UNIQ_KEY: message_id,
            Prop.PRODUCER_GROUP: group,
            Prop.TRANSACTION_PREPARED: "true",
            Prop.TAGS: "paid",
        } | (props or {})
        record = MessageRecord(topic="orders", body=body, queue_id=1, properties=properties)
        answer = self.http.post(
            "/internal/messages", headers={"content-type": "application/octet-stream"}, content=encode_record(record)
        )
        assert answer.status_code == 200, answer.text
        stored: dict[str, Any] = answer.json()["stored"][0]
        return stored

    def end(self, message_id: str, verb: str) -> httpx.Response:
        return self.http.post(f"/internal/transactions/{message_id}/{verb}", json={"by": "producer"})

    def state(self, message_id: str) -> dict[str, Any]:
        answer = self.http.get(f"/internal/transactions/{message_id}")
        assert answer.status_code == 200, answer.text
        state: dict[str, Any] = answer.json()
        return state

    def records(self, topic: str, queue: int = 0) -> list[MessageRecord]:
        answer = self.http.get(f"/internal/topics/{topic}/queues/{queue}/messages", params={"offset": 0, "max": 1000})
        assert answer.status_code == 200, answer.text
        return list(iter_records(answer.content))
