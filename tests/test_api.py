"""mcpfault.api: the Proxy context manager (stdio and HTTP) and Control, against the real proxy, the
bundled mock and the SDK client in both eras; the API reference's example run as is."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters, stdio_client

import mcpfault.api as api
from mcpfault.api import ApiError, Control, Proxy, ProxyError
from mcpfault.errors import ProfileError, UsageError
from tests.process_support import running_with

ROOT = Path(__file__).resolve().parent.parent
MOCK = [sys.executable, "-m", "mcpfault", "mock-server"]
ARGUMENTS = {"get_site": {"site_id": "fra1"}}
SITES_DOWN = {
    "seed": 3,
    "faults": [{"name": "sites-down", "type": "error", "mode": "tool", "tools": ["list_sites"], "probability": 1.0}],
}


async def call_tools(argv: list[str], mode: str, tools: list[str]) -> list[bool]:
    """Call each tool (get_site with a site id) through a stdio launch of ``argv``; which answers were errors."""
    server = StdioServerParameters(command=argv[0], args=argv[1:])
    with open(os.devnull, "w", encoding="utf-8") as errlog:
        async with Client(stdio_client(server, errlog=errlog), mode=mode, read_timeout_seconds=10) as client:
            return [(await client.call_tool(tool, ARGUMENTS.get(tool, {}))).is_error for tool in tools]


def test_the_public_surface_is_curated() -> None:
    # pytest rewrites the modules of a pytest11 distribution, adding "@py_builtins" and "@pytest_ar"
    assert set(api.__all__) == {name for name in dir(api) if not name.startswith(("_", "@"))} - {"annotations"}
    for name in api.__all__:
        assert getattr(api, name).__doc__, name
    assert "Proxy" in (api.__doc__ or "") and "Control" in (api.__doc__ or "")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_stdio_proxy_faults_are_joined_to_their_spans(tmp_path: Path, mode: str) -> None:
    with Proxy(MOCK, profile=SITES_DOWN, workdir=tmp_path) as proxy:
        assert proxy.url is None and proxy.command is not None and proxy.command[-4:] == MOCK
        errors = anyio.run(call_tools, proxy.command, mode, ["list_sites", "get_site", "list_sites"])
        assert errors[0] and errors[2]
        faults = proxy.faults()
        assert [f.tool for f in faults] == ["list_sites", "list_sites"]
        assert proxy.injected("error") == 2 and proxy.injected("timeout") == 0 and proxy.injected() == 2
        first = proxy.fault_for("list_sites")
        assert first is not None and (first.type, first.mode, first.rule) == ("error", "tool", "sites-down")
        assert first.request_id is not None and re.fullmatch(r"[0-9a-f]{16}", first.span_id or "")
        assert proxy.fault_for("get_site") is None
        span_ids = {span.span_id for span in proxy.spans()}
        assert {f.span_id for f in faults} <= span_ids
        expected_handshake = "initialize" if mode == "legacy" else "server/discover"
        assert proxy.events()[0]["method"] == expected_handshake
    assert running_with(str(tmp_path)) == []
    assert proxy.injected("error") == 2  # records stay readable after the block


def test_stdio_control_reaches_the_running_launch_and_no_launch_outlives_the_block(tmp_path: Path) -> None:
    with Proxy(MOCK, profile="baseline", workdir=tmp_path) as proxy:
        assert proxy.command is not None and proxy.control is not None
        launch = subprocess.Popen(
            proxy.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        status = _wait_status(proxy.control)
        assert status["transport"] == "stdio" and status["server"]["pid"] > 0
        server_pid = status["server"]["pid"]
        added = proxy.control.add({"name": "slow", "type": "latency", "delay_s": 0.01})
        assert added["name"] == "slow"
        with pytest.raises(ApiError) as refused:
            proxy.control.add({"name": "slow", "type": "latency", "delay_s": 0.01})
        assert refused.value.status == 409
        # The agent "forgets" its server: the block's end ends the launch and, with it, the server.
    assert launch.wait(15) is not None
    assert launch.stdin is not None and launch.stdout is not None
    launch.stdin.close()
    launch.stdout.close()
    assert not Path(f"/proc/{server_pid}").exists() or Path(f"/proc/{server_pid}/cmdline").read_bytes() == b""
    assert running_with(str(tmp_path)) == []


def _wait_status(control: Control) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while True:
        try:
            return control.status()
        except api.Unreachable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_http_proxy_with_live_control(tmp_path: Path, mode: str) -> None:
    async def session(url: str) -> list[bool]:
        async with Client(url, mode=mode, read_timeout_seconds=10) as client:
            first = (await client.call_tool("list_sites", {})).is_error
            assert proxy.control is not None
            proxy.control.add({"name": "down", "type": "error", "mode": "tool", "tools": ["list_sites"]})
            second = (await client.call_tool("list_sites", {})).is_error
            proxy.control.off()
            third = (await client.call_tool("list_sites", {})).is_error
            return [first, second, third]

    with Proxy(MOCK, profile="baseline", transport="http", workdir=tmp_path) as proxy:
        assert proxy.url is not None and proxy.url.startswith("http://127.0.0.1:") and proxy.command is None
        assert anyio.run(session, proxy.url) == [False, True, False]
        assert proxy.control is not None and proxy.control.status()["faults_total"] == 1
        process = proxy._process
    assert process is not None and process.returncode is not None
    assert proxy.injected("error") == 1 and proxy.faults()[0].rule == "down"
    assert running_with(str(tmp_path)) == []


def test_bad_input_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as bad:
        Proxy(MOCK, profile={"faults": [{"type": "eror"}]}, workdir=tmp_path).start()
    assert "eror" in str(bad.value.problems[0])
    with pytest.raises(UsageError, match="argv list"):
        Proxy("mcpfault mock-server")
    with pytest.raises(UsageError, match="no-such-profile"):
        Proxy(MOCK, profile="no-such-profile").start()
    with pytest.raises(ProxyError, match="not started"):
        Proxy(MOCK).events()
    with pytest.raises(ProxyError, match="exited"):
        Proxy(transport="http", upstream="not-a-url", workdir=tmp_path / "x").start()
    assert running_with(str(tmp_path)) == []


def test_the_readme_example_runs(tmp_path: Path) -> None:
    """The example of the Python API's reference page (once the README's), run as the page shows it."""
    readme = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    section = readme.split("## Python API, Chaos Toolkit, pytest", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "example.py"
    script.write_text(example, encoding="utf-8")
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"list_sites: error fault, request \d+, span [0-9a-f]{16}", done.stdout), done.stdout


def test_run_experiment_returns_its_outcome(tmp_path: Path) -> None:
    lines: list[str] = []
    outcome = api.run_experiment(
        ROOT / "experiments" / "latency-holds.toml", out_dir=tmp_path / "out", echo=lines.append
    )
    assert isinstance(outcome, api.ExperimentOutcome)
    assert (outcome.verdict, outcome.state, outcome.exit_code) == ("held", "completed", 0), outcome.reason
    assert (tmp_path / "out" / "journal.jsonl").is_file() and (tmp_path / "out" / "report.md").is_file()
    assert [(run.action.name, run.state) for run in outcome.actions] == [("slow-status", "completed")]
    assert running_with(str(tmp_path)) == []
    bad = tmp_path / "bad.toml"
    bad.write_text('title = "x"\n[[method]]\nname = "m"\nfault = { type = "eror" }\n', encoding="utf-8")
    with pytest.raises(api.ExperimentError) as invalid:
        api.run_experiment(bad)
    assert "eror" in str(invalid.value)


def test_profiles_rules_experiments_and_the_catalog_are_checked_through_the_public_api() -> None:
    by_name = {kind.name: kind for kind in api.fault_types()}
    assert {"error", "latency", "crash"} <= set(by_name)
    assert "tool" in by_name["error"].modes and "stdio" in by_name["error"].transports
    assert by_name["crash"].needs_process and by_name["error"].description
    assert "mixed" in api.bundled_profiles() and api.scripted_agents() == ("naive", "retry-only", "resilient")
    text = 'name = "mine"\n\n[[faults]]\ntype = "error"\nmode = "tool"\nprobability = 0.5\n'
    assert api.check_profile(text) == api.ProfileInfo("mine", 1)
    assert api.check_profile({"name": "tables", "faults": []}) == api.ProfileInfo("tables", 0)
    with pytest.raises(api.ProfileError) as refused:
        api.check_profile(text.replace("0.5", "2"), source="mine.toml")
    assert any(problem.field == "probability" for problem in refused.value.problems)
    with pytest.raises(api.ProfileError):
        api.check_rule({"type": "no-such-fault"}, source="a rule")
    plan = api.load_experiment("server-killed")
    assert isinstance(plan, api.ExperimentPlan) and plan.total_s > 0
    with pytest.raises(api.ExperimentError):
        api.load_experiment({"title": "no method"}, source="mine")
