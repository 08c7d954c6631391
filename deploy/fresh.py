"""`petrel up --fresh`: start over, with none of the cluster's data (topics, messages, keys, logs, token).

The data directory is wiped after one line says so, and the cluster's txcheck and ETL keys in Redis (their
prefixes are the data directory's, libs.settings.cluster_key_prefix) are deleted once the Redis is known.
Refused while a `petrel up` runs on that directory, and for a directory that holds something but no cluster
(no `cluster.token`): `--fresh --data-dir ~` must not empty a home directory.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import cast

import redis

from libs.cluster_token import TOKEN_FILE_NAME
from libs.settings import cluster_key_prefix

PREFIXED_SERVICES = ("txcheck", "etl")


class CannotStartOver(ValueError):
    """The data directory is in use or is not a cluster's."""


def wipe_data_dir(data_dir: Path, say: Callable[[str], None] = print) -> bool:
    """Delete `data_dir` after saying so; False when there was nothing to delete."""
    if not data_dir.exists() or not any(data_dir.iterdir()):
        return False
    if not (data_dir / TOKEN_FILE_NAME).exists():
        raise CannotStartOver(
            f"--fresh: {data_dir} holds files but no {TOKEN_FILE_NAME}, so it is no cluster's data directory; "
            "nothing was deleted"
        )
    if (pid := _running_supervisor(data_dir)) is not None:
        raise CannotStartOver(f"--fresh: a `petrel up` (pid {pid}) runs on {data_dir}; stop it first")
    say(f"[petrel] --fresh: deleting {data_dir}/ (every topic, message, key, log and the cluster token) ...")
    shutil.rmtree(data_dir)
    return True


def forget_redis_keys(data_dir: Path, redis_url: str) -> int:
    """Delete the keys (and Celery queues) of this data directory's txcheck and ETL; how many were deleted."""
    client = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=2)
    deleted = 0
    try:
        for service in PREFIXED_SERVICES:
            keys = list(client.scan_iter(match=f"{cluster_key_prefix(service, data_dir)}*", count=1000))
            for start in range(0, len(keys), 500):
                deleted += cast(int, client.delete(*keys[start : start + 500]))
    finally:
        client.close()
    return deleted


def _running_supervisor(data_dir: Path) -> int | None:
    """The pid of the `petrel up` whose state file is under `data_dir`, if that process still runs."""
    try:
        pid = int(json.loads((data_dir / "run" / "cluster.json").read_text())["supervisor_pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid if pid != os.getpid() else None
