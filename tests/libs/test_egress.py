"""EgressGuard: which addresses a user's URL may resolve to, with a zone of the test's own for the names."""

from __future__ import annotations

import ipaddress
import logging
import re

import pytest
from pydantic_settings import SettingsError

from gateway.settings import GatewaySettings
from libs.egress import (
    ALLOWING,
    LOOPBACK_NETWORKS,
    Destination,
    EgressGuard,
    EgressRefused,
    parse_networks,
    refusal,
)
from services.txcheck.settings import TxcheckSettings

ZONE = {
    "public.test": ["93.184.215.14"],
    "private.test": ["10.0.0.5"],
    "metadata.test": ["169.254.169.254"],
    "v6metadata.test": ["fd00:ec2::254"],
    "mixed.test": ["93.184.215.14", "192.168.1.7"],
    "local.test": ["127.0.0.1", "::1"],
    "empty.test": [],
}


def resolve(host: str, port: int) -> list[str]:
    if host not in ZONE:
        raise OSError(f"[Errno -2] Name or service not known: {host}")
    return ZONE[host]


def guard(*allowed: str) -> EgressGuard:
    return EgressGuard(parse_networks(allowed), resolve)


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("8.8.8.8", None),
        ("2606:4700::1111", None),
        ("127.0.0.1", "Loopback (127.0.0.0/8, RFC 1122, Section 3.2.1.3)"),
        ("::1", "Loopback Address (::1/128, RFC 4291)"),
        ("10.0.0.5", "Private-Use (10.0.0.0/8, RFC 1918)"),
        ("fd12::1", "Unique-Local (fc00::/7, RFC 4193, RFC 8190)"),
        ("169.254.169.254", "Link Local (169.254.0.0/16, RFC 3927)"),
        ("100.100.100.200", "Shared Address Space (100.64.0.0/10, RFC 6598)"),
        ("ff02::1", "Multicast (ff00::/8, RFC 4291)"),
        ("224.0.0.1", "Multicast (224.0.0.0/4, RFC 5771)"),
        ("0.0.0.0", '"This host on this network" (0.0.0.0/32, RFC 1122, Section 3.2.1.3)'),
        (
            "2002:a00:1::1",
            "it carries 10.0.0.1 (6to4, RFC 3056): Private-Use (10.0.0.0/8, RFC 1918)",
        ),
        (
            "::ffff:10.0.0.5",
            "IPv4-mapped Address (::ffff:0:0/96, RFC 4291); "
            "it carries 10.0.0.5 (IPv4-mapped, RFC 4291): Private-Use (10.0.0.0/8, RFC 1918)",
        ),
    ],
)
def test_a_refusal_names_the_registry_blocks_that_refuse_the_address(address: str, why: str | None) -> None:
    assert refusal(ipaddress.ip_address(address)) == why


def test_a_public_host_is_called_at_the_address_it_resolved_to() -> None:
    destination = guard().check("https://public.test:8443/hook?a=1")
    assert destination == Destination("https://public.test:8443/hook?a=1", "public.test", "93.184.215.14")
    assert destination.address_url == "https://93.184.215.14:8443/hook?a=1"
    assert destination.host_header == "public.test:8443"


def test_an_ipv6_address_is_bracketed_in_the_url() -> None:
    destination = EgressGuard(LOOPBACK_NETWORKS, resolve).check("http://local.test/tx")
    assert (destination.address_url, destination.host_header) == ("http://127.0.0.1/tx", "local.test")
    assert Destination("http://h/x", "h", "::1").address_url == "http://[::1]/x"


NOT_PUBLIC = "does not resolve, or not only to public internet addresses; " + ALLOWING


