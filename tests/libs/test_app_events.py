"""Every service frame opens a lifecycle event writer and flushes it when the service stops."""

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI, Request

from libs.http.app import service_app
from libs.settings import ServiceSettings
from tests.support.apps import in_process


def app_emitting_on_request(data_dir: Path) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield

    app = service_app("gateway", ServiceSettings(data_dir=data_dir), lifespan=lifespan)

    @app.post("/send/{message_id}")
    async def send(message_id: str, request: Request) -> dict[str, str]:
        request.state.events.emit("sent", message_id=message_id, topic="orders")
        return {"message_id": message_id}

    return app


async def test_events_emitted_by_a_handler_are_on_disk_after_shutdown(tmp_path: Path) -> None:
    async for client in in_process(app_emitting_on_request(tmp_path)):
        for message_id in ("A1", "A2"):
            assert (await client.post(f"/send/{message_id}")).status_code == 200

    files = list((tmp_path / "export" / "events").glob("dt=*/hour=*/gateway-*.jsonl"))
    assert len(files) == 1, files
    lines = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert [(e["event"], e["message_id"], e["service"]) for e in lines] == [
        ("sent", "A1", "gateway"),
        ("sent", "A2", "gateway"),
    ]
