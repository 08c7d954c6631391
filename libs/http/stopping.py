"""The server is stopping: what an app's endless responses (a slave's CommitLog stream) hear, to end at once.

uvicorn's graceful shutdown lets every response in flight finish, up to its timeout; a
response that never finishes by itself would hold each stop for that long. The server
(libs.http.serve's, and the tests') announces its stop first; each callback an app
registered with `on_stopping` runs then, in the server's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

CALLBACKS = "stopping_callbacks"


def on_stopping(app: Any, callback: Callable[[], None]) -> Callable[[], None]:
    """Call `callback` when the server serving `app` starts to stop; the function that unregisters it."""
    callbacks: list[Callable[[], None]] = getattr(app.state, CALLBACKS, None) or []
    callbacks.append(callback)
    setattr(app.state, CALLBACKS, callbacks)
    return lambda: callbacks.remove(callback) if callback in callbacks else None


def announce_stopping(app: Any) -> None:
    """The server serving `app` is stopping: run what `on_stopping` registered."""
    state = getattr(app, "state", None)
    for callback in list(getattr(state, CALLBACKS, None) or []):
        callback()


STOP_SERVER = "stop_server"
RESTART_REASON = "restart_reason"


def request_restart(app: Any, reason: str) -> None:
    """The app asks to be built and served again (a broker's new role): the server stops, and the service's
    `__main__` serves a new app when `restart_reason(app)` says so."""
    setattr(app.state, RESTART_REASON, reason)
    stop: Callable[[], None] | None = getattr(app.state, STOP_SERVER, None)
    if stop is not None:
        stop()


def restart_reason(app: Any) -> str | None:
    return getattr(getattr(app, "state", None), RESTART_REASON, None)


STOP_SIGNALLED = "stop_signalled"


def stop_signalled(app: Any) -> asyncio.Event:
    """Set when a stop signal came for the server serving `app` (libs.http.serve ends a start it interrupts)."""
    event: asyncio.Event | None = getattr(app.state, STOP_SIGNALLED, None)
    if event is None:
        event = asyncio.Event()
        setattr(app.state, STOP_SIGNALLED, event)
    return event
