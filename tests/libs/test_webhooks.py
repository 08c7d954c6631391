"""Standard Webhooks signing and verification, including a receiver that verifies what it gets."""

from __future__ import annotations

import base64

import httpx
import pytest
from fastapi import FastAPI, Request, Response

from libs import webhooks
from libs.webhooks import InvalidSecret, VerificationFailed

# The reference vector of the Standard Webhooks specification's test suite.
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
MSG_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
TIMESTAMP = 1614265330
PAYLOAD = b'{"test": 2432232314}'
EXPECTED = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def reference_headers(**overrides: str) -> dict[str, str]:
    headers = {"webhook-id": MSG_ID, "webhook-timestamp": str(TIMESTAMP), "webhook-signature": EXPECTED}
    return headers | overrides


def test_signature_matches_the_reference_vector() -> None:
    assert webhooks.signature(SECRET, MSG_ID, TIMESTAMP, PAYLOAD) == EXPECTED


def test_sign_gives_the_three_headers() -> None:
    headers = webhooks.sign(SECRET, PAYLOAD, webhook_id=MSG_ID, now=TIMESTAMP)
    assert headers == reference_headers()


def test_sign_uses_a_fresh_id_per_call() -> None:
    first, second = webhooks.sign(SECRET, PAYLOAD), webhooks.sign(SECRET, PAYLOAD)
    assert first["webhook-id"] != second["webhook-id"]


def test_verify_accepts_the_reference_request() -> None:
    webhooks.verify(SECRET, reference_headers(), PAYLOAD, now=TIMESTAMP + 10)


def test_verify_accepts_one_matching_signature_among_several() -> None:
    rotated = f"v1,{base64.b64encode(b'x' * 32).decode()} {EXPECTED}"
    webhooks.verify(SECRET, reference_headers(**{"webhook-signature": rotated}), PAYLOAD, now=TIMESTAMP)


@pytest.mark.parametrize(
    ("headers", "body", "message"),
    [
        (reference_headers(), b'{"test": 2432232315}', "no signature matches"),
        (reference_headers(**{"webhook-id": "msg_other"}), PAYLOAD, "no signature matches"),
        (reference_headers(**{"webhook-signature": "v2," + EXPECTED[3:]}), PAYLOAD, "no signature matches"),
        (reference_headers(**{"webhook-timestamp": "soon"}), PAYLOAD, "'soon' is not unix seconds"),
        ({"webhook-id": MSG_ID, "webhook-timestamp": str(TIMESTAMP)}, PAYLOAD, "webhook-signature header is missing"),
    ],
)
def test_verify_refuses_a_changed_request(headers: dict[str, str], body: bytes, message: str) -> None:
    with pytest.raises(VerificationFailed, match=message):
        webhooks.verify(SECRET, headers, body, now=TIMESTAMP)


def test_verify_refuses_another_secret() -> None:
    with pytest.raises(VerificationFailed, match="no signature matches"):
        webhooks.verify(webhooks.new_secret(), reference_headers(), PAYLOAD, now=TIMESTAMP)


@pytest.mark.parametrize("skew", [-301, 301])
def test_verify_refuses_a_timestamp_out_of_tolerance(skew: int) -> None:
    with pytest.raises(VerificationFailed, match=r"from now \(tolerance 300 s\)"):
        webhooks.verify(SECRET, reference_headers(), PAYLOAD, now=TIMESTAMP + skew)


def test_new_secret_is_whsec_base64_of_24_random_bytes() -> None:
    secret = webhooks.new_secret()
    assert secret.startswith("whsec_")
    assert len(webhooks.secret_key(secret)) == 24
    assert secret != webhooks.new_secret()


@pytest.mark.parametrize("secret", ["whsec_not base64!", "whsec_"])
def test_a_malformed_secret_is_refused(secret: str) -> None:
    with pytest.raises(InvalidSecret):
        webhooks.signature(secret, MSG_ID, TIMESTAMP, PAYLOAD)


def receiver(secret: str) -> FastAPI:
    """A producer's check-back endpoint as the README shows it: verify the raw body, then parse it."""
    app = FastAPI()

    @app.post("/checkback")
    async def checkback(request: Request) -> Response:
        body = await request.body()
        try:
            webhooks.verify(secret, request.headers, body)
        except VerificationFailed as exc:
            return Response(str(exc), status_code=401)
        return Response('{"status": "COMMIT"}', media_type="application/json")

    return app


async def test_a_receiver_accepts_a_signed_request_and_refuses_a_tampered_one() -> None:
    secret = webhooks.new_secret()
    transport = httpx.ASGITransport(app=receiver(secret))
    async with httpx.AsyncClient(transport=transport, base_url="http://receiver") as client:
        body = b'{"transaction_id": "broker-a:01", "check_count": 1}'
        signed = await client.post("/checkback", content=body, headers=webhooks.sign(secret, body))
        tampered = await client.post("/checkback", content=body + b" ", headers=webhooks.sign(secret, body))
        unsigned = await client.post("/checkback", content=body)
    assert (signed.status_code, signed.json()) == (200, {"status": "COMMIT"})
    assert (tampered.status_code, tampered.text) == (
        401,
        "no signature matches: wrong secret, or the body or headers were changed",
    )
    assert (unsigned.status_code, unsigned.text) == (401, "the webhook-id header is missing")
