"""Compiled hot modules: load a module's mypyc build only when it was built from the source there now.

`python -m deploy.compiled` (run by `make venv`, `make run` and `make test`) compiles the hot
modules (deploy.compiled.HOT_MODULES) with mypyc into a build directory under the virtualenv,
``<sys.prefix>/petrel-compiled/<key>/``, never beside the sources: with an editable install a
``.so`` beside its ``.py`` would win the import even after the ``.py`` was edited. Each build
has a manifest: the modules it holds, and the SHA-256 of every project source file mypy read to
compile them (the compiled modules and what they import of the project, whose ``Final``
constants the compiled code may have inlined).

`CompiledFinder`, installed first on `sys.meta_path` by ``libs/__init__.py`` (so every process
that imports any ``libs`` module has it, `python -m services.broker` included), answers for
those modules with the extension of the newest build whose every recorded hash equals the
file's current hash; with none, it answers nothing and Python loads the plain ``.py``. The
manifest is a build's last file, written after its extensions: a build cut short is never used.

``PETREL_COMPILED=off`` in the environment turns the finder off (the plain modules load).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Final

SWITCH: Final = "PETREL_COMPILED"
"""`off`: use the plain modules even where a current build exists."""
MANIFEST: Final = "manifest.json"
NO_COMPILER: Final = "no-compiler"
"""A file in the builds' directory, written by a build that found no C compiler (it says why)."""
ROOT: Final = Path(__file__).resolve().parent.parent
"""The project's source tree: the directory holding the `libs` package."""


def builds_dir(prefix: str | None = None) -> Path:
    """Where builds live: in the virtualenv, beside what pip installed (one per key)."""
    return Path(prefix or sys.prefix) / "petrel-compiled"


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def abi() -> str:
    """What a build's extensions are for: they load only into this interpreter's ABI."""
    return f"{sys.implementation.cache_tag}{importlib.machinery.EXTENSION_SUFFIXES[0]}"


@dataclass(frozen=True, slots=True)
class Build:
    directory: Path
    modules: dict[str, str]
    """Module name -> its extension's path, relative to the build directory (the group's library included)."""
    sources: dict[str, str]
    """Project file (relative to ROOT) -> SHA-256 of the source the build was compiled from."""
    hot: tuple[str, ...]
    """The compiled project modules, in the order the build lists them."""

    @classmethod
    def read(cls, directory: Path) -> Build | None:
        try:
            manifest = json.loads((directory / MANIFEST).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(manifest, dict) or manifest.get("abi") != abi():
            return None
        return cls(directory, dict(manifest["modules"]), dict(manifest["sources"]), tuple(manifest["hot"]))

    def is_current(self, root: Path, hashes: dict[str, str | None]) -> bool:
        """Every source the build was compiled from is, byte for byte, the file under `root` now."""
        for name, recorded in self.sources.items():
            if name not in hashes:
                path = root / name
                hashes[name] = file_hash(path) if path.is_file() else None
            if hashes[name] != recorded:
                return False
        return True


def current_build(root: Path = ROOT, prefix: str | None = None) -> Build | None:
    """The newest build compiled from the sources under `root` as they are now; None when there is none."""
    directory = builds_dir(prefix)
    try:
        candidates = sorted(
            (d for d in directory.iterdir() if (d / MANIFEST).is_file()),
            key=lambda d: (d / MANIFEST).stat().st_mtime,
            reverse=True,
        )
    except OSError:
        return None
    hashes: dict[str, str | None] = {}
    for candidate in candidates:
        build = Build.read(candidate)
        if build is not None and build.is_current(root, hashes):
            return build
    return None


class CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds the current build's extension for a hot module; None (the plain source) for everything else."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self._build: Build | None = None
        self._looked = False

    @property
    def build(self) -> Build | None:
        if not self._looked:  # at the first import it is asked about, not when installed: most names are not hot
            self._build, self._looked = current_build(self.root), True
        return self._build

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not (fullname.startswith("libs.") or fullname.endswith("__mypyc")):
            return None
        build = self.build
        if build is None or fullname not in build.modules:
            return None
        location = str(build.directory / build.modules[fullname])
        loader = importlib.machinery.ExtensionFileLoader(fullname, location)
        return importlib.machinery.ModuleSpec(fullname, loader, origin=location)


def install() -> CompiledFinder | None:
    """Put the finder first on sys.meta_path (once); None when PETREL_COMPILED=off."""
    for finder in sys.meta_path:
        if isinstance(finder, CompiledFinder):
            return finder
    if os.environ.get(SWITCH, "").lower() in {"off", "0", "false", "no"}:
        return None
    finder = CompiledFinder()
    sys.meta_path.insert(0, finder)
    return finder


def describe() -> str:
    """What this process runs: 'compiled: codec, commitlog, ...' or 'plain modules (why)', for a startup line."""
    finder = next((f for f in sys.meta_path if isinstance(f, CompiledFinder)), None)
    if finder is None:
        return f"plain modules ({SWITCH}=off)"
    if finder.build is None:
        reason = _no_compiler_reason()
        if reason is not None:
            return f"plain modules (no compiler: {reason})"
        return "plain modules (no build of these sources: python -m deploy.compiled)"
    # mypyc's library loads the modules of its build that the first one imports itself, not through the finder
    loaded = [name.rsplit(".", 1)[-1] for name in finder.build.hot if is_compiled(sys.modules.get(name))]
    return f"compiled: {', '.join(loaded)}" if loaded else "compiled modules available, none of them used here"


def _no_compiler_reason() -> str | None:
    try:
        return (builds_dir() / NO_COMPILER).read_text().strip() or "none found"
    except OSError:
        return None


def is_compiled(module: ModuleType | None) -> bool:
    """The module was loaded from a build's extension, not from its source."""
    location = getattr(module, "__file__", None) or ""
    return location.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
