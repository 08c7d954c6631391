"""The extraction of shell blocks from a page, and the rules that fail a block (no cluster needed)."""

from __future__ import annotations

from pathlib import Path

from tests.support.doc_blocks import run_page, shell_blocks, with_ports

PAGE = """# A page

```sh
echo one
```

<!-- not-run -->

```sh
make run
```

```sh skip
pip install petrel
```

```json
{"not": "shell"}
```

```bash
echo two  # 404 is announced here
```
"""


def test_runnable_blocks_are_sh_and_bash_ones_not_marked_to_skip(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    blocks = shell_blocks(page, "page.md")
    assert [(b.number, b.line, b.text) for b in blocks] == [
        (1, 3, "echo one\n"),
        (2, 21, "echo two  # 404 is announced here\n"),
    ]
    assert blocks[1].allowed_errors == {"404"}


def test_the_default_ports_are_rewritten_to_the_live_clusters() -> None:
    text = "curl localhost:8080/v1/topics; petrel checkback-receiver --port 9000; http://127.0.0.1:9000/cb"
    assert with_ports(text, {8080: 5001, 9000: 5002}) == (
        "curl localhost:5001/v1/topics; petrel checkback-receiver --port 5002; http://127.0.0.1:5002/cb"
    )


def test_a_failing_block_is_named_with_its_output_and_later_blocks_do_not_run(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text('```sh\nX=1\n```\n\n```sh\necho "x is $X"\nfalse\n```\n\n```sh\necho never\n```\n')
    result = run_page(shell_blocks(page, "page.md"), {}, tmp_path, {"PATH": "/usr/bin:/bin"}, 10)
    failure = result.failure()
    assert failure is not None
    assert failure.startswith("page.md, shell block 2 (line 5) exited 1")
    assert "x is 1" in failure
    assert "never" not in failure


def test_a_block_failing_beside_a_background_job_is_reported_at_once_not_at_the_timeout(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```sh\nsleep 300 &\necho started\nfalse\n```\n")  # the job keeps the page's output open

    result = run_page(shell_blocks(page, "page.md"), {}, tmp_path, {"PATH": "/usr/bin:/bin"}, 60)

    failure = result.failure()
    assert failure is not None
    assert failure.startswith("page.md, shell block 1 (line 1) exited 1"), failure
    assert "started" in failure
    assert "timed out" not in failure


def test_a_block_that_reopens_its_output_loses_nothing_of_the_pages(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```sh\necho one\necho two | tee /dev/stderr | cat\n```\n\n```sh\necho three\n```\n")

    result = run_page(shell_blocks(page, "page.md"), {}, tmp_path, {"PATH": "/usr/bin:/bin"}, 10)

    assert result.failure() is None
    assert [r.block.number for r in result.runs] == [1, 2], "a block's output was written over"


def test_an_http_error_fails_its_block_unless_a_comment_announces_it(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "curl"  # answers 404 to everything, as curl -w would report it
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho '{\"status\": 404}'\necho '@@http 404@@' >&2\n")
    fake.chmod(0o755)
    page = tmp_path / "page.md"
    page.write_text("```sh\ncurl localhost:8080/v1/topics/nope   # 404 topic-not-found\n```\n\n```sh\ncurl x\n```\n")
    env = {"PATH": f"{fake.parent}:/usr/bin:/bin"}
    result = run_page(shell_blocks(page, "page.md"), {}, tmp_path, env, 10)
    assert [run.statuses for run in result.runs] == [["404"], ["404"]]
    failure = result.failure()
    assert failure is not None
    assert failure.startswith("page.md, shell block 2 (line 5) answered HTTP 404 (not announced in a # comment)")


def test_a_json_comment_is_what_the_block_prints_and_an_elided_one_is_an_illustration(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        '```sh\necho \'{"ok": true}\'    # {"ok":true}\necho \'{"id": 7}\'   # {"id":"01A1..."}\n```\n\n'
        '```sh\necho \'{"acked":12}\'\n# {"acked":1}\n```\n'
    )
    blocks = shell_blocks(page, "page.md")
    assert [b.shown for b in blocks] == [[{"ok": True}], [{"acked": 1}]]

    failure = run_page(blocks, {}, tmp_path, {"PATH": "/usr/bin:/bin"}, 10).failure()

    assert failure is not None
    assert failure.startswith('page.md, shell block 2 (line 6) did not print {"acked":1} (as its # comment says)')
    assert '{"acked":12}' in failure
