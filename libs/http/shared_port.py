"""Listening sockets that several processes share: SO_REUSEPORT (Linux), for the gateway's workers.

Each process opens its own sockets on the one address and port; the kernel spreads
new connections among the processes listening there, and a process that dies drops
out of the group. A port may be shared only by sockets that all ask for it and belong
to the same user, so a stray process of another user cannot take a share.

The sockets are returned bound but not listening: uvicorn listens once the app's
lifespan has started (asyncio's and uvloop's `create_server` call `listen`), so a
worker that is still starting, or fails to start, is handed no connection.
"""

from __future__ import annotations

import socket


def shared_port_sockets(host: str, port: int) -> list[socket.socket]:
    """One socket per address `host` resolves to (as asyncio's `create_server` binds them), port shared.

    OSError naming the address when one cannot be bound (the port is held by a process that does not share it).
    """
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # as asyncio: the v4 socket is apart
            _bind(sock, address)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _bind(sock: socket.socket, address: tuple[object, ...]) -> None:
    try:
        sock.bind(address)
    except OSError as exc:
        raise OSError(
            exc.errno,
            f"cannot share {address[0]}:{address[1]} (SO_REUSEPORT): {exc.strerror}; is a process "
            "that does not share it, or another user's, listening there?",
        ) from exc
