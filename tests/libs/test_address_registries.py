"""libs.address_registries holds the registries' rows as tests/libs/test_egress_registries.py writes them out."""

from __future__ import annotations

import ipaddress
import re

from libs.address_registries import IPV4_SPECIAL, IPV6_SPECIAL, NOT_INTERNET_UNICAST, Block, embedded_ipv4
from tests.support import registry_rows as written

VERDICT: dict[tuple[bool | None, bool | None], str] = {(True, True): written.PUBLIC, (True, None): written.CARRIED}


def verdicts(blocks: tuple[Block, ...]) -> dict[str, str]:
    return {str(b.network): VERDICT.get((b.forwardable, b.globally_reachable), written.REFUSED) for b in blocks}


def test_every_row_of_the_registries_is_held_with_its_verdict() -> None:
    assert verdicts(IPV4_SPECIAL) == written.IPV4_SPECIAL
    assert verdicts(IPV6_SPECIAL) == {k: v for k, v in written.IPV6_SPECIAL.items() if k != "64:ff9b::/96"} | {
        "64:ff9b::/96": written.PUBLIC  # True/True in the registry; the guard reads the IPv4 address it carries
    }
    assert verdicts(NOT_INTERNET_UNICAST) == written.NOT_INTERNET_UNICAST


def test_every_special_purpose_row_names_its_rfc_and_its_allocation_date() -> None:
    for block in IPV4_SPECIAL + IPV6_SPECIAL:
        assert re.fullmatch(r"\d{4}-\d{2}", block.allocated), block
        assert block.rfc.startswith("RFC "), block
        assert (block.terminated is None) == (block.forwardable is not None), block  # a terminated row is empty


def test_the_ipv4_address_inside_every_carrying_form_is_read() -> None:
    carrying = {
        "::ffff:10.0.0.1": "10.0.0.1",
        "::a00:1": "10.0.0.1",
        "64:ff9b::a00:1": "10.0.0.1",
        "64:ff9b:1::a00:1": "10.0.0.1",
        "2002:a00:1::1": "10.0.0.1",
        written.TEREDO_OF_10_0_0_1: "10.0.0.1",
    }
    for address, ipv4 in carrying.items():
        found = embedded_ipv4(ipaddress.ip_address(address))
        assert found is not None, address
        assert str(found.ipv4) == ipv4, address
    for plain in ("::", "::1", "2606:4700::1111", "10.0.0.1"):
        assert embedded_ipv4(ipaddress.ip_address(plain)) is None, plain
