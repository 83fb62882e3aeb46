"""An https:// upstream through the HTTP proxy: a stdlib HTTPS server on 127.0.0.1 with a certificate
made for the test (openssl). The proxy verifies certificates; SSL_CERT_FILE adds a CA (as for an
internal CA in staging); without it the client gets a 502 that names the upstream and the reason."""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.conftest import write_profile
from tests.http_support import http_proxy

pytestmark = [pytest.mark.slow]

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


class _Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        answer = json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": {"over": "tls"}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def tls_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *(
                "-keyout",
                str(key),
                "-out",
                str(cert),
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
            ),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/mcp", cert
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_https_upstream_with_a_trusted_ca(
    tls_upstream: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, cert = tls_upstream
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    profile = write_profile(tmp_path, 'name = "b"\nseed = 1\n')
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "x", "arguments": {}}}
    with http_proxy(profile, url, tmp_path) as proxy:
        answers = [httpx2.post(proxy.url, json={**body, "id": i}, headers=HEADERS, timeout=10) for i in range(3)]
        events = proxy.events()
    assert [a.json() for a in answers] == [{"jsonrpc": "2.0", "id": i, "result": {"over": "tls"}} for i in range(3)]
    assert [e["client_received"] for e in events] == ["response"] * 3


def test_an_untrusted_certificate_is_a_502_naming_the_upstream(
    tls_upstream: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = tls_upstream
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    profile = write_profile(tmp_path, 'name = "b"\nseed = 1\n')
    body = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "x", "arguments": {}}}
    with http_proxy(profile, url, tmp_path) as proxy:
        answer = httpx2.post(proxy.url, json=body, headers=HEADERS, timeout=10)
    assert answer.status_code == 502
    error = answer.json()["error"]
    assert error["code"] == -32000 and url in error["message"]
    assert "certificate" in error["message"].lower()
