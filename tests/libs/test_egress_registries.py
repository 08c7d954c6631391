"""The egress guard over every block of IANA's special-purpose registries, and the IPv6 forms that carry IPv4.

The registries are written out here again, apart from libs.address_registries (which
tests/libs/test_address_registries.py holds to these rows): the IPv4 and IPv6
Special-Purpose Address Registries as last updated 2025-10-09, each block with the verdict
its Forwardable and Globally Reachable columns give (both True: PUBLIC; "N/A", 6to4 and
Teredo: CARRIED, the IPv4 address inside decides; else REFUSED), and the blocks of the
Address Space registries that are not internet unicast. Each block is probed at its first,
middle and last address; the most specific block holding a probe gives its verdict.
"""

from __future__ import annotations

import ipaddress
import logging

import pytest

from libs.egress import EgressGuard, EgressRefused
from tests.support.registry_rows import (
    CARRIED,
    IPV4_SPECIAL,
    IPV6_SPECIAL,
    NOT_INTERNET_UNICAST,
    PUBLIC,
    REFUSED,
    TEREDO_OF_10_0_0_1,
)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def most_specific(table: dict[str, str], address: Address) -> str | None:
    holding = [ipaddress.ip_network(block) for block in table if address in ipaddress.ip_network(block)]
    return table[str(max(holding, key=lambda n: n.prefixlen))] if holding else None


def carried(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    """The IPv4 address of a 6to4, Teredo (the client's, obfuscated) or NAT64 address (the last 32 bits)."""
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)


def expected(address: Address) -> str:
    special = IPV4_SPECIAL if address.version == 4 else IPV6_SPECIAL
    verdict = most_specific(special, address) or most_specific(NOT_INTERNET_UNICAST, address) or PUBLIC
    if verdict == CARRIED:
        assert isinstance(address, ipaddress.IPv6Address)
        return expected(carried(address))
    return verdict


