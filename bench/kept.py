"""A failed fault run's cluster data and logs, kept under data/bench/ for a replay to read (chaos and nemesis)."""

from __future__ import annotations

import shutil
from pathlib import Path

KEPT_ROOT = Path("data/bench")


def keep_failed_run(data_dir: Path, name: str) -> Path:
    """Copy `data_dir` (the run's temporary cluster data) to data/bench/<name>, replacing an older copy; sockets are
    left out (copytree cannot copy them). Returns where it went."""
    kept = KEPT_ROOT / name
    shutil.rmtree(kept, ignore_errors=True)
    shutil.copytree(data_dir, kept, ignore=shutil.ignore_patterns("*.sock"))
    return kept
