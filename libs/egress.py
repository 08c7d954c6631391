"""EgressGuard: refuses a user's URL whose host is not on the public internet.

Petrel calls URLs its users give it (producer-group check-back URLs, push
endpoints). Without a guard, a user could make a service call the cloud's
metadata endpoint or a private admin port on their behalf (server-side request
forgery). The guard resolves the URL's host (every address getaddrinfo gives;
an IP literal in any spelling the OS accepts, `2130706433`, `0177.0.0.1`,
`127.1`, `[fe80::1%25eth0]`, is read as the OS reads it, without the resolver)
and refuses it when any address is not a public one by IANA's registries
(libs.address_registries: Forwardable and Globally Reachable, or global
unicast; an IPv6 form carrying a refused IPv4 address, 6to4, Teredo, NAT64,
IPv4-mapped, is refused too), unless that address lies in the operator's
allowlist of networks.

The allowlist (`PETREL_PUSH_ALLOWED_NETWORKS`, comma-separated CIDRs) is, when
not set: loopback (127.0.0.0/8 and ::1) if the service itself listens on a
loopback address (as `petrel up` does by default), else nothing. Once set, it
is exactly the networks given (an empty value allows none).

The same check runs twice: when the URL is registered (a 400), and right
before each call, whose connection then goes to the very address checked
(`Destination`), so a host that re-resolves meanwhile (DNS rebinding) gains
nothing.

A refusal tells the caller that the host is not public, never what it resolved
to (nor whether it resolved: which internal names exist is the cluster's to
know); the log (logger `libs.egress`, WARNING) tells the operator the addresses
and why each was refused. An IP literal's refusal names the registry block,
which says nothing the caller did not write.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, NoReturn, TypeAlias
from urllib.parse import urlsplit, urlunsplit

import httpx

from libs.address_registries import IPAddress, IPNetwork, block_of, embedded_ipv4
from libs.errors import InvalidRequest

log = logging.getLogger(__name__)

Resolver: TypeAlias = Callable[[str, int], Sequence[str]]
"""host, port -> the addresses the host resolves to (may raise OSError)"""

SETTING: Final = "PETREL_PUSH_ALLOWED_NETWORKS"
ALLOWING: Final = f"an operator allows other networks with {SETTING}"
LOOPBACK_NETWORKS: Final[tuple[IPNetwork, ...]] = (
    ipaddress.ip_network("127.0.0.0/8"),
    ipaddress.ip_network("::1/128"),
)


EgressRefused = InvalidRequest
"""The URL has no host, or its host is not public (does not resolve, or to an address not allowed): a 400."""


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


def refusal(address: IPAddress, allowed: Sequence[IPNetwork] = ()) -> str | None:
    """Why a call to the address is refused (the registry blocks that refuse it, its own and the IPv4 address'
    it carries), or None: public, or in the allowed networks."""
    reasons: list[str] = []
    embedded = embedded_ipv4(address)
    block = block_of(address)
    carried_decides = block is not None and block.decided_by_embedded_ipv4 and embedded is not None
    if block is not None and not block.public and not carried_decides and not _in(address, allowed):
        reasons.append(str(block))
    if embedded is not None:
        inner = refusal(embedded.ipv4, allowed)
        if inner is not None:
            reasons.append(f"it carries {embedded}: {inner}")
    return "; ".join(reasons) or None


def _in(address: IPAddress, networks: Sequence[IPNetwork]) -> bool:
    return any(address in network for network in networks)


def ip_literal(host: str) -> IPAddress | None:
    """The address a host names when it is an IP literal in any spelling the OS connects to (`2130706433`,
    `0x7f.1`, `127.1`, an IPv6 zone id: dropped), read without the resolver; None for a name."""
    standard = _standard_literal(host)
    if standard is not None:
        return standard
    try:
        infos = socket.getaddrinfo(host, None, flags=socket.AI_NUMERICHOST, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):
        return None
    return ipaddress.ip_address(str(infos[0][4][0]).split("%", maxsplit=1)[0])


def _standard_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.split("%", maxsplit=1)[0])
    except ValueError:
        return None


class EgressGuard:
    def __init__(self, allowed: Sequence[IPNetwork], resolve: Resolver = system_resolver) -> None:
        self.allowed = tuple(allowed)
        self.resolve = resolve

    def check(self, url: str) -> Destination:
        """The URL and the address to call it at; EgressRefused (400) saying the host is not public (the log says
        what it resolved to)."""
        try:
            parts = urlsplit(url)
            host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise EgressRefused(f"{url!r} is not a URL: {exc}") from None
        if not host:
            raise EgressRefused(f"{url!r} has no host")
        literal = ip_literal(host)
        if literal is not None:
            why = refusal(literal, self.allowed)
            if why is not None:
                log.warning("egress refused: %s is %s: %s", host, literal, why)
                spelled = host if _standard_literal(host) else f"{host} ({literal})"
                raise EgressRefused(f"{spelled} is not a public internet address: {why}; {ALLOWING}")
            return Destination(url, host, str(literal))
        return Destination(url, host, str(self._resolve(host, port)[0]))

    def _resolve(self, host: str, port: int) -> list[IPAddress]:
        """Every address of the host, when each is allowed; else EgressRefused, the reason logged."""
        try:
            addresses = [ipaddress.ip_address(a.split("%")[0]) for a in self.resolve(host, port)]
        except (OSError, UnicodeError, ValueError) as exc:
            self._refuse(host, f"does not resolve: {exc}")
        if not addresses:
            self._refuse(host, "resolves to no address")
        refused = [f"{address} ({why})" for address in addresses if (why := refusal(address, self.allowed))]
        if refused:
            self._refuse(host, f"resolves to {', '.join(map(str, addresses))}; refused: {'; '.join(refused)}")
        return addresses

    def _refuse(self, host: str, why: str) -> NoReturn:
        log.warning("egress refused: %s %s", host, why)
        raise EgressRefused(f"{host} does not resolve, or not only to public internet addresses; {ALLOWING}")


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
