"""The chaos producers' check-back receiver, served in a process of its own (bench.loopback.served).

It verifies each check-back's signature with the secret in `CHAOS_CHECKBACK_SECRET`
and answers the outcome the producer chose, written in the body ("... rollback ...":
ROLLBACK, anything else: COMMIT), so a transaction ends the same way whether its
producer or its check-back ends it.
"""

from __future__ import annotations

import os

import orjson
from fastapi import FastAPI, Request, Response

from libs import webhooks

SECRET_ENV = "CHAOS_CHECKBACK_SECRET"


def outcome(body: str) -> str:
    return "ROLLBACK" if " rollback " in f" {body} " else "COMMIT"


def receiver_app() -> FastAPI:
    secret = os.environ[SECRET_ENV]
    app = FastAPI()

    @app.post("/checkback")
    async def checkback(request: Request) -> Response:
        raw = await request.body()
        try:
            webhooks.verify(secret, request.headers, raw)
        except webhooks.VerificationFailed:
            return Response(status_code=401)
        status = outcome(orjson.loads(raw).get("body") or "")
        return Response(orjson.dumps({"status": status}), media_type="application/json")

    return app
