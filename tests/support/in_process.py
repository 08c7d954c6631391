"""An app running in this process (its lifespan run by `libs.http.asgi.running`), known by its address.

Peers reach it through `AsgiTransport` (which routes its address to it); a test
calls it with `client()`, an httpx client calling it in-process.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from starlette.types import ASGIApp


@dataclass(frozen=True)
class InProcessApp:
    app: ASGIApp
    port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url=self.url)
