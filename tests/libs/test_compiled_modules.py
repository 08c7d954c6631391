"""The compiled hot modules (libs.compiled, deploy.compiled): loaded only while built from the sources there now.

Each check runs a fresh interpreter (an import is made once a process), on this tree or on a copy of it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.compiled import HOT_MODULES, LEAKY_PRIMITIVES, build, leaks_in, missing_toolchain
from libs.compiled import ROOT, SWITCH, builds_dir, current_build

pytestmark = pytest.mark.timeout(600)
"""The first test may wait for a build (`compiled`): under a minute on a quiet machine, two under load."""

SHOW = """
import importlib, sys
from libs.compiled import describe
for name in sys.argv[1:]:
    module = importlib.import_module(name)
    print(name, module.__file__, getattr(module, "EDITED", False))
print(describe())
"""


def loaded(root: Path, *modules: str, switch: str | None = None) -> dict[str, str]:
    """Where each module was loaded from, in a fresh process on the tree at `root` (and 'describe': its line)."""
    env = {k: v for k, v in os.environ.items() if k != SWITCH} | {"PYTHONPATH": str(root)}
    if switch is not None:
        env[SWITCH] = switch
    out = subprocess.run(
        [sys.executable, "-c", SHOW, *modules], cwd=root, env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    found = {name: f"{where} edited={edited}" for name, where, edited in (line.split() for line in out[:-1])}
    return found | {"describe": out[-1]}


@pytest.fixture(scope="module")
def compiled() -> None:
    """A build of this tree's sources (deploy.compiled builds one when there is none: `make test` has)."""
    missing = missing_toolchain()
    if missing is not None:
        pytest.skip(f"the hot modules cannot be compiled here: {missing}")
    if current_build() is None:
        print(build())
    assert current_build() is not None, "deploy.compiled made no build of these sources"


@pytest.fixture
def copied_tree(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "libs", tmp_path / "libs", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


@pytest.mark.usefixtures("compiled")
def test_the_current_build_is_what_loads() -> None:
    found = loaded(ROOT, *HOT_MODULES)
    for name in HOT_MODULES:
        assert found[name].startswith(str(builds_dir())), f"{name} was not loaded compiled: {found[name]}"
        assert found[name].endswith(".so edited=False")
    assert (
        found["describe"] == "compiled: codec, batch_heads, batch_append, commitlog, consume_queue, index_file, receipt"
    )


@pytest.mark.usefixtures("compiled")
def test_a_copy_of_the_same_sources_loads_the_build(copied_tree: Path) -> None:
    found = loaded(copied_tree, "libs.codec")
    assert found["libs.codec"].startswith(str(builds_dir()))


@pytest.mark.usefixtures("compiled")
def test_an_edited_module_loads_from_its_source_not_from_the_stale_build(copied_tree: Path) -> None:
    codec = copied_tree / "libs" / "codec.py"
    codec.write_text(codec.read_text() + "\nEDITED = True\n")
    found = loaded(copied_tree, "libs.codec", "libs.store.commitlog")
    assert found["libs.codec"] == f"{codec} edited=True"
    # the build's modules call each other natively: one edited source retires the whole build
    assert found["libs.store.commitlog"] == f"{copied_tree / 'libs' / 'store' / 'commitlog.py'} edited=False"
    assert found["describe"] == "plain modules (no build of these sources: python -m deploy.compiled)"


@pytest.mark.usefixtures("compiled")
def test_an_edited_import_of_a_hot_module_retires_the_build(copied_tree: Path) -> None:
    """A compiled module may hold another module's Final constants inlined: the build records those sources too."""
    message = copied_tree / "libs" / "message.py"
    message.write_text(message.read_text() + "\nEDITED = True\n")
    found = loaded(copied_tree, "libs.codec", "libs.message")
    assert found["libs.codec"] == f"{copied_tree / 'libs' / 'codec.py'} edited=False"
    assert found["libs.message"] == f"{message} edited=True"


@pytest.mark.usefixtures("compiled")
def test_petrel_compiled_off_loads_the_plain_modules() -> None:
    found = loaded(ROOT, "libs.codec", switch="off")
    assert found["libs.codec"] == f"{ROOT / 'libs' / 'codec.py'} edited=False"
    assert found["describe"] == "plain modules (PETREL_COMPILED=off)"


@pytest.mark.usefixtures("compiled")
def test_a_build_of_another_module_list_is_rebuilt_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The current sources' build was made for HOT_MODULES: a change of the list alone (no source edited) makes
    `deploy.compiled` build again, rather than answer that the build is current."""
    from deploy import compiled as deploy_compiled

    made: list[tuple[str, ...]] = []

    def compile_(*_: object) -> str:
        made.append(deploy_compiled.HOT_MODULES)
        return "made"

    monkeypatch.setattr(deploy_compiled, "HOT_MODULES", HOT_MODULES[:-1])
    monkeypatch.setattr(deploy_compiled, "_copy_whole", lambda *_: False)  # never a copy into this venv
    monkeypatch.setattr(deploy_compiled, "_compile", compile_)

    assert build() == "made"
    assert made == [HOT_MODULES[:-1]]
    monkeypatch.undo()
    assert build().startswith("compiled modules are current")


def test_a_build_whose_c_calls_a_leaky_primitive_is_named_by_module(tmp_path: Path) -> None:
    (tmp_path / "__native_petrel_hot.c").write_text("/* the group's shared file */\n")
    (tmp_path / "__native_libs___codec.c").write_text("r2 = CPyBytes_Concat(r0, r1);\n")
    (tmp_path / "bytes_ops.c").write_text("PyObject *CPyBytes_Concat(PyObject *a, PyObject *b) {\n")  # mypyc's own

    assert leaks_in(tmp_path, LEAKY_PRIMITIVES) == ["libs/codec.py uses bytes + bytes"]
    assert leaks_in(tmp_path, {}) == []  # a mypyc that does not leak with it: nothing to refuse
