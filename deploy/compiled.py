"""`python -m deploy.compiled`: compile the hot modules with mypyc, unless a build of these sources exists.

The Makefile runs it after installing (`make venv`, `make run`, `make test`). A build goes to
``.venv/petrel-compiled/<key>/`` (libs.compiled says how a process picks it up, and why never
beside the sources); `key` hashes every project source the hot modules import, the mypy
version and the interpreter's ABI. When the newest build's sources are the files there now,
nothing is done (a fraction of a second). Without a C compiler, Python's headers or mypyc,
it says so and leaves the plain modules to run; a build that fails says why and does the same
(the test of the compiled modules, tests/libs/test_compiled_modules.py, then fails).

The compiler's output goes to ``build.log`` in the build's directory, shown when it fails. A build is
also kept in the user's cache (``~/.cache/petrel-compiled/<key>/``, as pip keeps wheels): a fresh clone
of the same sources copies it instead of compiling.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Final

from libs.compiled import MANIFEST, NO_COMPILER, ROOT, SWITCH, Build, abi, builds_dir, current_build, file_hash

HOT_MODULES: Final = (
    "libs.codec",
    "libs.store.batch_heads",
    "libs.store.batch_append",
    "libs.store.commitlog",
    "libs.store.consume_queue",
    "libs.store.index_file",
    "libs.receipt",
)
"""What is compiled: the record codec, the store's append path and receipt handles. The lean transport and the hot
routes compiled (issue 29) cost the gateway more CPU a single send than plain (185 against 158 µs) and stretched the
send-to-receive p99 from 12 to 51 ms (`petrel bench sizing`, bench.consumeload latency, 2026-11-28): mypyc's
coroutines and its calls into starlette's and asyncio's Python objects cost more than the interpreter's, so they
stay plain."""
LEAKY_PRIMITIVES: Final = {"CPyBytes_Concat": "bytes + bytes"}
"""C calls that a mypyc release compiles with a leaked reference, checked for in a build's C (`leaks_in`). mypyc
1.20 marks `bytes + bytes` as taking over its left operand, which the C function never releases (mypyc/mypyc#1192,
fixed in python/mypy#21469): every message a broker received and acked left about 250 bytes behind (25 MB per
100,000 messages, without bound). The hot modules join bytes with `b"".join(...)` instead, and a build whose C still
calls one of these, under a mypyc that leaks with it, is refused (the plain modules run, and the suite's test of the
compiled modules fails)."""
GROUP: Final = "petrel_hot"
"""mypyc's name for the shared library of the build (the hot modules call each other natively in it)."""
OPT_LEVEL: Final = "3"
KEEP: Final = 6
"""Builds kept (worktrees sharing a virtualenv each use their own); older ones are deleted."""


def module_path(root: Path, name: str) -> Path | None:
    """The project file of a module under `root` (a package's __init__.py); None when it is not the project's."""
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def project_sources(root: Path, modules: tuple[str, ...]) -> list[str]:
    """The hot modules' files and every project file they import, transitively (packages' __init__ too)."""
    seen: dict[str, Path] = {}
    pending = list(modules)
    while pending:
        name = pending.pop()
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):  # a module's packages run first: their __init__ counts
            prefix = ".".join(parts[:depth])
            path = module_path(root, prefix)
            if path is not None and prefix not in seen:
                seen[prefix] = path
                pending.extend(_imports(path, prefix, is_package=path.name == "__init__.py"))
    return sorted(path.relative_to(root).as_posix() for path in seen.values())


def _imports(path: Path, name: str, *, is_package: bool) -> list[str]:
    package = name if is_package else name.rpartition(".")[0]
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found += [base, *(f"{base}.{alias.name}" for alias in node.names)]  # `from libs import jsonutil`
    return found