@pytest.mark.parametrize(
    ("url", "detail"),
    [
        ("http://private.test/tx", f"private.test {NOT_PUBLIC}"),
        ("http://metadata.test/", f"metadata.test {NOT_PUBLIC}"),
        ("http://v6metadata.test/", f"v6metadata.test {NOT_PUBLIC}"),
        ("http://mixed.test/", f"mixed.test {NOT_PUBLIC}"),
        ("http://nowhere.test/", f"nowhere.test {NOT_PUBLIC}"),
        ("http://empty.test/", f"empty.test {NOT_PUBLIC}"),
        (
            "http://10.0.0.5/",
            f"10.0.0.5 is not a public internet address: Private-Use (10.0.0.0/8, RFC 1918); {ALLOWING}",
        ),
        ("http:///x", "'http:///x' has no host"),
    ],
)
def test_a_refused_url_says_the_host_is_not_public_and_nothing_of_its_addresses(url: str, detail: str) -> None:
    with pytest.raises(EgressRefused) as refused:
        guard().check(url)
    assert refused.value.detail == detail
    assert refused.value.status == 400


@pytest.mark.parametrize(
    ("url", "logged"),
    [
        (
            "http://mixed.test/",
            "egress refused: mixed.test resolves to 93.184.215.14, 192.168.1.7; "
            "refused: 192.168.1.7 (Private-Use (192.168.0.0/16, RFC 1918))",
        ),
        ("http://nowhere.test/", "egress refused: nowhere.test does not resolve: [Errno -2] Name or service not known"),
        ("http://empty.test/", "egress refused: empty.test resolves to no address"),
    ],
)
def test_the_log_says_what_the_host_resolved_to_and_why_it_was_refused(
    url: str, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="libs.egress"), pytest.raises(EgressRefused):
        guard().check(url)
    assert logged in caplog.text


def test_the_allowlist_admits_its_networks_only() -> None:
    allowing = guard("10.0.0.0/8", "169.254.169.254")
    assert allowing.check("http://private.test/").address == "10.0.0.5"
    assert allowing.check("http://metadata.test/").address == "169.254.169.254"
    with pytest.raises(EgressRefused, match=re.escape("mixed.test does not resolve, or not only to public")):
        allowing.check("http://mixed.test/")


def test_a_bad_network_in_the_allowlist_is_named() -> None:
    with pytest.raises(ValueError, match=re.escape("PETREL_PUSH_ALLOWED_NETWORKS: '10.0.0.0/33' is not a network")):
        parse_networks(["10.0.0.0/33"])


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1", LOOPBACK_NETWORKS),
        ("::1", LOOPBACK_NETWORKS),
        ("localhost", LOOPBACK_NETWORKS),
        ("0.0.0.0", ()),
        ("10.1.2.3", ()),
        ("petrel.internal", ()),
    ],
)
def test_unset_the_allowlist_is_loopback_only_for_a_service_bound_to_loopback(
    host: str, allowed: tuple[object, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PETREL_PUSH_ALLOWED_NETWORKS", raising=False)
    assert GatewaySettings(host=host).egress_guard().allowed == allowed


def test_the_setting_is_cluster_wide_and_replaces_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETREL_PUSH_ALLOWED_NETWORKS", "10.20.0.0/16, fd12::/64")
    assert TxcheckSettings().egress_guard().allowed == parse_networks(["10.20.0.0/16", "fd12::/64"])
    monkeypatch.setenv("PETREL_PUSH_ALLOWED_NETWORKS", "")
    assert GatewaySettings().egress_guard().allowed == ()
    monkeypatch.setenv("PETREL_TXCHECK_PUSH_ALLOWED_NETWORKS", "10.0.0.0/8")
    with pytest.raises(SettingsError, match="set PETREL_PUSH_ALLOWED_NETWORKS instead"):
        TxcheckSettings()


def test_a_bad_network_in_the_setting_stops_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETREL_PUSH_ALLOWED_NETWORKS", "10.0.0.0/8,private")
    with pytest.raises(ValueError, match="'private' is not a network in CIDR form"):
        GatewaySettings()
