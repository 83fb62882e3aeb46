"""One loopback check and one refusal for every listener (the HTTP proxy, /metrics)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mcpfault.errors import UsageError
from mcpfault.loopback import BeyondLoopbackError, is_loopback, require_token_beyond_loopback
from mcpfault.telemetry.metrics import HarnessMetrics, start_metrics_server
from tests.conftest import write_profile
from tests.http_support import http_proxy

UPSTREAM = ("--upstream", "http://127.0.0.1:9/mcp")


@pytest.mark.parametrize(
    "host",
    ["localhost", "LOCALHOST", "LocalHost", "localhost.", "127.0.0.1", "127.4.5.6", "::1", "[::1]", "::ffff:127.0.0.1"],
)
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host", ["0.0.0.0", "::", "10.0.0.1", "192.168.1.2", "example.org", "localhost.example.org", "", "::ffff:10.0.0.1"]
)
def test_hosts_beyond_loopback(host: str) -> None:
    assert not is_loopback(host)


def test_the_refusal_names_the_listener_and_the_remedy() -> None:
    require_token_beyond_loopback("--listen 127.0.0.1:1", "127.0.0.1", None, "set T")
    require_token_beyond_loopback("--listen 0.0.0.0:1", "0.0.0.0", "secret", "set T")
    with pytest.raises(BeyondLoopbackError, match=r"--listen 0\.0\.0\.0:1 is beyond loopback.*set T, or bind 127"):
        require_token_beyond_loopback("--listen 0.0.0.0:1", "0.0.0.0", None, "set T")
    with pytest.raises(BeyondLoopbackError, match="token is empty"):
        require_token_beyond_loopback("x", "127.0.0.1", "", "set T")
    assert issubclass(BeyondLoopbackError, UsageError) and issubclass(BeyondLoopbackError, ValueError)


def test_metrics_and_the_http_proxy_agree_about_uppercase_localhost(tmp_path: Path) -> None:
    """Both used to have their own check; the proxy's refused ``LOCALHOST``, the metrics' allowed it."""
    server, _ = start_metrics_server("LOCALHOST:0", HarnessMetrics().registry)
    server.shutdown()
    rules = write_profile(tmp_path, "")
    with http_proxy(rules, "http://127.0.0.1:9/mcp", tmp_path, "--listen", "LOCALHOST:0") as proxy:
        assert proxy.url.startswith("http://LOCALHOST:")  # it started: nothing was refused
    wide = subprocess.run(
        [sys.executable, "-m", "mcpfault", "proxy", "--config", str(rules), "--listen", "0.0.0.0:0", *UPSTREAM],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert wide.returncode == 2
    assert "--listen 0.0.0.0:0 is beyond loopback" in wide.stderr and "MCPFAULT_PROXY_TOKEN" in wide.stderr


# ---- the one URL check and the one HOST:PORT parser ------------------------------------------------


@pytest.mark.parametrize("url", ["ftp://h/x", "http://", "not a url", "http://[::1/x", "http://h:99999/"])
def test_a_bad_url_is_refused_naming_where_and_what_to_give(url: str) -> None:
    from mcpfault.loopback import UrlError, check_http_url

    with pytest.raises(UrlError, match=r"^--endpoint .* is not an http\(s\) URL with a host; give e\.g\. http://x$"):
        check_http_url(url, "--endpoint", "e.g. http://x")


def test_credentials_never_reach_the_message() -> None:
    from mcpfault.loopback import UrlError, check_http_url, hide_credentials

    with pytest.raises(UrlError) as info:
        check_http_url("ftp://alice:s3cret@host/", "--endpoint", "e.g. http://x")
    assert "s3cret" not in str(info.value) and "//***@host" in str(info.value)
    assert hide_credentials("see https://u:p@a/ and http://b/") == "see https://***@a/ and http://b/"
    assert check_http_url(" https://u:p@h:8443/v1 ", "--x", "").port == 8443


@pytest.mark.parametrize(
    ("value", "parsed"),
    [("8080", ("127.0.0.1", 8080)), (":0", ("127.0.0.1", 0)), ("0.0.0.0:80", ("0.0.0.0", 80)), ("[::1]:1", ("::1", 1))],
)
def test_one_host_port_rule_for_every_listener(value: str, parsed: tuple[str, int]) -> None:
    from mcpfault.loopback import parse_host_port

    assert parse_host_port(value, "--listen") == parsed


def test_a_bad_host_port_names_the_flag_and_an_example() -> None:
    from mcpfault.loopback import AddressError, parse_host_port

    with pytest.raises(
        AddressError, match=r"--control 'nonsense' has no port; expected HOST:PORT, e\.g\. 127\.0\.0\.1:8474"
    ):
        parse_host_port("nonsense", "--control", "127.0.0.1:8474")
