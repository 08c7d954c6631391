"""IANA's address registries, as the egress guard (libs.egress) reads them: which addresses are the public internet.

Python's `ipaddress` cannot say it: 3.11's `is_global` calls 192.0.0.192 (inside
192.0.0.0/24; Oracle Cloud's metadata), fec0::1 (site-local), 2002:a00:1::1 (the 6to4 form
of 10.0.0.1) and 64:ff9b::a00:1 (the NAT64 form of 10.0.0.1) global. So Petrel keeps its
own copy of:

- the IANA IPv4 Special-Purpose Address Registry, last updated 2025-10-09
  (https://www.iana.org/assignments/iana-ipv4-special-registry/);
- the IANA IPv6 Special-Purpose Address Registry, last updated 2025-10-09
  (https://www.iana.org/assignments/iana-ipv6-special-registry/);
- from the IPv4 and IPv6 Address Space registries (ipv4-address-space, ipv6-address-space),
  the blocks that are not unicast on the internet: IPv4 multicast, and every IPv6 block
  but 2000::/3 (Global Unicast), fec0::/10 (site-local, deprecated) among them.

Every row of the two special-purpose registries is here, with its RFC, its allocation date
and its Forwardable and Globally Reachable columns as the registry writes them (True,
False; None for "N/A" and for the empty cells of a terminated block).

What `block_of` answers for an address: the most specific special-purpose block holding
it; else the address-space block outside the internet's unicast space; else None (a
public unicast address). A block is public when Forwardable and Globally Reachable are
both True. "N/A" (6to4, Teredo) means the IPv4 address the IPv6 address carries decides;
`embedded_ipv4` reads that IPv4 address out of every form that carries one (IPv4-mapped,
IPv4-compatible, NAT64, 6to4, Teredo), and the guard refuses the form when it refuses the
IPv4 address.

To refresh: compare the rows below with the registries' CSV exports
(`iana-ipv4-special-registry-1.csv`, `iana-ipv6-special-registry-1.csv`,
`ipv6-address-space-1.csv`), change the rows and the dates above, and the same rows in
tests/libs/test_address_registries.py (written separately, it fails when the two differ).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeAlias

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Block:
    network: IPNetwork
    name: str
    rfc: str
    allocated: str
    """the registry's allocation date, YYYY-MM ("" in the address-space registries, which give none)"""
    forwardable: bool | None
    globally_reachable: bool | None
    """None: the registry's "N/A" (the carried IPv4 address decides) or an empty cell (a terminated block)"""
    terminated: str | None = None

    @property
    def public(self) -> bool:
        return self.forwardable is True and self.globally_reachable is True

    @property
    def decided_by_embedded_ipv4(self) -> bool:
        """Globally Reachable is "N/A" (6to4, Teredo): the IPv4 address inside decides."""
        return self.globally_reachable is None and self.terminated is None and self.forwardable is True

    def __str__(self) -> str:
        return f"{self.name} ({self.network}, {self.rfc})"


def _row(
    block: str, name: str, rfc: str, allocated: str, forwardable: bool | None, reachable: bool | None, ended: str = ""
) -> Block:
    return Block(ipaddress.ip_network(block), name, rfc, allocated, forwardable, reachable, ended or None)


T, F, NA = True, False, None

