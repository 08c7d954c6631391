"""The test suite's own rules, checked so they cannot rot.

A test module imports no other test module (shared helpers live in `tests/support`);
no test file outside `tests/support` defines its own clock (use `FakeClock`) or waits
on the wall clock with a sleep (await an event, or poll with `tests.support.waiting`).
The README stays under README_MAX_LINES lines: what does not fit goes to a page of docs/.
A module that imports Spark lives where the `spark` marker is given (`make test-fast` leaves those out).
The code never ends a task with `suppress(CancelledError)` around its await: that swallows a cancellation of the
caller arriving meanwhile (`libs.tasks.cancelled` ends tasks).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

from tests.support.markers import SPARK_IMPORTS, SPARK_PATHS, starts_spark

TESTS = Path(__file__).parent
SUPPORT = TESTS / "support"
README = TESTS.parent / "README.md"
CODE = [TESTS.parent / part for part in ("libs", "services", "gateway", "deploy", "bench")]
README_MAX_LINES = 150


def suite_files() -> Iterator[Path]:
    for path in sorted(TESTS.rglob("*.py")):
        if SUPPORT not in path.parents:
            yield path


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A test file's syntax tree, parsed once for all the rules here."""
    return ast.parse(path.read_text(), str(path))


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
        modules = sorted({m for m in imported_modules(parsed(path)) if is_test_module(m)})
        if modules:
            found[path.relative_to(TESTS).as_posix()] = modules
    return found


def test_no_test_module_imports_another_test_module() -> None:
    offenders = cross_imports()
    assert offenders == {}, (
        f"test files import other test modules (move the shared helpers to tests/support): {offenders}"
    )


def test_no_test_file_defines_a_clock() -> None:
    clocks = [
        f"{path.relative_to(TESTS).as_posix()}:{node.lineno} class {node.name}"
        for path in suite_files()
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.ClassDef) and node.name.endswith("Clock")
    ]
    assert clocks == [], f"test files define their own clock (use tests.support.clock.FakeClock): {clocks}"


SLOW_PEERS: dict[str, str] = {
    "libs/test_slow_clients.py": "a client that trickles its request, a few bytes at a time",
    "e2e/test_transactions.py": "a producer that answers slowly, so checks are in flight when txcheck is killed",
    "services/push/test_delivery.py": "an endpoint that answers after the push's timeout",
}
"""Files whose sleep is the behaviour under test (a peer that takes its time), not a wait."""


def sleeps(tree: ast.Module) -> Iterator[int]:
    """Lines calling time.sleep or asyncio.sleep with anything but 0 (a yield to the loop)."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "sleep"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in {"time", "asyncio"}
            and not (node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == 0)
        ):
            yield node.lineno


def test_no_test_waits_on_the_wall_clock() -> None:
    found = {
        path.relative_to(TESTS).as_posix(): lines for path in suite_files() if (lines := list(sleeps(parsed(path))))
    }
    offenders = {f: lines for f, lines in found.items() if f not in SLOW_PEERS}
    assert offenders == {}, f"tests sleep (await an event, or use tests.support.waiting): {offenders}"
    assert set(SLOW_PEERS) <= set(found), f"no longer sleeping, delete from SLOW_PEERS: {set(SLOW_PEERS) - set(found)}"


def test_the_readme_stays_under_its_line_budget() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) < README_MAX_LINES, (
        f"README.md has {len(lines)} lines; it stays under {README_MAX_LINES}: move detail to a page of docs/"
    )


def imports_spark(module: str) -> bool:
    return any(module == name or module.startswith(f"{name}.") for name in SPARK_IMPORTS)


def test_every_module_that_imports_spark_is_marked_spark() -> None:
    """A test module that imports pyspark or the Spark helpers starts a JVM: under tests.support.markers.SPARK_PATHS
    it carries the `spark` marker, and `make test-fast` (the quick loop) leaves it out."""
    unmarked = [
        path.relative_to(TESTS).as_posix()
        for path in suite_files()
        if not starts_spark(path) and any(imports_spark(m) for m in imported_modules(parsed(path)))
    ]
    assert unmarked == [], f"modules import Spark but are not marked `spark` (tests.support.markers): {unmarked}"
    assert all(place.exists() for place in SPARK_PATHS), "a path of tests.support.markers.SPARK_PATHS is gone"


def cancellation_swallowed(tree: ast.Module) -> Iterator[int]:
    """Lines of `with suppress(..., CancelledError, ...):` blocks."""
    for node in ast.walk(tree):
        if isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                call = item.context_expr
                if (
                    isinstance(call, ast.Call)
                    and ast.unparse(call.func).endswith("suppress")
                    and any(ast.unparse(arg).endswith("CancelledError") for arg in call.args)
                ):
                    yield node.lineno


def test_no_code_swallows_a_cancellation_while_it_ends_a_task() -> None:
    found = {
        path.relative_to(TESTS.parent).as_posix(): lines
        for part in CODE
        for path in sorted(part.rglob("*.py"))
        if (lines := list(cancellation_swallowed(parsed(path))))
    }
    assert found == {}, f"use libs.tasks.cancelled (a caller's cancellation would be swallowed): {found}"
