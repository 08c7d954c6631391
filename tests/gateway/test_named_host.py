"""A gateway that listens on a host name, not an address, sends: the records' born host is the address it resolves to.

A record carries its born host as an IP address and a port (libs.codec.pack_host); the gateway's
`host` setting may be a name (`localhost`, a machine's name).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gateway.messages.records import OutgoingMessage, RecordBuilder
from libs.codec import decode_record


@pytest.fixture
def gateway_overrides() -> dict[str, Any]:
    return {"host": "localhost"}


async def test_a_gateway_listening_on_a_name_stores_what_it_is_sent(gateway: httpx.AsyncClient) -> None:
    assert (await gateway.put("/v1/topics/orders")).status_code in (200, 201)

    answer = await gateway.post("/v1/topics/orders/messages", json={"body": "order 7 paid"})

    assert answer.status_code == 201, answer.text


@pytest.mark.parametrize(
    ("listens_on", "born"),
    [
        ("localhost:8080", {"127.0.0.1:8080", "[::1]:8080"}),
        ("10.1.2.3:8080", {"10.1.2.3:8080"}),
        ("[::1]:8080", {"[::1]:8080"}),
        ("no-such-host.invalid:8080", {"0.0.0.0:8080"}),
    ],
)
def test_the_born_host_is_the_address_the_gateway_listens_on(listens_on: str, born: set[str]) -> None:
    prepared = RecordBuilder(listens_on).prepare("orders", OutgoingMessage(body="order 7 paid"))

    assert decode_record(prepared.encoded).born_host in born
