"""The test suite's own rules, checked so they cannot rot.

A test module imports no other test module (shared helpers live in `tests/support`),
and no test file outside `tests/support` defines its own clock (use `FakeClock`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).parent
SUPPORT = TESTS / "support"

NOT_YET: dict[str, str] = {
    "gateway/conftest.py": "tests.conftest",
}
"""Imports of a test module not yet moved to tests.support, by file (owned by another branch of issue 11).

Each entry must still be true: once the file imports from tests.support, delete its entry here.
"""


def suite_files() -> Iterator[Path]:
    for path in sorted(TESTS.rglob("*.py")):
        if SUPPORT not in path.parents:
            yield path


def imported_modules(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def is_test_module(module: str) -> bool:
    return (module == "tests" or module.startswith("tests.")) and not (
        module == "tests.support" or module.startswith("tests.support.")
    )


def cross_imports() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in suite_files():
        tree = ast.parse(path.read_text(), str(path))
        modules = sorted({m for m in imported_modules(tree) if is_test_module(m)})
        if modules:
            found[path.relative_to(TESTS).as_posix()] = modules
    return found


def test_no_test_module_imports_another_test_module() -> None:
    found = cross_imports()
    offenders = {f: m for f, m in found.items() if f not in NOT_YET}
    assert offenders == {}, (
        f"test files import other test modules (move the shared helpers to tests/support): {offenders}"
    )


def test_every_pending_exception_is_still_needed() -> None:
    found = cross_imports()
    stale = {f: m for f, m in NOT_YET.items() if m not in found.get(f, [])}
    assert stale == {}, f"these files no longer import a test module; delete their entries from NOT_YET: {stale}"


def test_no_test_file_defines_a_clock() -> None:
    clocks = [
        f"{path.relative_to(TESTS).as_posix()}:{node.lineno} class {node.name}"
        for path in suite_files()
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ClassDef) and node.name.endswith("Clock")
    ]
    assert clocks == [], f"test files define their own clock (use tests.support.clock.FakeClock): {clocks}"