IPV4_SPECIAL: Final = (
    _row("0.0.0.0/8", '"This network"', "RFC 791, Section 3.2", "1981-09", F, F),
    _row("0.0.0.0/32", '"This host on this network"', "RFC 1122, Section 3.2.1.3", "1981-09", F, F),
    _row("10.0.0.0/8", "Private-Use", "RFC 1918", "1996-02", T, F),
    _row("100.64.0.0/10", "Shared Address Space", "RFC 6598", "2012-04", T, F),
    _row("127.0.0.0/8", "Loopback", "RFC 1122, Section 3.2.1.3", "1981-09", F, F),
    _row("169.254.0.0/16", "Link Local", "RFC 3927", "2005-05", F, F),
    _row("172.16.0.0/12", "Private-Use", "RFC 1918", "1996-02", T, F),
    _row("192.0.0.0/24", "IETF Protocol Assignments", "RFC 6890, Section 2.1", "2010-01", F, F),
    _row("192.0.0.0/29", "IPv4 Service Continuity Prefix", "RFC 7335", "2011-06", T, F),
    _row("192.0.0.8/32", "IPv4 dummy address", "RFC 7600", "2015-03", F, F),
    _row("192.0.0.9/32", "Port Control Protocol Anycast", "RFC 7723", "2015-10", T, T),
    _row("192.0.0.10/32", "Traversal Using Relays around NAT Anycast", "RFC 8155", "2017-02", T, T),
    _row("192.0.0.170/32", "NAT64/DNS64 Discovery", "RFC 8880, RFC 7050 Section 2.2", "2013-02", F, F),
    _row("192.0.0.171/32", "NAT64/DNS64 Discovery", "RFC 8880, RFC 7050 Section 2.2", "2013-02", F, F),
    _row("192.0.2.0/24", "Documentation (TEST-NET-1)", "RFC 5737", "2010-01", F, F),
    _row("192.31.196.0/24", "AS112-v4", "RFC 7535", "2014-12", T, T),
    _row("192.52.193.0/24", "AMT", "RFC 7450", "2014-12", T, T),
    _row("192.88.99.0/24", "Deprecated (6to4 Relay Anycast)", "RFC 7526", "2001-06", NA, NA, "2015-03"),
    _row("192.88.99.2/32", "6a44-relay anycast address", "RFC 6751", "2012-10", T, F),
    _row("192.168.0.0/16", "Private-Use", "RFC 1918", "1996-02", T, F),
    _row("192.175.48.0/24", "Direct Delegation AS112 Service", "RFC 7534", "1996-01", T, T),
    _row("198.18.0.0/15", "Benchmarking", "RFC 2544", "1999-03", T, F),
    _row("198.51.100.0/24", "Documentation (TEST-NET-2)", "RFC 5737", "2010-01", F, F),
    _row("203.0.113.0/24", "Documentation (TEST-NET-3)", "RFC 5737", "2010-01", F, F),
    _row("240.0.0.0/4", "Reserved", "RFC 1112, Section 4", "1989-08", F, F),
    _row("255.255.255.255/32", "Limited Broadcast", "RFC 8190, RFC 919 Section 7", "1984-10", F, F),
)

IPV6_SPECIAL: Final = (
    _row("::1/128", "Loopback Address", "RFC 4291", "2006-02", F, F),
    _row("::/128", "Unspecified Address", "RFC 4291", "2006-02", F, F),
    _row("::ffff:0:0/96", "IPv4-mapped Address", "RFC 4291", "2006-02", F, F),
    _row("64:ff9b::/96", "IPv4-IPv6 Translat.", "RFC 6052", "2010-10", T, T),
    _row("64:ff9b:1::/48", "IPv4-IPv6 Translat.", "RFC 8215", "2017-06", T, F),
    _row("100::/64", "Discard-Only Address Block", "RFC 6666", "2012-06", T, F),
    _row("100:0:0:1::/64", "Dummy IPv6 Prefix", "RFC 9780", "2025-04", F, F),
    _row("2001::/23", "IETF Protocol Assignments", "RFC 2928", "2000-09", F, F),
    _row("2001::/32", "TEREDO", "RFC 4380, RFC 8190", "2006-01", T, NA),
    _row("2001:1::1/128", "Port Control Protocol Anycast", "RFC 7723", "2015-10", T, T),
    _row("2001:1::2/128", "Traversal Using Relays around NAT Anycast", "RFC 8155", "2017-02", T, T),
    _row("2001:1::3/128", "DNS-SD Service Registration Protocol Anycast", "RFC 9665", "2024-04", T, T),
    _row("2001:2::/48", "Benchmarking", "RFC 5180, RFC Errata 1752", "2008-04", T, F),
    _row("2001:3::/32", "AMT", "RFC 7450", "2014-12", T, T),
    _row("2001:4:112::/48", "AS112-v6", "RFC 7535", "2014-12", T, T),
    _row("2001:10::/28", "Deprecated (previously ORCHID)", "RFC 4843", "2007-03", NA, NA, "2014-03"),
    _row("2001:20::/28", "ORCHIDv2", "RFC 7343", "2014-07", T, T),
    _row("2001:30::/28", "Drone Remote ID Protocol Entity Tags (DETs) Prefix", "RFC 9374", "2022-12", T, T),
    _row("2001:db8::/32", "Documentation", "RFC 3849", "2004-07", F, F),
    _row("2002::/16", "6to4", "RFC 3056", "2001-02", T, NA),
    _row("2620:4f:8000::/48", "Direct Delegation AS112 Service", "RFC 7534", "2011-05", T, T),
    _row("3fff::/20", "Documentation", "RFC 9637", "2024-07", F, F),
    _row("5f00::/16", "Segment Routing (SRv6) SIDs", "RFC 9602", "2024-04", T, F),
    _row("fc00::/7", "Unique-Local", "RFC 4193, RFC 8190", "2005-10", T, F),
    _row("fe80::/10", "Link-Local Unicast", "RFC 4291", "2006-02", F, F),
)

