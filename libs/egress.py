"""EgressGuard: refuses a user's URL whose host resolves to an address inside the cluster's own networks.

Petrel calls URLs its users give it (producer-group check-back URLs; later push
subscriptions). Without a guard, a user could make a service call the cloud's
metadata endpoint or a private admin port on their behalf (server-side request
forgery). The guard resolves the URL's host (every address getaddrinfo gives)
and refuses it when any address is loopback, private, link-local, multicast,
reserved, unspecified or a cloud metadata address, unless that address lies in
the operator's allowlist of networks.

The allowlist (`PETREL_PUSH_ALLOWED_NETWORKS`, comma-separated CIDRs) is, when
not set: loopback (127.0.0.0/8 and ::1) if the service itself listens on a
loopback address (as `petrel up` does by default), else nothing. Once set, it
is exactly the networks given (an empty value allows none).

The same check runs twice: when the URL is registered (a 400 that says why),
and right before each call, whose connection then goes to the very address
checked (`Destination`), so a host that re-resolves meanwhile (DNS rebinding)
gains nothing.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias
from urllib.parse import urlsplit, urlunsplit

import httpx

from libs.errors import InvalidRequest

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver: TypeAlias = Callable[[str, int], Sequence[str]]
"""host, port -> the addresses the host resolves to (may raise OSError)"""

SETTING: Final = "PETREL_PUSH_ALLOWED_NETWORKS"
METADATA_ADDRESSES: Final = frozenset(ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254"))
LOOPBACK_NETWORKS: Final[tuple[IPNetwork, ...]] = (
    ipaddress.ip_network("127.0.0.0/8"),
    ipaddress.ip_network("::1/128"),
)


EgressRefused = InvalidRequest
"""The URL's host is missing, does not resolve, or resolves to an address outside the allowed ones (a 400)."""


@dataclass(frozen=True, slots=True)
class Destination:
    """A checked URL, and the address to connect to in place of its host."""

    url: str
    host: str
    address: str

    @property
    def address_url(self) -> str:
        """The URL with its host replaced by the checked address (the port, path and query kept)."""
        parts = urlsplit(self.url)
        literal = f"[{self.address}]" if ":" in self.address else self.address
        netloc = literal if parts.port is None else f"{literal}:{parts.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))

    @property
    def host_header(self) -> str:
        port = urlsplit(self.url).port
        return self.host if port is None else f"{self.host}:{port}"


def system_resolver(host: str, port: int) -> list[str]:
    """Every address getaddrinfo gives for the host, in its order, without repeats."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]).split("%")[0] for info in infos))


def parse_networks(entries: Iterable[str]) -> tuple[IPNetwork, ...]:
    """The networks of CIDR entries (a bare address is a /32 or /128); ValueError naming a bad one."""
    networks: list[IPNetwork] = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"{SETTING}: {entry.strip()!r} is not a network in CIDR form: {exc}") from None
    return tuple(networks)


def is_loopback_host(host: str) -> bool:
    """A bind address only this machine can reach: 127.0.0.0/8, ::1 (bracketed or not) or localhost."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def default_allowed(bound_host: str) -> tuple[IPNetwork, ...]:
    """Loopback when the service listens on a loopback address; else nothing."""
    return LOOPBACK_NETWORKS if is_loopback_host(bound_host) else ()


def refusal(address: IPAddress) -> str | None:
    """Why a call to the address is refused unless allowlisted ("a private address"), or None."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return refusal(address.ipv4_mapped)
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    for kind, flagged in (
        ("an unspecified", address.is_unspecified),
        ("a loopback", address.is_loopback),
        ("a link-local", address.is_link_local),
        ("a multicast", address.is_multicast),
        ("a reserved", address.is_reserved),
        ("a private", address.is_private),
    ):
        if flagged:
            return f"{kind} address"
    return None


class EgressGuard:
    def __init__(self, allowed: Sequence[IPNetwork], resolve: Resolver = system_resolver) -> None:
        self.allowed = tuple(allowed)
        self.resolve = resolve

    def check(self, url: str) -> Destination:
        """The URL and the address to call it at; EgressRefused (400) saying which address and why."""
        try:
            parts = urlsplit(url)
            host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise EgressRefused(f"{url!r} is not a URL: {exc}") from None
        if not host:
            raise EgressRefused(f"{url!r} has no host")
        literal = _literal(host)
        try:
            addresses = [literal] if literal else [ipaddress.ip_address(a) for a in self.resolve(host, port)]
        except (OSError, UnicodeError, ValueError) as exc:
            raise EgressRefused(f"{host} does not resolve: {exc}") from None
        if not addresses:
            raise EgressRefused(f"{host} does not resolve to any address")
        for address in addresses:
            self._check_address(host, address)
        return Destination(url, host, str(addresses[0]))

    def _check_address(self, host: str, address: IPAddress) -> None:
        why = refusal(address)
        if why is None or any(address in network for network in self.allowed):
            return
        if _literal(host) == address:
            raise EgressRefused(f"{host} is {why}; allow it with {SETTING}")
        raise EgressRefused(f"{host} resolves to {address}, {why}; allow it with {SETTING}")


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def checked_request(
    http: httpx.Client | httpx.AsyncClient,
    destination: Destination,
    body: bytes,
    headers: dict[str, str],
    timeout: float,
) -> httpx.Request:
    """The POST to the address checked, with the URL's own host in Host (and in SNI, for https)."""
    extensions = {"sni_hostname": destination.host} if destination.url.startswith("https:") else {}
    return http.build_request(
        "POST",
        destination.address_url,
        content=body,
        headers=headers | {"host": destination.host_header},
        extensions=extensions,
        timeout=timeout,
    )