def build_key(sources: dict[str, str]) -> str:
    mypy_version = importlib.util.find_spec("mypy") and _mypy_version()
    text = json.dumps({"sources": sources, "abi": abi(), "mypy": mypy_version, "opt": OPT_LEVEL}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _mypy_version() -> str:
    from mypy.version import __version__

    return __version__


def missing_toolchain() -> str | None:
    """Why the hot modules cannot be compiled here; None when they can."""
    if importlib.util.find_spec("mypyc") is None:
        return "mypyc is not installed (pip install mypy)"
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler} is not on PATH)"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        return f"no Python headers (Python.h is not in {sysconfig.get_paths()['include']}: install python3-dev)"
    return None


def build(root: Path = ROOT) -> str:
    """Make sure a build of the current sources exists; what happened, in one line."""
    if os.environ.get(SWITCH, "").lower() == "off":
        return f"{SWITCH}=off: the hot modules are not compiled"
    found = current_build(root)
    if found is not None and found.hot == HOT_MODULES:  # a build of another list is rebuilt, and newer, wins
        os.utime(found.directory / MANIFEST)  # the newest: kept when older builds are deleted
        return f"compiled modules are current ({found.directory})"
    directory = builds_dir()
    directory.mkdir(parents=True, exist_ok=True)
    missing = missing_toolchain()
    if missing is not None:
        (directory / NO_COMPILER).write_text(missing + "\n")
        return f"{missing}: the plain modules run"
    (directory / NO_COMPILER).unlink(missing_ok=True)
    sources = {name: file_hash(root / name) for name in project_sources(root, HOT_MODULES)}
    key = build_key(sources)
    if _copy_whole(cache_dir() / key, directory / key, sources):
        return f"compiled modules copied from the cache ({cache_dir() / key})"
    return _compile(root, directory, sources)