def probes() -> list[tuple[str, str, str]]:
    """(block, address, verdict) for the first, middle and last address of every block."""
    found = []
    for table in (IPV4_SPECIAL, IPV6_SPECIAL, NOT_INTERNET_UNICAST):
        for block in table:
            network = ipaddress.ip_network(block)
            middle = network[network.num_addresses // 2]
            for address in dict.fromkeys((network[0], middle, network[-1])):
                found.append((block, str(address), expected(address)))
    return found


def no_resolving(host: str, port: int) -> list[str]:
    raise AssertionError(f"an IP literal was resolved: {host}")


def url_of(address: str) -> str:
    return f"http://[{address}]:8080/hook" if ":" in address else f"http://{address}:8080/hook"


@pytest.mark.parametrize(("block", "address", "verdict"), probes())
def test_every_registry_block_is_refused_unless_forwardable_and_globally_reachable(
    block: str, address: str, verdict: str
) -> None:
    guard = EgressGuard((), no_resolving)
    if verdict == PUBLIC:
        assert guard.check(url_of(address)).address == address, f"{address} ({block}) is public"
    else:
        with pytest.raises(EgressRefused):
            guard.check(url_of(address))


def test_the_probes_cover_both_verdicts_and_the_carried_forms() -> None:
    verdicts = {(block, verdict) for block, _, verdict in probes()}
    assert {("2002::/16", PUBLIC), ("2002::/16", REFUSED)} <= verdicts  # 2002:8000:: carries 128.0.0.0
    assert {("64:ff9b::/96", PUBLIC), ("2001::/32", REFUSED)} <= verdicts
    assert {("192.0.0.9/32", PUBLIC), ("192.0.0.0/24", REFUSED)} <= verdicts


"""Teredo, server 65.54.227.120, client 10.0.0.1 (obfuscated: each bit flipped)"""
TEREDO_OF_8_8_8_8 = "2001:0:4136:e378:8000:63bf:f7f7:f7f7"


@pytest.mark.parametrize(
    "address",
    [
        "100.100.100.200",  # Alibaba Cloud's metadata
        "100.64.0.1",  # Tailscale, CNIs
        "192.0.0.192",  # Oracle Cloud's metadata
        "fec0::1",  # site-local
        "2002:a00:1::1",  # 6to4 of 10.0.0.1
        "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "64:ff9b:1::a00:1",  # local-use NAT64
        "::ffff:10.0.0.1",  # IPv4-mapped
        "::ffff:8.8.8.8",  # IPv4-mapped, even of a public address: the registry refuses the form
        "::a00:1",  # IPv4-compatible of 10.0.0.1
        "::808:808",  # IPv4-compatible of 8.8.8.8 (deprecated, outside 2000::/3)
        TEREDO_OF_10_0_0_1,
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "3fff::1",  # documentation
        "5f00::1",  # SRv6
        "100:0:0:1::1",  # dummy prefix
    ],
)
def test_the_issues_examples_and_every_form_carrying_a_refused_ipv4_address_are_refused(address: str) -> None:
    with pytest.raises(EgressRefused):
        EgressGuard((), no_resolving).check(url_of(address))


@pytest.mark.parametrize(
    "address", ["2002:808:808::1", "64:ff9b::808:808", TEREDO_OF_8_8_8_8, "2606:4700::1111", "8.8.8.8", "192.0.0.9"]
)
def test_a_form_carrying_a_public_ipv4_address_and_public_addresses_pass(address: str) -> None:
    assert EgressGuard((), no_resolving).check(url_of(address)).address == address


def test_a_carried_ipv4_address_in_the_allowlist_passes_and_the_form_still_needs_its_own() -> None:
    allowing = EgressGuard((ipaddress.ip_network("10.0.0.0/8"),), no_resolving)
    assert allowing.check(url_of("64:ff9b::a00:1")).address == "64:ff9b::a00:1"
    assert allowing.check(url_of("2002:a00:1::1")).address == "2002:a00:1::1"
    with pytest.raises(EgressRefused):
        allowing.check(url_of("::ffff:10.0.0.1"))  # the mapped form itself is refused by the registry


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("http://2130706433:8080/x", "127.0.0.1"),  # decimal
        ("http://0x7f000001:8080/x", "127.0.0.1"),  # hex
        ("http://0177.0.0.1:8080/x", "127.0.0.1"),  # octal
        ("http://0x7f.1:8080/x", "127.0.0.1"),  # hex, short
        ("http://127.1:8080/x", "127.0.0.1"),  # short
        ("http://[::1]:8080/x", "::1"),
        ("http://[::1%25lo]:8080/x", "::1"),  # a zone id
    ],
)
def test_an_ip_literal_in_any_spelling_is_judged_and_connected_to_as_the_os_reads_it(url: str, address: str) -> None:
    loopback = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
    destination = EgressGuard(loopback, no_resolving).check(url)
    assert destination.address == address
    assert destination.address_url == url_of(address).replace("/hook", "/x")
    with pytest.raises(EgressRefused):
        EgressGuard((), no_resolving).check(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://[::ffff:7f00:1]/",  # IPv4-mapped loopback
        "http://[::ffff:127.0.0.1]/",
        "http://[fe80::1%25eth0]/",  # link-local with a zone id
        "http://[::7f00:1]/",  # IPv4-compatible loopback
        "http://0/",  # 0.0.0.0
        "http://0xa9fea9fe/",  # 169.254.169.254
        "http://025177524776/",  # 169.254.169.254, octal
        "http://100.100.100.200/",
    ],
)
def test_odd_spellings_of_inside_addresses_are_refused_even_with_loopback_allowed(url: str) -> None:
    loopback = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
    with pytest.raises(EgressRefused):
        EgressGuard(loopback, no_resolving).check(url)


ZONE = {
    "alibaba.test": ["100.100.100.200"],
    "oracle.test": ["192.0.0.192"],
    "sitelocal.test": ["fec0::1"],
    "sixtofour.test": ["2002:a00:1::1"],
    "half.test": ["93.184.215.14", "64:ff9b::a00:1"],
}


def resolve(host: str, port: int) -> list[str]:
    if host not in ZONE:
        raise OSError(f"[Errno -2] Name or service not known: {host}")
    return ZONE[host]


@pytest.mark.parametrize("host", [*ZONE, "nowhere.test"])
def test_a_refusal_tells_the_caller_nothing_of_what_the_host_resolves_to_and_the_log_everything(
    host: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="libs.egress"), pytest.raises(EgressRefused) as refused:
        EgressGuard((), resolve).check(f"https://{host}/hook")
    assert refused.value.status == 400
    assert refused.value.detail == (
        f"{host} does not resolve, or not only to public internet addresses; "
        "an operator allows other networks with PETREL_PUSH_ALLOWED_NETWORKS"
    )
    told = [*ZONE.get(host, []), "10.0.0.1", "Name or service not known"]
    assert not [word for word in told if word in refused.value.detail]
    logged = caplog.text
    assert all(address in logged for address in ZONE.get(host, ["Name or service not known"])), logged
