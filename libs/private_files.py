"""Private files: secrets at rest readable by this user only.

A file that holds a secret (a receipt-signing key, a cluster token, a metadata
database with signing secrets) is created with mode 0600 from its first byte,
never created with the umask's mode and narrowed afterwards; a folder that this
module creates for one is 0700. A secret file found more open than 0600 (made
by an older Petrel, or by hand) is narrowed at start, with a warning.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

FILE_MODE: Final = 0o600
FOLDER_MODE: Final = 0o700


def write_private(path: Path, data: bytes) -> None:
    """Replace `path` with `data`, mode 0600: a crash leaves the old file or the new one, never a mix.

    The bytes go to a 0600 temporary file beside `path`, are synced and renamed over it;
    a missing folder is made 0700.
    """
    _make_folder(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mkstemp: 0600
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _sync_folder(path.parent)


def ensure_private(path: Path, *, create: bool = True) -> None:
    """Make `path` a file of mode 0600: created empty when missing (unless `create` is false), an existing
    one readable or writable by others narrowed, with a warning naming it."""
    if create:
        _make_folder(path.parent)
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
        except FileExistsError:
            pass
        else:
            return
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if mode & 0o077:
        path.chmod(mode & 0o700)
        log.warning("%s was readable by other users (mode %o): narrowed to %o", path, mode, mode & 0o700)


def _make_folder(folder: Path) -> None:
    if not folder.is_dir():
        folder.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
