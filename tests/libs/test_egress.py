"""EgressGuard: which addresses a user's URL may resolve to, with a zone of the test's own for the names."""

from __future__ import annotations

import ipaddress
import re

import pytest
from pydantic_settings import SettingsError

from gateway.settings import GatewaySettings
from libs.egress import LOOPBACK_NETWORKS, Destination, EgressGuard, EgressRefused, parse_networks, refusal
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
        ("127.0.0.1", "a loopback address"),
        ("127.9.9.9", "a loopback address"),
        ("::1", "a loopback address"),
        ("10.0.0.5", "a private address"),
        ("172.16.3.4", "a private address"),
        ("192.168.1.7", "a private address"),
        ("fd12::1", "a private address"),
        ("169.254.10.1", "a link-local address"),
        ("fe80::1", "a link-local address"),
        ("224.0.0.1", "a multicast address"),
        ("ff02::1", "a multicast address"),
        ("240.0.0.1", "a reserved address"),
        ("0.0.0.0", "an unspecified address"),
        ("::", "an unspecified address"),
        ("169.254.169.254", "a cloud metadata address"),
        ("fd00:ec2::254", "a cloud metadata address"),
        ("::ffff:10.0.0.5", "a private address"),
        ("::ffff:169.254.169.254", "a cloud metadata address"),
    ],
)
def test_each_kind_of_address_is_refused_or_not(address: str, why: str | None) -> None:
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


@pytest.mark.parametrize(
    ("url", "detail"),
    [
        (
            "http://private.test/tx",
            "private.test resolves to 10.0.0.5, a private address; allow it with PETREL_PUSH_ALLOWED_NETWORKS",
        ),
        (
            "http://metadata.test/",
            "metadata.test resolves to 169.254.169.254, a cloud metadata address; "
            "allow it with PETREL_PUSH_ALLOWED_NETWORKS",
        ),
        (
            "http://v6metadata.test/",
            "v6metadata.test resolves to fd00:ec2::254, a cloud metadata address; "
            "allow it with PETREL_PUSH_ALLOWED_NETWORKS",
        ),
        (
            "http://mixed.test/",
            "mixed.test resolves to 192.168.1.7, a private address; allow it with PETREL_PUSH_ALLOWED_NETWORKS",
        ),
        ("http://10.0.0.5/", "10.0.0.5 is a private address; allow it with PETREL_PUSH_ALLOWED_NETWORKS"),
        ("http://nowhere.test/", "nowhere.test does not resolve: [Errno -2] Name or service not known: nowhere.test"),
        ("http://empty.test/", "empty.test does not resolve to any address"),
        ("http:///x", "'http:///x' has no host"),
    ],
)
def test_a_refused_url_says_which_address_and_why(url: str, detail: str) -> None:
    with pytest.raises(EgressRefused) as refused:
        guard().check(url)
    assert refused.value.detail == detail
    assert refused.value.status == 400


def test_the_allowlist_admits_its_networks_only() -> None:
    allowing = guard("10.0.0.0/8", "169.254.169.254")
    assert allowing.check("http://private.test/").address == "10.0.0.5"
    assert allowing.check("http://metadata.test/").address == "169.254.169.254"
    with pytest.raises(EgressRefused, match=re.escape("mixed.test resolves to 192.168.1.7")):
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
