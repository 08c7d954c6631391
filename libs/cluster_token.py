"""The cluster token: the shared secret every internal call carries (header `x-petrel-internal-token`).

`petrel up` creates it once, 32 random bytes (URL-safe base64), in
`<data_dir>/cluster.token`, mode 0600, and gives every child the file's path
(`PETREL_INTERNAL_TOKEN_FILE`), never the token itself: a command line or an
environment is readable by more people than a 0600 file. A restart reuses the
file; a new file (and a restart of every service) rotates the token.

A service reads the file at start and refuses to start when it is missing,
unreadable, empty, shorter than 32 bytes (`MIN_TOKEN_BYTES`, as is a token
given in `PETREL_INTERNAL_TOKEN`), or readable by its group or others. A service that listens
on an address other than loopback refuses to start without a token at all
(`require_token_off_loopback`): on loopback, only local processes reach it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path
from typing import Final

from libs.egress import is_loopback_host

TOKEN_FILE_NAME: Final = "cluster.token"
TOKEN_FILE_SETTING: Final = "PETREL_INTERNAL_TOKEN_FILE"
TOKEN_SETTING: Final = "PETREL_INTERNAL_TOKEN"
TOKEN_BYTES: Final = 32
INTERNAL_TOKEN_HEADER: Final = "x-petrel-internal-token"
"""The header an internal call carries the token in (libs.http.client sends it, libs.http.middleware checks it)."""
MIN_TOKEN_BYTES: Final = 32
"""Of a token given by hand: the random bytes of one `petrel up` makes are as many (its text is longer)."""


class ClusterTokenError(RuntimeError):
    """The cluster token cannot be used (or is missing where one is required): the message says what to do."""


def token_file_of(data_dir: Path) -> Path:
    """Where `petrel up` keeps the cluster token of the cluster whose data is in `data_dir`."""
    return data_dir / TOKEN_FILE_NAME


def ensure_token_file(path: Path) -> Path:
    """The token file at `path`: created (mode 0600, never seen empty) if there is none, else checked and reused."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        _create(path)
    read_token_file(path)
    return path


def _create(path: Path) -> None:
    """Written whole to a private temporary file, then linked into place: a reader finds no file or the token."""
    scratch = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(TOKEN_BYTES) + "\n")
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileExistsError):  # another `petrel up` made one meanwhile: theirs is used
            os.link(scratch, path)
    finally:
        scratch.unlink(missing_ok=True)


def read_token_file(path: Path) -> str:
    """The token in `path` (whitespace stripped); ClusterTokenError if the file cannot be used."""
    where = f"the cluster token file {path} ({TOKEN_FILE_SETTING})"
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise ClusterTokenError(f"{where} is not a regular file")
        if info.st_mode & 0o077:
            raise ClusterTokenError(
                f"{where} is open to its group or others (mode {stat.S_IMODE(info.st_mode):04o}); "
                f"make it private: chmod 600 {path}"
            )
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ClusterTokenError(f"cannot read {where}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ClusterTokenError(f"{where} is not text") from None
    if not token:
        raise ClusterTokenError(
            f"{where} is empty; delete it for `petrel up` to make a new one, or write the cluster's token into it"
        )
    if (short := too_short(token)) is not None:
        raise ClusterTokenError(f"{where} {short.removeprefix('the cluster token ')}")
    return token


def too_short(token: str) -> str | None:
    """Why `token` cannot be the cluster's (it is under MIN_TOKEN_BYTES), or None; never names the token."""
    size = len(token.encode())
    if size >= MIN_TOKEN_BYTES:
        return None
    return (
        f"the cluster token is {size} bytes long; it must be at least {MIN_TOKEN_BYTES}: a short one can be guessed "
        f"by whoever reaches an internal port (`petrel up` makes one of 43 characters in <data_dir>/{TOKEN_FILE_NAME})"
    )


def require_token_off_loopback(service: str, host: str, token: str | None) -> None:
    """ClusterTokenError when `service` listens on `host`, not loopback, without a cluster token."""
    if token or is_loopback_host(host):
        return
    raise ClusterTokenError(
        f"the {service} listens on {host}, which other machines can reach, and has no cluster token: "
        f"set {TOKEN_FILE_SETTING} to the cluster's token file (`petrel up` writes <data_dir>/{TOKEN_FILE_NAME}; "
        f"copy it, mode 0600, to each host) or {TOKEN_SETTING}"
    )
