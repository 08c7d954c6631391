"""Colocated mode: the gateway and its one broker in one process (`petrel serve gateway --colocated`, `petrel up
--colocated`), for a single machine with one broker.

The broker is served as it is alone, on its own port: the timer, txcheck, push, the
nameserver and the CLI call it over HTTP, and it registers with the nameservers as
always. The gateway's calls to the broker's address are in-process ASGI calls
(libs.http.asgi.AsgiTransport) instead of HTTP over loopback; its calls to anything else
(nameservers, timer, push) go over TCP. Both apps share one event loop
(libs.http.serve.serve_together): the broker starts first, the gateway once the broker is
up, and on SIGTERM the gateway stops first, then the broker flushes and closes as it does
alone. Settings are each service's own variables (PETREL_BROKER_*, PETREL_GATEWAY_*, and
the shared PETREL_*).

A broker that is one of several copies (a slave, or a master under the controller) or a
gateway sharing its port with other processes has no place here: `refusal` names what
does not fit, before anything starts.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp

from gateway.app import create_app as gateway_app
from gateway.settings import GatewaySettings
from libs.broker_api.replication import BrokerRole
from libs.http.asgi import AsgiTransport, stateful
from libs.http.client import ClientOptions, tcp_transport
from libs.http.request_log import plain_lines
from libs.http.serve import Served, serve_together
from services.broker.app import create_app as broker_app
from services.broker.settings import BrokerSettings

ROLES = "gateway+broker"
"""How `petrel up` names the process (with the broker's name: gateway+broker-a)."""


def refusal(broker: BrokerSettings, gateway: GatewaySettings) -> str | None:
    """Why these settings cannot run colocated (None: they can)."""
    if broker.controlled or broker.role is BrokerRole.SLAVE:
        return (
            "colocated mode runs one broker without replicas: PETREL_BROKER_CONTROLLED and a SLAVE "
            "PETREL_BROKER_ROLE (petrel up --replicas) need separate processes"
        )
    if gateway.reuse_port:
        return (
            "colocated mode runs one gateway process: PETREL_GATEWAY_REUSE_PORT (petrel up --gateway-workers) "
            "needs separate processes"
        )
    return None


def main() -> None:
    """Serve the broker and the gateway in this process until a signal stops them (settings checked already)."""
    broker_settings = BrokerSettings()
    gateway_settings = GatewaySettings()
    if gateway_settings.request_log:
        plain_lines()
    in_process: dict[str, ASGIApp] = {}
    broker = broker_app(broker_settings)
    fallback = tcp_transport(ClientOptions(timeout=gateway_settings.broker_timeout_seconds))
    gateway = gateway_app(gateway_settings, transport=AsgiTransport(in_process, fallback=fallback))

    def broker_started(state: dict[str, Any]) -> None:
        in_process[broker_settings.address] = stateful(broker, state)

    serve_together([Served(broker, broker_settings, broker_started), Served(gateway, gateway_settings)])
