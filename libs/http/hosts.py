"""A Host header's name: what the Host checks compare (libs.http.middleware, libs.http.site_guards) and the
gateway's settings validate, in a module of its own so that settings import it without the web stack."""

from __future__ import annotations

import ipaddress


def host_name(host: str) -> str:
    """A Host header's name or address, lower-cased, without its port or an IPv6 address's brackets."""
    value = host.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[1:end] if end > 0 else value
    if is_ip_address(value):  # an IPv6 address sent without brackets
        return value
    name, colon, port = value.rpartition(":")
    return name if colon and port.isascii() and port.isdigit() else value


def is_ip_address(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True
