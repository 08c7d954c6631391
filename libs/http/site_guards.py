"""Guards of the gateway against callers a browser or a proxy brings (docs/security.md, "Browsers and proxies").

A web page can make a developer's browser call a gateway on 127.0.0.1 in two ways: as a
page of another site (its requests carry that site's `Origin` and `Sec-Fetch-Site:
cross-site`), or by rebinding its own name to 127.0.0.1 once loaded (its requests then
are same-origin, and carry that name in `Host`). A proxy in front of a gateway on
loopback makes it reachable from everywhere.

- `LoopbackHostCheck`: a gateway with auth off on loopback answers only to loopback names
  (`localhost`, 127.0.0.0/8, ::1) and only to calls no proxy relayed (`Forwarded`,
  `X-Forwarded-For`, `X-Forwarded-Host`, `X-Real-IP`, `Via`).
- `CrossSiteCheck`: a browser's call for a page of another site is refused: `Sec-Fetch-Site:
  cross-site`, or an `Origin` whose host is neither a loopback name, a name the gateway
  answers to, nor the request's own Host. Clients that are not browsers send neither.

Both answer before any body is read, as every guard (libs.http.guards).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

from starlette.types import Scope

from libs.egress import is_loopback_host
from libs.errors import CrossSiteRequest, HostNotAllowed
from libs.http.guards import HTTP_AND_WEBSOCKET, Refusal
from libs.http.hosts import host_name
from libs.http.middleware import header

FORWARDING_HEADERS: Final = (b"forwarded", b"x-forwarded-for", b"x-forwarded-host", b"x-real-ip", b"via")
"""What a proxy adds to the calls it relays (nginx only when configured to; Caddy, Traefik, Envoy by default)."""


def is_loopback_name(host: str) -> bool:
    """A Host (or Origin host) value naming this machine only: localhost, 127.0.0.0/8 or ::1, with any port."""
    return is_loopback_host(host_name(host).rstrip("."))


class LoopbackHostCheck:
    """The open gateway's rule: a loopback name in Host (or none), and no proxy in between."""

    KNOWN_MAX = 256
    """Host values already answered, kept to skip parsing them on the hot path."""

    scopes = HTTP_AND_WEBSOCKET

    def __init__(self, setting: str) -> None:
        """`setting`: what to set instead (a public URL), named in the refusal."""
        self.setting = setting
        self._known: set[bytes] = set()

    async def refusal(self, scope: Scope) -> Refusal | None:
        given = header(scope, b"host")
        if given is not None and given not in self._known and not self._answered(given):
            host = given.decode("latin-1")
            return Refusal(
                HostNotAllowed(
                    f"this gateway runs without API keys and answers only to localhost and loopback addresses, not "
                    f"to the Host {host!r} (a page that rebinds its name to this machine sends its own): call it by "
                    f"127.0.0.1 or localhost; to call it by a name, set {self.setting}, which turns API keys on",
                    host=host,
                    setting=self.setting,
                )
            )
        relayed = next((name for name in FORWARDING_HEADERS if header(scope, name) is not None), None)
        if relayed is not None:
            return Refusal(
                HostNotAllowed(
                    f"this gateway runs without API keys for this machine only, and this call came through a proxy "
                    f"({relayed.decode()}): set {self.setting} to the URL the proxy serves, which turns API keys on",
                    host=(given or b"").decode("latin-1"),
                    setting=self.setting,
                )
            )
        return None

    def _answered(self, given: bytes) -> bool:
        if not is_loopback_name(given.decode("latin-1")):
            return False
        if len(self._known) < self.KNOWN_MAX:
            self._known.add(given)
        return True


class CrossSiteCheck:
    """Refuses a browser's call for a page of another site; a call without those headers (curl, SDKs) passes."""

    scopes = HTTP_AND_WEBSOCKET

    def __init__(self, names: Iterable[str] = ()) -> None:
        """`names`: hosts (`name` or `name:port`) whose pages may call, besides loopback names and the Host called."""
        self.names = frozenset(host_name(name).rstrip(".") for name in names)

    async def refusal(self, scope: Scope) -> Refusal | None:
        if header(scope, b"sec-fetch-site") == b"cross-site":
            return Refusal(
                CrossSiteRequest(
                    "a page of another site sent this call (Sec-Fetch-Site: cross-site): the gateway answers "
                    "browsers only for its own pages and this machine's",
                    sec_fetch_site="cross-site",
                )
            )
        origin = header(scope, b"origin")
        if origin is None or self._same_site(origin.decode("latin-1"), header(scope, b"host")):
            return None
        return Refusal(
            CrossSiteRequest(
                f"a page of another site ({origin.decode('latin-1')!r}) sent this call: the gateway answers "
                "browsers only for its own pages and this machine's",
                origin=origin.decode("latin-1"),
            )
        )

    def _same_site(self, origin: str, host: bytes | None) -> bool:
        try:
            name = urlsplit(origin).hostname
        except ValueError:
            return False
        if not name or origin == "null":
            return False
        called = host_name(host.decode("latin-1")).rstrip(".") if host is not None else None
        return is_loopback_host(name) or name.rstrip(".") in self.names or name.rstrip(".") == called
