"""Receipt handles: signed, opaque, refused when altered, forged or not Petrel's."""

import dataclasses

import pytest

from libs.broker_api.frames import Lease, decode_leased, encode_leased
from libs.errors import InvalidReceiptHandle
from libs.receipt import ReceiptHandle

KEY = b"k" * 32
HANDLE = ReceiptHandle("broker-a", "billing", "", "orders", 3, 41, 7, 1_700_000_000_000, 1_700_000_030_000)


def test_a_handle_round_trips_and_routes_without_the_key() -> None:
    text = HANDLE.encode(KEY)
    assert ReceiptHandle.decode(text, KEY) == HANDLE
    assert ReceiptHandle.decode(text).broker == "broker-a"


@pytest.mark.parametrize(
    "text",
    ["", "abc", "a.b.c", "!!!.???", "e30.AAAA", "x" * 5000],
)
def test_malformed_handles_are_refused(text: str) -> None:
    with pytest.raises(InvalidReceiptHandle, match=r"malformed|signature"):
        ReceiptHandle.decode(text, KEY)


def test_an_altered_or_foreign_signed_handle_is_refused() -> None:
    other = dataclasses.replace(HANDLE, queue_offset=40).encode(b"another key" * 3)
    payload, _ = other.split(".")
    _, signature = HANDLE.encode(KEY).split(".")
    for text in (other, f"{payload}.{signature}"):
        with pytest.raises(InvalidReceiptHandle, match="signature"):
            ReceiptHandle.decode(text, KEY)


def test_leases_travel_beside_their_records() -> None:
    leases = [Lease("h1", 1, 10), Lease("h2", 3, 20)]
    decoded, records = decode_leased(encode_leased(leases, [b"rec1", b"rec2"]))
    assert decoded == leases
    assert bytes(records) == b"rec1rec2"
    assert decode_leased(b"") == ([], memoryview(b""))
