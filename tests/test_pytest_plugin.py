"""The pytest plugin through ``pytester``: each inner run is a real pytest in a subprocess, with real
proxies in front of the bundled mock and the SDK client as the agent."""

from __future__ import annotations

import re

import pytest

from tests.process_support import running_with

pytest_plugins = ["pytester"]

AGENT = """
import json
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters, stdio_client
from mcpfault.protocol.jsonlines import read_jsonl

DOWN = {"seed": 5, "faults": [{"name": "sites-down", "type": "error", "mode": "tool", "tools": ["list_sites"]}]}


async def agent(argv, mode="auto"):
    server = StdioServerParameters(command=argv[0], args=argv[1:])
    async with Client(stdio_client(server), mode=mode, read_timeout_seconds=10) as client:
        first = await client.call_tool("list_sites", {})
        second = await client.call_tool("get_site", {"site_id": "fra1"})
        return first.is_error, second.is_error


async def http_agent(url):
    async with Client(url, mode="legacy", read_timeout_seconds=10) as client:
        return (await client.call_tool("list_sites", {})).is_error
"""


def run(pytester: pytest.Pytester, body: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_agent=AGENT + body)
    (pytester.path / "workdirs.txt").touch()
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=240)


def test_fixture_marker_and_helpers_pass(pytester: pytest.Pytester) -> None:
    result = run(
        pytester,
        """
@pytest.mark.mcpfault(profile=DOWN)
@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_stdio(mcpfault_proxy, mode):
    proxy = mcpfault_proxy()
    assert anyio.run(agent, proxy.command, mode)[0] is True
    assert proxy.injected("error") >= 1 and proxy.injected("timeout") == 0
    fault = proxy.fault_for("list_sites")
    assert fault is not None and fault.rule == "sites-down" and fault.request_id is not None
    assert proxy.fault_for("get_site") is None
    Path("workdirs.txt").open("a").write(str(proxy.workdir) + "\\n")


def test_http_and_a_profile_by_name(mcpfault_proxy):
    proxy = mcpfault_proxy(profile="baseline", transport="http")
    assert proxy.url.startswith("http://127.0.0.1:")
    assert anyio.run(http_agent, proxy.url) is False
    assert proxy.injected() == 0
    Path("workdirs.txt").open("a").write(str(proxy.workdir) + "\\n")
""",
    )
    result.assert_outcomes(passed=3)
    for workdir in (pytester.path / "workdirs.txt").read_text().split():
        assert running_with(workdir) == [], workdir


def test_a_failing_test_reports_its_faults_with_request_and_span_ids(pytester: pytest.Pytester) -> None:
    result = run(
        pytester,
        """
@pytest.mark.mcpfault(profile=DOWN)
def test_agent_copes(mcpfault_proxy):
    proxy = mcpfault_proxy()
    first_failed, _ = anyio.run(agent, proxy.command)
    assert not first_failed, "the agent saw list_sites fail"


def test_no_section_when_it_passes(mcpfault_proxy):
    mcpfault_proxy(profile="baseline")
""",
    )
    result.assert_outcomes(passed=1, failed=1)
    text = result.stdout.str()
    assert text.count("mcpfault: faults injected") == 1
    assert re.search(r"proxy 1 \(stdio, profile profile\.toml, seed 5\): 1 fault\b", text), text
    assert re.search(
        r"error/tool rule=sites-down tools/call list_sites request_id=\d+ span_id=[0-9a-f]{16} trace_id=[0-9a-f]{32}",
        text,
    ), text


def test_the_seed_option_wins_over_the_marker(pytester: pytest.Pytester) -> None:
    body = """
@pytest.mark.mcpfault(profile="error", seed=3)
def test_seeded(mcpfault_proxy):
    proxy = mcpfault_proxy()
    try:
        anyio.run(agent, proxy.command)
    except Exception:
        pass  # the error profile may answer with a JSON-RPC error: the launch is what counts here
    starts = read_jsonl(proxy.events_path, strict=True)
    Path("seed.txt").write_text(str([row["seed"] for row in starts if row.get("event") == "proxy_started"]))
"""
    run(pytester, body, "--mcpfault-seed", "42").assert_outcomes(passed=1)
    assert (pytester.path / "seed.txt").read_text() == "[42]"
    run(pytester, body).assert_outcomes(passed=1)
    assert (pytester.path / "seed.txt").read_text() == "[3]"


def test_a_wrong_marker_is_a_clear_error(pytester: pytest.Pytester) -> None:
    result = run(
        pytester,
        """
@pytest.mark.mcpfault(profil="error")
def test_typo(mcpfault_proxy):
    pass
""",
    )
    result.assert_outcomes(errors=1)
    assert "takes profile= and seed= only" in result.stdout.str()


def test_cassette_marker_records_once_then_replays_without_the_server(pytester: pytest.Pytester) -> None:
    body = """
@pytest.mark.mcpfault_cassette("sites.cassette", record="{mode}")
def test_agent(mcpfault_proxy):
    proxy = mcpfault_proxy(command={command})
    Path("answers.txt").open("a").write(repr(anyio.run(agent, proxy.command, "legacy")) + "\\n")
"""
    mock = '[sys.executable, "-m", "mcpfault", "mock-server"]'
    first = run(pytester, "import sys\n" + body.format(mode="once", command=mock))
    first.assert_outcomes(passed=1)
    cassette = pytester.path / "sites.cassette"
    assert "list_sites" in cassette.read_text()
    recorded = cassette.read_text()
    # The second run's server does not exist: only the cassette can answer.
    second = run(pytester, body.format(mode="none", command='["/nonexistent/server"]'))
    second.assert_outcomes(passed=1)
    assert cassette.read_text() == recorded
    live, replayed = (pytester.path / "answers.txt").read_text().splitlines()
    assert replayed == live  # the same (list_sites is_error, get_site is_error) from the cassette as live
    assert live.startswith("(False, ")
