"""``mcpfault mcp-server`` through the SDK client in both eras, over stdio and Streamable HTTP: every
tool's schemas and annotations, its structuredContent, and every refusal of the safety model."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import tomllib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters, stdio_client

from mcpfault.api import Proxy

ROOT = Path(__file__).resolve().parent.parent
MOCK = [sys.executable, "-m", "mcpfault", "mock-server"]
RULE = {"name": "down", "type": "error", "mode": "tool", "tools": ["list_sites"]}
READ_ONLY = {"list_fault_types", "validate_profile", "read_report", "list_runs", "proxy_status"}
DESTRUCTIVE = {"write_profile", "write_experiment", "run_experiment", "set_faults", "audit_server"}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "out-link").symlink_to(outside, target_is_directory=True)
    return root


@pytest.fixture
def http_server(workdir: Path) -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "mcpfault", "mcp-server", "--listen", "127.0.0.1:0", "--workdir", str(workdir)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    seen = b""
    deadline = time.monotonic() + 30
    while (found := re.search(rb"serving (http://\S+/mcp)", seen)) is None:
        assert time.monotonic() < deadline and process.poll() is None, seen
        seen += os.read(process.stderr.fileno(), 4096)
    try:
        yield found.group(1).decode()
    finally:
        process.terminate()
        process.wait(10)
        process.stderr.close()


@asynccontextmanager
async def connected(target: str | Path, mode: str) -> AsyncIterator[Client]:
    if isinstance(target, Path):
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "mcpfault", "mcp-server"],
            env={**os.environ, "MCPFAULT_WORKDIR": str(target)},
        )
        with open(os.devnull, "w", encoding="utf-8") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode=mode, read_timeout_seconds=120) as client:
                yield client
    else:
        async with Client(target, mode=mode, read_timeout_seconds=120) as client:
            yield client


async def ok(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict), tool
    return result.structured_content


async def refused(client: Client, tool: str, pattern: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    text = " ".join(getattr(block, "text", "") for block in result.content)
    assert result.is_error, (tool, arguments, result.structured_content)
    assert re.search(pattern, text), text
    return text


async def tour(client: Client, workdir: Path, control_url: str, *, heavy: bool) -> None:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == READ_ONLY | DESTRUCTIVE | {"run_bench"}
    for name, tool in tools.items():
        assert tool.input_schema["type"] == "object" and tool.output_schema is not None, name
        hints = tool.annotations
        assert hints is not None and hints.read_only_hint is (name in READ_ONLY), name
        assert hints.destructive_hint is (name in DESTRUCTIVE), name
    assert tools["run_experiment"].input_schema["properties"]["dry_run"]["default"] is True
    assert tools["set_faults"].input_schema["properties"]["dry_run"]["default"] is True

    kinds = {kind["name"]: kind for kind in (await ok(client, "list_fault_types"))["fault_types"]}
    assert {"error", "timeout", "latency", "crash"} <= set(kinds) and kinds["crash"]["needs_process"] is True

    # validate_profile: text or path, not both; problems named.
    good = 'name = "p"\nseed = 1\n[[faults]]\ntype = "latency"\ndelay_s = 0.1\n'
    assert await ok(client, "validate_profile", text=good) == {"valid": True, "name": "p", "rules": 1, "problems": []}
    bad = await ok(client, "validate_profile", text='[[faults]]\ntype = "eror"\n')
    assert bad["valid"] is False and "eror" in bad["problems"][0]
    await refused(client, "validate_profile", "give either text", text=good, path="p.toml")
    await refused(client, "validate_profile", "give either text")
    await refused(client, "validate_profile", r"larger than 262144 bytes", text="#" * 300_000)

    # write_profile: written inside; confined; validated; overwriting needs both confirmations.
    written = await ok(client, "write_profile", path="profiles/mine.toml", name="mine", seed=3, faults=[RULE])
    assert written["written"] is True and written["path"] == "profiles/mine.toml"
    assert tomllib.loads((workdir / "profiles" / "mine.toml").read_text())["faults"][0] == RULE
    assert (await ok(client, "validate_profile", path="profiles/mine.toml"))["valid"] is True
    again = await ok(client, "write_profile", path="profiles/mine.toml", name="mine", seed=4, faults=[RULE])
    assert again["written"] is False and "needs dry_run=false and confirm_destructive=true" in again["message"]
    half = await ok(
        client, "write_profile", path="profiles/mine.toml", name="mine", seed=4, faults=[RULE], dry_run=False
    )
    assert half["written"] is False and tomllib.loads((workdir / "profiles" / "mine.toml").read_text())["seed"] == 3
    overwritten = await ok(
        client,
        "write_profile",
        path="profiles/mine.toml",
        name="mine",
        seed=4,
        faults=[RULE],
        dry_run=False,
        confirm_destructive=True,
    )
    assert overwritten["written"] is True and "mine.toml.previous" in overwritten["undo"]
    assert tomllib.loads((workdir / "profiles" / "mine.toml").read_text())["seed"] == 4
    args = {"name": "x", "seed": 1, "faults": [RULE]}
    await refused(client, "write_profile", r"'\.\.' is refused", path="../escape.toml", **args)
    await refused(client, "write_profile", "absolute path outside", path="/etc/mcpfault-escape.toml", **args)
    await refused(client, "write_profile", "through a symlink", path="out-link/escape.toml", **args)
    await refused(
        client,
        "write_profile",
        "not valid; nothing was written",
        path="p2.toml",
        name="x",
        seed=1,
        faults=[{"type": "eror"}],
    )
    await refused(client, "write_profile", "ends in .toml", path="p.sh", **args)
    await refused(client, "write_profile", "use letters, digits", path="p3.toml", name="$(rm -rf /)", seed=1, faults=[])
    assert not (workdir.parent / "outside" / "escape.toml").exists() and not (workdir.parent / "escape.toml").exists()

    # write_experiment: validated; a target command is an argv list.
    experiment = tomllib.loads((ROOT / "experiments" / "latency-holds.toml").read_text())
    experiment["load"]["warmup_s"], experiment["load"]["cooldown_s"] = 1, 1
    experiment["method"][0]["duration_s"] = 2
    assert (await ok(client, "write_experiment", path="exp.toml", experiment=experiment))["written"] is True
    await refused(
        client,
        "write_experiment",
        "argv list",
        path="e2.toml",
        experiment={**experiment, "target": {"command": "mcpfault mock-server; rm -rf /"}},
    )
    await refused(client, "write_experiment", "not valid", path="e3.toml", experiment={"title": "t", "method": [{}]})

    # run_experiment: a dry run by default; half a confirmation is refused.
    dry = await ok(client, "run_experiment", path="exp.toml")
    assert dry["dry_run"] is True and dry["verdict"] is None and "slow-status" in " ".join(dry["timeline"])
    assert not (workdir / "runs").exists()
    await refused(client, "run_experiment", "only with confirm_destructive=true", path="exp.toml", dry_run=False)
    await refused(client, "run_experiment", "does not exist", path="nothing.toml")
    await refused(client, "run_experiment", r"'\.\.' is refused", path="../exp.toml")

    # run_bench: bounded, names checked.
    await refused(client, "run_bench", r"integer in \[1, 100\]", tasks=1000)
    await refused(client, "run_bench", "use letters, digits", profile="../error")
    await refused(client, "run_bench", "use letters, digits", agent="naive; rm -rf /")
    await refused(client, "run_bench", "is not one of", agent="smart")
    await refused(client, "read_report", "does not exist", path="runs/none")
    await refused(client, "read_report", "through a symlink", path="out-link")

    if heavy:
        ran = await ok(client, "run_experiment", path="exp.toml", dry_run=False, confirm_destructive=True)
        assert (ran["dry_run"], ran["verdict"], ran["exit_code"]) == (False, "held", 0), ran
        assert (workdir / ran["out_dir"] / "journal.jsonl").is_file()
        bench = await ok(client, "run_bench", profile="error", agent="resilient", tasks=2)
        assert bench["tasks"] == 2 and sum(bench["outcomes"].values()) == 2
        report = await ok(client, "read_report", path=bench["run_dir"])
        assert report["path"].endswith("report.md") and "|" in report["text"] and report["truncated"] is False
        runs = (await ok(client, "list_runs"))["runs"]
        assert {(run["path"], run["kind"]) for run in runs} >= {
            (bench["run_dir"], "bench"),
            (ran["out_dir"], "experiment"),
        }

    # proxy_status and set_faults against a live proxy: loopback only, dry by default, undo named.
    status = await ok(client, "proxy_status", control_url=control_url)
    assert status["transport"] == "http" and status["faults_enabled"] is True
    would = await ok(client, "set_faults", control_url=control_url, action="add", rule=RULE)
    assert would["dry_run"] is True and would["result"] is None
    assert [rule["name"] for rule in (await ok(client, "proxy_status", control_url=control_url))["faults"]] == []
    await refused(
        client, "set_faults", "only with confirm_destructive=true", control_url=control_url, action="off", dry_run=False
    )
    added = await ok(
        client, "set_faults", control_url=control_url, action="add", rule=RULE, dry_run=False, confirm_destructive=True
    )
    assert added["result"]["name"] == "down" and added["undo"] == "set_faults remove name='down'"
    await refused(
        client,
        "set_faults",
        "the proxy refused: HTTP 409",
        control_url=control_url,
        action="add",
        rule=RULE,
        dry_run=False,
        confirm_destructive=True,
    )
    removed = await ok(
        client,
        "set_faults",
        control_url=control_url,
        action="remove",
        name="down",
        dry_run=False,
        confirm_destructive=True,
    )
    assert removed["result"] == {"removed": "down"}
    await refused(client, "set_faults", "loopback control URL", control_url="http://192.0.2.1:8474", action="off")
    await refused(client, "set_faults", "loopback control URL", control_url="file:///etc/passwd", action="off")
    await refused(client, "proxy_status", "cannot reach", control_url="http://127.0.0.1:9")

    prompts = {prompt.name for prompt in (await client.list_prompts()).prompts}
    assert prompts == {"test_server_under_faults", "explain_report"}
    test_prompt = await client.get_prompt("test_server_under_faults", {"server_command": "uvx mcp-server-time"})
    assert "uvx mcp-server-time" in test_prompt.messages[0].content.text  # type: ignore[union-attr]
    explain = await client.get_prompt("explain_report", {"path": "runs/x"})
    assert "read_report" in explain.messages[0].content.text  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_stdio(workdir: Path, tmp_path: Path, mode: str) -> None:
    with Proxy(MOCK, profile="baseline", transport="http", workdir=tmp_path / "proxy") as proxy:
        assert proxy.control_url is not None
        anyio.run(_tour, workdir, workdir, proxy.control_url, mode, True)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_streamable_http(http_server: str, workdir: Path, tmp_path: Path, mode: str) -> None:
    with Proxy(MOCK, profile="baseline", transport="http", workdir=tmp_path / "proxy") as proxy:
        assert proxy.control_url is not None
        anyio.run(_tour, http_server, workdir, proxy.control_url, mode, False)


async def _tour(target: str | Path, workdir: Path, control_url: str, mode: str, heavy: bool) -> None:
    async with connected(target, mode) as client:
        await tour(client, workdir, control_url, heavy=heavy)


def test_listen_beyond_loopback_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mcpfault", "mcp-server", "--listen", "0.0.0.0:0", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2 and "loopback only" in done.stderr
