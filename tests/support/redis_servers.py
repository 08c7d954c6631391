"""Private redis-server processes on loopback: one that asks for a password, one that speaks only TLS.

Each gets a free port and a config file (0600, in the test's folder: the password is on no
command line); the TLS one gets a CA and a server certificate for 127.0.0.1 made with the
openssl command. `started` yields the server once it answers PING through its own URL.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy.redis_server import private_redis_command, redis_refusal
from libs.private_files import write_private
from tests.support.serving import free_port
from tests.support.waiting import wait_until

PASSWORD = "s3cret-Redis-pw"
"""The password of the servers started here: a test asserts that no output shows it."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    ca: Path
    certificate: Path
    key: Path


@dataclass(frozen=True, slots=True)
class RedisServer:
    url: str
    """with the password, and for TLS the CA to verify the server with"""
    port: int
    log: Path

    def url_with_password(self, password: str) -> str:
        return self.url.replace(f":{PASSWORD}@", f":{password}@")


def make_tls_files(folder: Path) -> TlsFiles:
    """A CA and a certificate it signed for 127.0.0.1, made with the openssl command (skips without it)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed: no certificates for a TLS Redis")
    folder.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(folder / "ca.crt", folder / "server.crt", folder / "server.key")
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for command in (
        f"req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=petrel-test-ca -keyout {folder}/ca.key -out {files.ca}",
        f"req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout {files.key} -out {folder}/server.csr",
        f"x509 -req -days 1 -in {folder}/server.csr -CA {files.ca} -CAkey {folder}/ca.key -CAcreateserial "
        f"-extfile {folder}/san.ext -out {files.certificate}",
    ):
        subprocess.run(["openssl", *command.split()], check=True, capture_output=True)
    return files


@contextlib.contextmanager
def started(folder: Path, tls: TlsFiles | None = None) -> Iterator[RedisServer]:
    """A redis-server with `requirepass` PASSWORD, and with `tls` only TLS on its port."""
    port = free_port()
    try:
        binary = private_redis_command(port, folder / "data")[0]
    except RuntimeError as exc:
        pytest.skip(str(exc))
    config = ["bind 127.0.0.1", 'save ""', "appendonly no", f"dir {folder / 'data'}", f"requirepass {PASSWORD}"]
    if tls is None:
        config.append(f"port {port}")
        url = f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
    else:
        config += ["port 0", f"tls-port {port}", f"tls-cert-file {tls.certificate}", f"tls-key-file {tls.key}"]
        config += [f"tls-ca-cert-file {tls.ca}", "tls-auth-clients no"]
        url = f"rediss://:{PASSWORD}@127.0.0.1:{port}/0?ssl_ca_certs={tls.ca}"
    config_file = folder / "redis.conf"
    write_private(config_file, "\n".join(config).encode() + b"\n")
    server = RedisServer(url, port, folder / "redis.log")
    with server.log.open("ab") as log:
        process = subprocess.Popen([binary, str(config_file)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(
            lambda: process.poll() is not None or redis_refusal(url, timeout=0.2) is None,
            f"redis-server on :{port} answers",
            context=lambda: server.log.read_text(errors="replace"),
        )
        if process.poll() is not None:
            pytest.fail(f"redis-server exited with {process.returncode}:\n{server.log.read_text(errors='replace')}")
        yield server
    finally:
        process.terminate()
        process.wait(10)
