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

PUBLIC, REFUSED, CARRIED = "public", "refused", "carried"

IPV4_SPECIAL = {
    "0.0.0.0/8": REFUSED,  # "This network", RFC 791
    "0.0.0.0/32": REFUSED,  # "This host on this network", RFC 1122
    "10.0.0.0/8": REFUSED,  # Private-Use, RFC 1918
    "100.64.0.0/10": REFUSED,  # Shared Address Space, RFC 6598 (Alibaba Cloud's metadata, Tailscale, CNIs)
    "127.0.0.0/8": REFUSED,  # Loopback
    "169.254.0.0/16": REFUSED,  # Link Local (the usual cloud metadata)
    "172.16.0.0/12": REFUSED,  # Private-Use
    "192.0.0.0/24": REFUSED,  # IETF Protocol Assignments, RFC 6890 (Oracle Cloud's metadata at .192)
    "192.0.0.0/29": REFUSED,  # IPv4 Service Continuity Prefix, RFC 7335
    "192.0.0.8/32": REFUSED,  # IPv4 dummy address, RFC 7600
    "192.0.0.9/32": PUBLIC,  # Port Control Protocol Anycast, RFC 7723
    "192.0.0.10/32": PUBLIC,  # TURN Anycast, RFC 8155
    "192.0.0.170/32": REFUSED,  # NAT64/DNS64 Discovery, RFC 8880
    "192.0.0.171/32": REFUSED,
    "192.0.2.0/24": REFUSED,  # TEST-NET-1
    "192.31.196.0/24": PUBLIC,  # AS112-v4, RFC 7535
    "192.52.193.0/24": PUBLIC,  # AMT, RFC 7450
    "192.88.99.0/24": REFUSED,  # Deprecated (6to4 Relay Anycast), terminated 2015-03
    "192.88.99.2/32": REFUSED,  # 6a44-relay anycast address, RFC 6751
    "192.168.0.0/16": REFUSED,  # Private-Use
    "192.175.48.0/24": PUBLIC,  # Direct Delegation AS112 Service, RFC 7534
    "198.18.0.0/15": REFUSED,  # Benchmarking, RFC 2544
    "198.51.100.0/24": REFUSED,  # TEST-NET-2
    "203.0.113.0/24": REFUSED,  # TEST-NET-3
    "240.0.0.0/4": REFUSED,  # Reserved, RFC 1112
    "255.255.255.255/32": REFUSED,  # Limited Broadcast
}

IPV6_SPECIAL = {
    "::1/128": REFUSED,  # Loopback Address
    "::/128": REFUSED,  # Unspecified Address
    "::ffff:0:0/96": REFUSED,  # IPv4-mapped Address
    "64:ff9b::/96": CARRIED,  # IPv4-IPv6 Translat., RFC 6052: True/True, and the IPv4 address inside decides
    "64:ff9b:1::/48": REFUSED,  # IPv4-IPv6 Translat., RFC 8215 (local use)
    "100::/64": REFUSED,  # Discard-Only Address Block, RFC 6666
    "100:0:0:1::/64": REFUSED,  # Dummy IPv6 Prefix, RFC 9780
    "2001::/23": REFUSED,  # IETF Protocol Assignments, RFC 2928
    "2001::/32": CARRIED,  # TEREDO, RFC 4380: N/A
    "2001:1::1/128": PUBLIC,  # Port Control Protocol Anycast
    "2001:1::2/128": PUBLIC,  # TURN Anycast
    "2001:1::3/128": PUBLIC,  # DNS-SD Service Registration Protocol Anycast, RFC 9665
    "2001:2::/48": REFUSED,  # Benchmarking, RFC 5180
    "2001:3::/32": PUBLIC,  # AMT
    "2001:4:112::/48": PUBLIC,  # AS112-v6
    "2001:10::/28": REFUSED,  # Deprecated (previously ORCHID), terminated 2014-03
    "2001:20::/28": PUBLIC,  # ORCHIDv2, RFC 7343
    "2001:30::/28": PUBLIC,  # Drone Remote ID Protocol Entity Tags, RFC 9374
    "2001:db8::/32": REFUSED,  # Documentation
    "2002::/16": CARRIED,  # 6to4, RFC 3056: N/A
    "2620:4f:8000::/48": PUBLIC,  # Direct Delegation AS112 Service
    "3fff::/20": REFUSED,  # Documentation, RFC 9637
    "5f00::/16": REFUSED,  # Segment Routing (SRv6) SIDs, RFC 9602
    "fc00::/7": REFUSED,  # Unique-Local
    "fe80::/10": REFUSED,  # Link-Local Unicast
}

NOT_INTERNET_UNICAST = {
    "224.0.0.0/4": REFUSED,  # IPv4 multicast, RFC 5771
    # the IPv6 Address Space registry, but 2000::/3 (Global Unicast)
    **dict.fromkeys(
        ["::/8", "100::/8", "200::/7", "400::/6", "800::/5", "1000::/4", "4000::/3", "6000::/3", "8000::/3"],
        REFUSED,
    ),
    **dict.fromkeys(["a000::/3", "c000::/3", "e000::/4", "f000::/5", "f800::/6", "fe00::/9"], REFUSED),
    "fc00::/7": REFUSED,  # Unique Local Unicast
    "fe80::/10": REFUSED,  # Link-Scoped Unicast
    "fec0::/10": REFUSED,  # site-local, deprecated by RFC 3879
    "ff00::/8": REFUSED,  # multicast
}

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


TEREDO_OF_10_0_0_1 = "2001:0:4136:e378:8000:63bf:f5ff:fffe"
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
