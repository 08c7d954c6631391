"""The example check-back receiver: verifies the signature, answers what it was told."""

from pathlib import Path

import httpx
import pytest

from deploy import cli
from deploy.checkback_receiver import create_app
from libs import jsonutil, webhooks

SECRET = webhooks.new_secret()
ASKED = {"transaction_id": "broker-a:M1", "message_id": "M1", "topic": "orders", "check_count": 1}


async def ask(app: object, secret: str = SECRET) -> httpx.Response:
    body = jsonutil.dumps(ASKED)
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://receiver") as client:
        return await client.post("/checkback", content=body, headers=webhooks.sign(secret, body))


async def test_a_signed_check_gets_the_default_or_the_listed_answer(tmp_path: Path) -> None:
    assert (await ask(create_app(SECRET, "ROLLBACK"))).json() == {"status": "ROLLBACK"}
    listed = tmp_path / "decisions"
    listed.write_text("M1 commit\n")
    assert (await ask(create_app(SECRET, "UNKNOWN", listed))).json() == {"status": "COMMIT"}


async def test_a_check_signed_with_another_secret_is_refused() -> None:
    answer = await ask(create_app(SECRET), secret=webhooks.new_secret())
    assert answer.status_code == 401
    assert "signature" in answer.json()["error"]


def test_an_empty_secret_is_refused_at_start_not_at_the_first_check() -> None:
    with pytest.raises(SystemExit, match="--secret: a webhook secret holds at least one byte of key"):
        cli.main(["checkback-receiver", "--secret", ""])
