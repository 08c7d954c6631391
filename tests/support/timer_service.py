"""A TimerScheduler on a fake clock and a real broker served on a port (restartable with other settings)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from libs.broker_api.client import BrokerClient
from libs.broker_api.nameservers import NameserverClient
from libs.codec import encode_record, iter_records
from libs.events import EventWriter
from libs.http.client import InternalClient
from libs.message import MessageRecord, Prop
from libs.timer import TimerStore
from services.broker.app import create_app as broker_app
from services.broker.settings import BrokerSettings
from services.timer.progress import TimerProgress
from services.timer.scheduler import TimerScheduler
from tests.support.clock import FakeClock
from tests.support.serving import ServedApp, start_app


class Broker:
    """One broker, same name, port and store; `restart` brings it back with other settings."""

    def __init__(self, settings: BrokerSettings) -> None:
        self.settings = settings
        self.served: ServedApp | None = None

    def start(self, **overrides: object) -> None:
        self.served = start_app(broker_app(self.settings.model_copy(update=overrides)), self.settings.port)

    def stop(self) -> None:
        if self.served is not None:
            self.served.stop()
            self.served = None

    def restart(self, **overrides: object) -> None:
        self.stop()
        self.start(**overrides)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.port}"

    def send(self, topic: str, body: str, **properties: str) -> dict[str, Any]:
        props = {Prop.UNIQ_KEY: f"ID-{body}"} | properties
        raw = encode_record(MessageRecord(topic=topic, body=body.encode(), queue_id=0, properties=props))
        answer = httpx.post(
            f"{self.url}/internal/messages", headers={"content-type": "application/octet-stream"}, content=raw
        )
        assert answer.status_code in (200, 201), answer.text
        return dict(answer.json()["stored"][0])

    def send_all(self, topic: str, bodies: list[str]) -> None:
        """Plain messages in one put (a batch no bigger than a segment)."""
        raw = b"".join(
            encode_record(
                MessageRecord(topic=topic, body=b.encode(), queue_id=0, properties={Prop.UNIQ_KEY: f"ID-{b}"})
            )
            for b in bodies
        )
        answer = httpx.post(
            f"{self.url}/internal/messages", headers={"content-type": "application/octet-stream"}, content=raw
        )
        assert answer.status_code in (200, 201), answer.text
        assert len(answer.json()["stored"]) == len(bodies), answer.text

    def create(self, topic: str) -> None:
        answer = httpx.put(f"{self.url}/internal/topics/{topic}", json={"read_queues": 1, "write_queues": 1})
        assert answer.status_code in (200, 201), answer.text

    def delete(self, topic: str) -> None:
        assert httpx.delete(f"{self.url}/internal/topics/{topic}").status_code == 204

    def events(self, name: str) -> list[dict[str, Any]]:
        """The broker's lifecycle events of that name written so far."""
        root = self.settings.data_dir / "export" / "events"
        lines = [json.loads(line) for path in sorted(root.rglob("*.jsonl")) for line in path.read_text().splitlines()]
        return [line for line in lines if line["event"] == name]

    def report(self, **progress: object) -> dict[str, Any]:
        """What a timer would report (its cursors, its wheel's lowest offset); the broker's advice."""
        answer = httpx.post(f"{self.url}/internal/timers/progress", json=progress)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics").text

    @property
    def commitlog_start(self) -> int:
        """Where the broker's CommitLog starts now (its oldest segment's name)."""
        return min(int(path.name) for path in (self.settings.store_dir / "commitlog").iterdir())

    def bodies(self, topic: str) -> list[str]:
        answer = httpx.get(f"{self.url}/internal/topics/{topic}/queues/0/messages", params={"offset": 0, "max": 100})
        assert answer.status_code == 200, answer.text
        return [r.body.decode() for r in iter_records(answer.content)]


@dataclass
class Timer:
    scheduler: TimerScheduler
    clock: FakeClock
    events: EventWriter

    def crash_and_restart(self, tmp_path: Path, nameserver: ServedApp) -> None:
        """What kill -9 leaves (nothing since the last checkpoint is saved), opened again."""
        old = self.scheduler
        old.store.abandon()
        self.scheduler = open_scheduler(tmp_path, nameserver, old.brokers.client, self.clock, self.events)

    async def tick_at(self, ms: int) -> None:
        self.clock.now = ms / 1000
        await self.scheduler.tick()

    def emitted(self, name: str) -> list[dict[str, Any]]:
        self.events.flush()
        lines = [
            json.loads(line)
            for path in sorted(self.events.root.rglob("*.jsonl"))
            for line in path.read_text().splitlines()
        ]
        return [line for line in lines if line["event"] == name]


def open_scheduler(
    tmp_path: Path, nameserver: ServedApp, client: InternalClient, clock: FakeClock, events: EventWriter
) -> TimerScheduler:
    """A scheduler on the timer's files in tmp_path (made, or as a crash left them)."""
    store = TimerStore(tmp_path / "wheel", now_ms=int(clock() * 1000), window_ms=7 * 86_400_000)
    progress = TimerProgress(tmp_path / "progress.json")
    progress.load()
    return TimerScheduler(
        store,
        progress,
        NameserverClient(client, [nameserver.address]),
        BrokerClient(client),
        events,
        broker_refresh_seconds=0.01,
        max_attempts=3,
        retention_check_ms=100,
        clock=clock,
    )
