"""Finding the Redis that Celery and idempotency keys use, or starting a private one.

DESIGN section 5: PETREL_REDIS_URL (or `--redis-url`) when set, its password and
TLS tried before anything starts; else redis://127.0.0.1:6379/0 when it answers;
else a private `redis-server` when one is installed; else stop with a clear message.
A Redis that asks for a password the URL does not give is such a message too.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import redis

from libs.redis_url import failure, masked

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


class RedisNotAvailable(RuntimeError):
    pass


def redis_answers(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something at host:port answers PING like Redis."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            reply = sock.recv(64)
    except OSError:
        return False
    return reply.startswith((b"+PONG", b"-NOAUTH"))


def redis_refusal(url: str, timeout: float = 2.0) -> str | None:
    """Why the Redis at `url` cannot be used, its password masked; None when it answers PING with the URL's
    password and TLS."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    except ValueError as exc:
        return f"{masked(url)} is not a Redis URL Petrel can use: {exc}"
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        return failure(url, exc)
    except TypeError as exc:  # an option in the URL's query that redis-py does not know
        return f"{masked(url)} is not a Redis URL Petrel can use: {exc}"
    finally:
        client.close()
    return None


def private_redis_command(port: int, data_dir: Path) -> list[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisNotAvailable(
            "no Redis answers on 127.0.0.1:6379 and no redis-server is installed: "
            "install Redis (e.g. `apt-get install redis-server`) or set PETREL_REDIS_URL to a running one"
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    return [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(data_dir),
    ]