def cache_dir() -> Path:
    """The user's cache of builds, as pip's of wheels: a fresh clone of the same sources copies one, not compiling."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "petrel-compiled"


def _copy_whole(source: Path, target: Path, sources: dict[str, str]) -> bool:
    """Copy the build at `source` to `target` (never half of it); False when there is no such build to copy."""
    build = Build.read(source)
    if build is None or build.sources != sources:
        return False
    partial = target.with_name(f".copying-{target.name}-{os.getpid()}")
    try:
        shutil.copytree(source, partial, dirs_exist_ok=True)
        os.utime(partial / MANIFEST)
        _put_in_place(partial, target)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)
        return False
    return True


def _compile(root: Path, directory: Path, sources: dict[str, str]) -> str:
    key = build_key(sources)
    target = directory / key
    work = directory / f".building-{key}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    (work / "out").mkdir(parents=True)
    started = time.monotonic()
    with (work / "build.log").open("w") as log:
        done = subprocess.run(
            [sys.executable, "-c", _COMPILE, str(work), GROUP, OPT_LEVEL, *_paths(HOT_MODULES)],
            cwd=root,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if done.returncode != 0:
        tail = (work / "build.log").read_text().splitlines()[-25:]
        return "\n".join(["compiling the hot modules failed: the plain modules run. The end of its log:", *tail])
    leaks = leaks_in(work / "c", leaky_primitives())
    if leaks:
        shutil.rmtree(work, ignore_errors=True)
        return (
            f"compiling the hot modules refused: {'; '.join(leaks)}, which mypyc {_mypy_version()} compiles with a "
            "leak (mypyc/mypyc#1192; join bytes with b''.join((a, b)) instead): the plain modules run"
        )
    modules = _extensions(work / "out")
    manifest = {"abi": abi(), "hot": list(HOT_MODULES), "modules": modules, "sources": sources}
    (work / "out" / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))  # last: the build is whole
    shutil.move(work / "build.log", work / "out" / "build.log")
    _put_in_place(work / "out", target)
    shutil.rmtree(work, ignore_errors=True)
    _prune(directory)
    if _copy_whole(target, cache_dir() / key, sources):  # best effort: a cache that cannot be written is no cache
        _prune(cache_dir())
    return f"compiled {len(HOT_MODULES)} hot modules in {time.monotonic() - started:.0f} s ({target})"


def leaky_primitives() -> dict[str, str]:
    """Those of LEAKY_PRIMITIVES this mypyc leaks with (C name -> what the Python says): `bytes + bytes` while its
    primitive is marked as taking over its left operand."""
    from mypyc.primitives import bytes_ops  # noqa: F401 - registers the bytes primitives
    from mypyc.primitives.registry import binary_ops

    return {
        op.c_function_name: LEAKY_PRIMITIVES[op.c_function_name]
        for op in binary_ops.get("+", ())
        if op.c_function_name in LEAKY_PRIMITIVES and op.steals == [True, False]
    }


def leaks_in(c_dir: Path, primitives: dict[str, str]) -> list[str]:
    """The generated C files that call a leaky primitive, by module ("libs/codec.py uses bytes + bytes")."""
    found: list[str] = []
    for path in sorted(c_dir.rglob("__native*.c")):  # what mypyc wrote of ours, not its runtime's own files
        text = path.read_text(errors="replace")
        for name, python in primitives.items():
            if f"{name}(" in text:
                found.append(f"{_source_of(path)} uses {python}")
    return found


def _source_of(c_file: Path) -> str:
    """The hot module a generated C file is of (mypyc names a module's file after it), else the file's name."""
    for module in HOT_MODULES:
        if module.replace(".", "___") in c_file.name or module.replace(".", "/") in c_file.as_posix():
            return module.replace(".", "/") + ".py"
    return c_file.name


def _put_in_place(made: Path, target: Path) -> None:
    """Rename a whole build to its place; one already there (another process made it meanwhile) is kept."""
    if (target / MANIFEST).is_file():
        shutil.rmtree(made, ignore_errors=True)
        return
    shutil.rmtree(target, ignore_errors=True)  # a build cut short before its manifest was written
    made.rename(target)


def _paths(modules: tuple[str, ...]) -> list[str]:
    return [name.replace(".", "/") + ".py" for name in modules]


def _extensions(out: Path) -> dict[str, str]:
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    found: dict[str, str] = {}
    for path in out.rglob(f"*{suffix}"):
        relative = path.relative_to(out).as_posix()
        found[relative.removesuffix(suffix).replace("/", ".")] = relative
    return found


def _prune(directory: Path) -> None:
    builds = sorted(
        (d for d in directory.iterdir() if (d / MANIFEST).is_file()),
        key=lambda d: (d / MANIFEST).stat().st_mtime,
        reverse=True,
    )
    for old in builds[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in [*directory.glob(".building-*"), *directory.glob(".copying-*")]:
        if time.time() - stale.stat().st_mtime > 3600:  # a build that was killed
            shutil.rmtree(stale, ignore_errors=True)


# Run in a child process (its compiler output goes to build.log): mypyc's C, one file a module (multi_file), then
# setuptools' build_ext, which compiles one extension's files one after another: here they are compiled on every core.
_COMPILE: Final = """
import os, sys
from concurrent.futures import ThreadPoolExecutor
from distutils.ccompiler import CCompiler
from setuptools import setup
from mypyc.build import mypycify

def compile_in_parallel(self, sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                        extra_preargs=None, extra_postargs=None, depends=None):
    macros, objects, extra_postargs, pp_opts, build = self._setup_compile(
        output_dir, macros, include_dirs, sources, depends, extra_postargs
    )
    cc_args = self._get_cc_args(pp_opts, debug, extra_preargs)
    def one(obj):
        source, ext = build[obj]
        self._compile(obj, source, ext, cc_args, extra_postargs, pp_opts)
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(one, objects))
    return objects

CCompiler.compile = compile_in_parallel
work, group, opt, *paths = sys.argv[1:]
options = ["--cache-dir", work + "/mypy-cache", "--no-warn-unused-configs"]
extensions = mypycify(
    [*options, *paths], opt_level=opt, target_dir=work + "/c", group_name=group, multi_file=True
)
setup(
    name="petrel-hot",
    ext_modules=extensions,
    script_args=["build_ext", "--build-lib", work + "/out", "--build-temp", work + "/tmp", "--parallel", "2"],
)
"""


def main() -> None:
    print(f"[petrel] {build()}")


if __name__ == "__main__":
    main()
