"""A small check-back receiver for trying transactions by hand (`petrel checkback-receiver`).

A producer's service answers txcheck's check-backs: "is this transaction
committed?". This one verifies the Standard Webhooks signature with the producer
group's signing secret, prints what it was asked, and answers one fixed status,
or for each transaction what a file of `<message_id> COMMIT|ROLLBACK` lines
says (anything not listed: the default). It is an example to copy, not a part
of the cluster.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import uvicorn
from fastapi import FastAPI, Request, Response

from libs import webhooks

Status = Literal["COMMIT", "ROLLBACK", "UNKNOWN"]


def decisions(path: Path | None) -> dict[str, str]:
    if path is None or not path.exists():
        return {}
    pairs = (line.split() for line in path.read_text().splitlines() if line.strip())
    return {p[0]: p[1].upper() for p in pairs if len(p) == 2}


def create_app(secret: str, default: Status = "COMMIT", decisions_file: Path | None = None) -> FastAPI:
    """The receiver; a secret that is no signing secret (e.g. empty) is refused here, not at the first check."""
    webhooks.secret_key(secret)
    app = FastAPI(title="Petrel check-back receiver (example)")

    @app.post("/checkback")
    async def checkback(request: Request) -> Response:
        body = await request.body()
        try:
            webhooks.verify(secret, request.headers, body)
        except webhooks.VerificationFailed as exc:
            return Response(json.dumps({"error": str(exc)}), status_code=401, media_type="application/json")
        asked = json.loads(body)
        status = decisions(decisions_file).get(asked["message_id"], default)
        print(f"check {asked['check_count']} of {asked['transaction_id']} ({asked['topic']}): {status}", flush=True)
        return Response(json.dumps({"status": status}), media_type="application/json")

    return app


def run(port: int, secret: str, default: Status, decisions_file: Path | None) -> None:
    try:
        app = create_app(secret, default, decisions_file)
    except webhooks.InvalidSecret as exc:
        raise SystemExit(f"petrel checkback-receiver: --secret: {exc} (the producer group's signing_secret)") from exc
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
