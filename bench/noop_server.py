"""The single-send reference: a FastAPI no-op POST with a typed body, served as the gateway is served.

`python -m bench.noop_server PORT` serves `noop_app` with `libs.http.serve`, the
gateway's own server set-up (uvicorn with uvloop and httptools under the
connection limits, keep-alive, the GC frozen after start-up), so that the
reference differs from the gateway by the work of a send only. The endpoint
parses the same JSON a single send carries into a pydantic model and answers at
once.
"""

from __future__ import annotations

import sys

from fastapi import FastAPI
from pydantic import BaseModel

from libs.http.serve import serve
from libs.settings import ServiceSettings


class NoopMessage(BaseModel):
    body: str
    tag: str


def noop_app() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/topics/{topic}/messages")
    async def send(topic: str, message: NoopMessage) -> dict[str, bool]:
        return {"ok": True}

    return app


if __name__ == "__main__":
    serve(noop_app(), ServiceSettings(port=int(sys.argv[1]), log_level="warning"))
