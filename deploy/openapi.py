"""The committed OpenAPI specs under `openapi/`: rendering, writing, checking for staleness."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI


def _apps() -> dict[str, Callable[[], FastAPI]]:
    from gateway.app import create_app as gateway_app
    from gateway.settings import GatewaySettings
    from services.broker.app import create_app as broker_app
    from services.broker.settings import BrokerSettings
    from services.nameserver.app import create_app as nameserver_app
    from services.nameserver.settings import NameserverSettings
    from services.push.app import create_app as push_app
    from services.push.settings import PushSettings
    from services.timer.app import create_app as timer_app
    from services.timer.settings import TimerSettings
    from services.txcheck.app import create_app as txcheck_app
    from services.txcheck.settings import TxcheckSettings

    return {
        "gateway": lambda: gateway_app(GatewaySettings()),
        "nameserver": lambda: nameserver_app(NameserverSettings()),
        "broker": lambda: broker_app(BrokerSettings()),
        "timer": lambda: timer_app(TimerSettings()),
        "push": lambda: push_app(PushSettings()),
        "txcheck": lambda: txcheck_app(TxcheckSettings()),
    }


def render_specs() -> dict[str, str]:
    """File name -> the spec's text, as `petrel openapi` writes it."""
    return {f"{name}.json": json.dumps(factory().openapi(), indent=2) + "\n" for name, factory in _apps().items()}


def stale_specs(directory: Path) -> list[str]:
    return [
        name
        for name, text in render_specs().items()
        if not (directory / name).exists() or (directory / name).read_text() != text
    ]


def write_specs(directory: Path) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_specs().items():
        path = directory / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(name)
    return written
