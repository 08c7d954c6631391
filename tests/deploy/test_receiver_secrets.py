"""The example receivers take their secrets from a file or a variable: a command line is shown to every user."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deploy import cli
from libs import webhooks

SECRET = webhooks.new_secret()
OTHER = webhooks.new_secret()


@pytest.fixture
def checkback_secret(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The secret each checkback-receiver started with (it is not served)."""
    started: list[str] = []

    def run(port: int, secret: str, *_: Any) -> None:
        started.append(secret)

    monkeypatch.setattr("deploy.checkback_receiver.run", run)
    return started


@pytest.fixture
def webhook_secrets(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The secrets each webhook-receiver started with (it is not served)."""
    started: list[list[str]] = []
    monkeypatch.setattr("deploy.webhook_receiver.run", lambda host, port, options: started.append(options.secrets))
    return started


def test_the_checkback_receiver_reads_its_secret_from_a_file_or_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checkback_secret: list[str]
) -> None:
    path = tmp_path / "checkback.secret"
    path.write_text(f"{SECRET}\n")
    cli.main(["checkback-receiver", "--secret-file", str(path)])
    monkeypatch.setenv("PETREL_CHECKBACK_SECRET", OTHER)
    cli.main(["checkback-receiver"])
    cli.main(["checkback-receiver", "--secret", SECRET])  # still works, though ps shows it
    assert checkback_secret == [SECRET, OTHER, SECRET]


def test_the_checkback_receiver_without_a_secret_says_where_to_put_it(checkback_secret: list[str]) -> None:
    with pytest.raises(SystemExit, match=r"--secret-file FILE \(or PETREL_CHECKBACK_SECRET\)"):
        cli.main(["checkback-receiver"])


def test_a_missing_secret_file_is_named(tmp_path: Path, checkback_secret: list[str]) -> None:
    with pytest.raises(SystemExit, match=f"--secret-file {tmp_path}/absent: No such file or directory"):
        cli.main(["checkback-receiver", "--secret-file", str(tmp_path / "absent")])


def test_the_webhook_receiver_accepts_every_secret_of_its_files_and_the_variable_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, webhook_secrets: list[list[str]]
) -> None:
    path = tmp_path / "webhook.secrets"
    path.write_text(f"{SECRET}\n\n{OTHER}\n")
    monkeypatch.setenv("PETREL_WEBHOOK_SECRET", "whsec_unused")
    cli.main(["webhook-receiver", "--secret-file", str(path)])
    monkeypatch.setenv("PETREL_WEBHOOK_SECRET", OTHER)
    cli.main(["webhook-receiver"])
    assert webhook_secrets == [[SECRET, OTHER], [OTHER]]
