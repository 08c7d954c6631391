"""Receipt handles: signed, opaque, refused when altered, forged or not Petrel's."""

import dataclasses
import hmac
import os

import pytest

from libs.broker_api.frames import Lease, decode_leased, encode_leased
from libs.errors import InvalidReceiptHandle
from libs.receipt import ReceiptHandle, ReceiptKey
from tests.support.receipts import version_1

KEY = b"k" * 32
HANDLE = ReceiptHandle("broker-a", "billing", "", "orders", 3, 41, 7, 1_700_000_000_000, 1_700_000_030_000)


def test_a_handle_round_trips_and_routes_without_the_key() -> None:
    text = HANDLE.encode(ReceiptKey(KEY))
    assert ReceiptHandle.decode(text, ReceiptKey(KEY)) == HANDLE
    assert ReceiptHandle.decode(text).broker == "broker-a"


@pytest.mark.parametrize("key", [b"", b"k" * 32, b"k" * 64, b"k" * 65, os.urandom(200)])
def test_a_key_signs_as_hmac_sha256_does(key: bytes) -> None:
    signing = ReceiptKey(key)
    for message in (b"", b"payload", b"x" * 1000):
        assert signing.sign(message) == hmac.digest(key, message, "sha256")[:16]


def test_a_handle_signed_before_the_key_kept_its_set_up_is_the_same_and_still_taken() -> None:
    text = version_1(HANDLE, KEY)
    assert HANDLE.encode(ReceiptKey(KEY)) == text
    assert ReceiptHandle.decode(text, ReceiptKey(KEY)) == HANDLE
    assert ReceiptHandle.decode(text).broker == "broker-a"
    with pytest.raises(InvalidReceiptHandle, match="signature"):
        ReceiptHandle.decode(version_1(dataclasses.replace(HANDLE, lease=8), b"another key"), ReceiptKey(KEY))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "a.b.c",
        "!!!.???",
        "e30.AAAA",
        "x" * 5000,
        "WzIsImIiXQ.AAAA",
    ],
)
def test_malformed_handles_are_refused(text: str) -> None:
    with pytest.raises(InvalidReceiptHandle, match=r"malformed|signature"):
        ReceiptHandle.decode(text, ReceiptKey(KEY))


def test_an_altered_or_foreign_signed_handle_is_refused() -> None:
    key = ReceiptKey(KEY)
    other = dataclasses.replace(HANDLE, queue_offset=40).encode(ReceiptKey(b"another key" * 3))
    signed = HANDLE.encode(key)
    signature = signed.split(".")[1]
    altered = f"{version_1(dataclasses.replace(HANDLE, queue_offset=40), b'x').split('.')[0]}.{signature}"
    foreign_broker = dataclasses.replace(HANDLE, broker="broker-b").encode(ReceiptKey(b"broker-b's key"))
    for text in (other, altered, f"{other.split('.')[0]}.{signature}", foreign_broker):
        with pytest.raises(InvalidReceiptHandle, match="signature"):
            ReceiptHandle.decode(text, key)


def test_leases_travel_beside_their_records() -> None:
    leases = [Lease("h1", 1, 10), Lease("h2", 3, 20)]
    decoded, records = decode_leased(encode_leased(leases, [b"rec1", b"rec2"]))
    assert decoded == leases
    assert bytes(records) == b"rec1rec2"
    assert decode_leased(b"") == ([], memoryview(b""))
