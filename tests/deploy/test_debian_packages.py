"""deploy/install_debian_package.sh, the one installer of the Debian packages the tests need (make etcd, faketime,
chromium): silent when the package is there, and never failing the build when it cannot install."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "deploy" / "install_debian_package.sh"


def install(*argv: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path} if path is not None else None
    return subprocess.run(
        ["/bin/sh", str(SCRIPT), *argv], capture_output=True, text=True, timeout=30, env=env, check=False
    )


def test_a_present_package_is_left_alone_silently() -> None:
    done = install("chromium", "the console's browser tests", "true")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_without_apt_it_says_what_to_install_and_does_not_fail_the_build(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("id", "sh"):
        (bin_dir / tool).symlink_to(f"/usr/bin/{tool}" if Path(f"/usr/bin/{tool}").exists() else f"/bin/{tool}")
    done = install("chromium", "the console's browser tests", "false", path=str(bin_dir))
    assert done.returncode == 0
    assert "chromium is not installed and apt-get is not available" in done.stderr
    assert "until then, the console's browser tests will fail" in done.stderr
