"""The shell blocks of the README and docs/, extracted and run as one terminal session per page.

A fenced block whose info string starts with `sh` or `bash` runs, unless its info string
says `skip` (```sh skip) or the line before it (blank lines aside) is `<!-- not-run -->`.
A page's blocks run in order in one `bash` (variables carry over, as in a reader's
terminal) with `set -e -o pipefail`, and `curl` notes each answer's HTTP status: a 4xx or
5xx fails the block unless a comment in the block names that status (`# 409 ...`). A
comment that is a whole JSON object or array without an elision (`# {"ok":true}`, not
`# {"id":"01A1..."}`) is what the block shows: a line of its output must be that JSON value.
The default ports of `petrel up` in the text are rewritten to the test cluster's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```(\S*)[ \t]*(.*)$")
NOT_RUN = "<!-- not-run -->"
MARK = "@@petrel-doc-block "
HTTP = re.compile(r"@@http (\d{3})@@\n?")
JSON_COMMENT = re.compile(r"(?:^|\s)#\s*([\[{].*?)\s*$")
PRELUDE = """set -e -o pipefail
curl() { command curl -sS -w '%{stderr}@@http %{http_code}@@\\n' "$@"; }
"""


@dataclass(frozen=True, slots=True)
class ShellBlock:
    page: str
    number: int
    """1-based, counting only the page's runnable blocks"""
    line: int
    """the opening fence's line in the page, 1-based"""
    text: str

    @property
    def allowed_errors(self) -> set[str]:
        """HTTP error statuses the block's comments announce (`# 404 topic-not-found`)."""
        return {m for comment in re.findall(r"#.*", self.text) for m in re.findall(r"\b([45]\d\d)\b", comment)}

    @property
    def shown(self) -> list[object]:
        """The JSON values the block's comments say it prints (`# {"ok":true}`), each a line of its output."""
        values = []
        for line in self.text.splitlines():
            match = JSON_COMMENT.search(line)
            if match and "..." not in match.group(1):
                with contextlib.suppress(ValueError):
                    values.append(json.loads(match.group(1)))
        return values

    def where(self) -> str:
        return f"{self.page}, shell block {self.number} (line {self.line})"


def shell_blocks(page: Path, name: str) -> list[ShellBlock]:
    """The runnable shell blocks of a Markdown page, in order."""
    blocks: list[ShellBlock] = []
    lines = page.read_text().splitlines()
    previous = ""
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            if lines[i].strip():
                previous = lines[i].strip()
            i += 1
            continue
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        language, rest = fence.group(1), fence.group(2)
        if language in ("sh", "bash") and "skip" not in rest.split() and previous != NOT_RUN:
            blocks.append(ShellBlock(name, len(blocks) + 1, start + 1, "\n".join(body) + "\n"))
        previous = "```"
        i += 1
    return blocks


def with_ports(text: str, ports: dict[int, int]) -> str:
    """`petrel up`'s default ports (8080, 9876 ...) replaced by the live cluster's."""

    def replace(match: re.Match[str]) -> str:
        port = int(match.group(2))
        return f"{match.group(1)}{ports.get(port, port)}"

    return re.sub(r"((?:localhost|127\.0\.0\.1):|--port )(\d+)\b", replace, text)


@dataclass(frozen=True, slots=True)
class BlockRun:
    block: ShellBlock
    output: str
    statuses: list[str]


@dataclass(frozen=True, slots=True)
class PageRun:
    runs: list[BlockRun]
    exit_code: int

    def failure(self) -> str | None:
        """What went wrong, naming the page, the block and its output; None when every block passed."""
        for run in self.runs:
            unexpected = [s for s in run.statuses if s[0] in "45" and s not in run.block.allowed_errors]
            if unexpected:
                return _report(run, f"answered HTTP {', '.join(unexpected)} (not announced in a # comment)")
            finished = run is not self.runs[-1] or self.exit_code == 0  # else its exit is what went wrong
            missing = [value for value in run.block.shown if value not in _json_lines(run.output)]
            if finished and missing:
                said = ", ".join(json.dumps(value, separators=(",", ":")) for value in missing)
                return _report(run, f"did not print {said} (as its # comment says)")
        if self.exit_code != 0:
            last = self.runs[-1] if self.runs else None
            if last is None:
                return f"the page's shell session failed before its first block (exit {self.exit_code})"
            return _report(last, f"exited {self.exit_code}")
        return None


def _json_lines(output: str) -> list[object]:
    values = []
    for line in output.splitlines():
        if line.strip().startswith(("{", "[")):
            with contextlib.suppress(ValueError):
                values.append(json.loads(line))
    return values


def _report(run: BlockRun, what: str) -> str:
    return f"{run.block.where()} {what}\n--- block ---\n{run.block.text}--- output ---\n{run.output}"


def run_page(
    blocks: list[ShellBlock], ports: dict[int, int], cwd: Path, env: dict[str, str], timeout: float
) -> PageRun:
    """Run a page's blocks in order in one bash session; its background jobs are killed at the end."""
    script = PRELUDE + "".join(
        f"echo '{MARK}{b.number}'; echo '{MARK}{b.number}' >&2\n{with_ports(b.text, ports)}\n" for b in blocks
    )
    # The output is read by a thread while this one waits for bash alone: a background job a failed block left
    # running holds the pipe open, and reading it to its end would wait out the page's whole timeout instead of
    # reporting the block at once. (A file instead of the pipe would not do: `tee /dev/stderr` reopens it at 0.)
    process = subprocess.Popen(
        ["bash", "-c", script],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    chunks: list[str] = []
    reader = threading.Thread(target=lambda: chunks.extend(process.stdout or ()), daemon=True)
    reader.start()
    timed_out = ""
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        code, timed_out = -1, f"\n(timed out after {timeout} s)\n"
    finally:
        _kill_group(process.pid)  # the page's background jobs: the pipe ends with them
    reader.join(10)
    if not reader.is_alive():  # else a job that outlived SIGTERM still writes: leave the pipe to it
        process.stdout.close()
    output = "".join(chunks) + timed_out
    return PageRun(_split(blocks, output), code)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)


def _split(blocks: list[ShellBlock], output: str) -> list[BlockRun]:
    by_number = {b.number: b for b in blocks}
    pieces: dict[int, str] = {}
    current: int | None = None
    for line in output.splitlines(keepends=True):
        if line.startswith(MARK):
            current = int(line[len(MARK) :])
            pieces.setdefault(current, "")
        elif current is not None:
            pieces[current] += line
    return [BlockRun(by_number[n], HTTP.sub("\n", text), HTTP.findall(text)) for n, text in sorted(pieces.items())]
