"""Every folder and module the README's code map names exists, so the map cannot point at nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def code_map_paths() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [path for row in rows for path in re.findall(r"`([\w./-]+/[\w./-]*)`", row)]


def test_the_code_map_names_folders_and_entry_modules() -> None:
    paths = code_map_paths()
    assert "gateway/app.py" in paths, f"the code map table was not found: {paths}"
    assert "libs/store/" in paths, f"the code map names no folders: {paths}"


def test_every_path_in_the_code_map_exists() -> None:
    missing = [path for path in code_map_paths() if not (ROOT / path).exists()]
    assert not missing, f"README.md's code map names paths that do not exist: {missing}"