NOT_INTERNET_UNICAST: Final = (
    _row("224.0.0.0/4", "Multicast", "RFC 5771", "", F, F),
    *(
        _row(block, "Reserved by IETF", rfc, "", F, F)
        for block, rfc in (
            ("::/8", "RFC 4291"),
            ("100::/8", "RFC 4291"),
            ("200::/7", "RFC 4048"),
            ("400::/6", "RFC 4291"),
            ("800::/5", "RFC 4291"),
            ("1000::/4", "RFC 4291"),
            ("4000::/3", "RFC 4291"),
            ("6000::/3", "RFC 4291"),
            ("8000::/3", "RFC 4291"),
            ("a000::/3", "RFC 4291"),
            ("c000::/3", "RFC 4291"),
            ("e000::/4", "RFC 4291"),
            ("f000::/5", "RFC 4291"),
            ("f800::/6", "RFC 4291"),
            ("fe00::/9", "RFC 4291"),
        )
    ),
    _row("fc00::/7", "Unique Local Unicast", "RFC 4193", "", F, F),
    _row("fe80::/10", "Link-Scoped Unicast", "RFC 4291", "", F, F),
    _row("fec0::/10", "Reserved by IETF (site-local, deprecated)", "RFC 3879", "", F, F),
    _row("ff00::/8", "Multicast", "RFC 4291", "", F, F),
)
"""The IPv4 and IPv6 Address Space registries' blocks that are not unicast on the internet (those registries
have no Forwardable or Globally Reachable columns: False is Petrel's reading). IPv6: all but 2000::/3."""


def _most_specific(blocks: tuple[Block, ...], address: IPAddress) -> Block | None:
    holding = [block for block in blocks if address in block.network]
    return max(holding, key=lambda block: block.network.prefixlen, default=None)


def block_of(address: IPAddress) -> Block | None:
    """The block that decides whether the address is public (see the module's docstring); None: public unicast."""
    special = IPV4_SPECIAL if address.version == 4 else IPV6_SPECIAL
    return _most_specific(special, address) or _most_specific(NOT_INTERNET_UNICAST, address)


@dataclass(frozen=True, slots=True)
class Embedded:
    """The IPv4 address an IPv6 address carries, and the form that carries it."""

    form: str
    ipv4: ipaddress.IPv4Address

    def __str__(self) -> str:
        return f"{self.ipv4} ({self.form})"


def _low32(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)


def _compatible(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    return None if int(address) <= 1 else _low32(address)  # :: and ::1 are not IPv4-compatible addresses


def _teredo_client(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    teredo = address.teredo
    assert teredo is not None  # the address is in 2001::/32
    return teredo[1]


def _sixtofour(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    sixtofour = address.sixtofour
    assert sixtofour is not None  # the address is in 2002::/16
    return sixtofour


ReadIPv4: TypeAlias = Callable[[ipaddress.IPv6Address], ipaddress.IPv4Address | None]

EMBEDDING_FORMS: Final[tuple[tuple[ipaddress.IPv6Network, str, ReadIPv4], ...]] = (
    (ipaddress.IPv6Network("::ffff:0:0/96"), "IPv4-mapped, RFC 4291", _low32),
    (ipaddress.IPv6Network("::/96"), "IPv4-compatible, RFC 4291", _compatible),
    (ipaddress.IPv6Network("64:ff9b::/96"), "NAT64, RFC 6052", _low32),
    (ipaddress.IPv6Network("64:ff9b:1::/48"), "local-use NAT64, RFC 8215, read as a /96 prefix", _low32),
    (ipaddress.IPv6Network("2002::/16"), "6to4, RFC 3056", _sixtofour),
    (ipaddress.IPv6Network("2001::/32"), "Teredo client, RFC 4380", _teredo_client),
)
"""Where IPv6 addresses carry an IPv4 address. A local-use NAT64 prefix may be longer than /96 (RFC 6052 puts the
IPv4 address elsewhere then); it is refused unless allowlisted, and an operator who allowlists one of another
length knows the guard reads the last 32 bits."""


def embedded_ipv4(address: IPAddress) -> Embedded | None:
    """The IPv4 address an IPv6 address carries (IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo), or None."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    for network, form, read in EMBEDDING_FORMS:
        ipv4 = read(address) if address in network else None
        if ipv4 is not None:
            return Embedded(form, ipv4)
    return None
