"""The command line as a new user meets it: pipes, seeds, help texts, printed addresses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mcpfault.faults import profile
from mcpfault.harness.bench import fault_seed
from mcpfault.proxy.events import read_events

MCPFAULT = [sys.executable, "-m", "mcpfault"]


def cli(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MCPFAULT, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


@pytest.mark.parametrize("args", [("faults",), ("validate", "mixed"), ("profiles",), ("--help",)])
def test_a_reader_that_leaves_gets_no_traceback(args: tuple[str, ...]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `| head -1` after its line: every write now fails with EPIPE
    try:
        done = subprocess.run([*MCPFAULT, *args], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode in (0, 141)


def test_run_seed_reseeds_the_faults(tmp_path: Path) -> None:
    seen = {}
    for seed in (0, 5):
        out = tmp_path / f"s{seed}"
        done = cli("run", "--profile", "error", "--tasks", "4", "--seed", str(seed), "--out", str(out))
        assert done.returncode == 0, done.stderr
        found = re.search(r"profile 'error' \(seed (\d+)\)", (out / "proxy.log").read_text())
        assert found, (out / "proxy.log").read_text()
        seen[seed] = int(found.group(1))
    error_seed = profile.load(profile.resolve("error")).seed
    assert seen == {0: fault_seed(error_seed, 0), 5: fault_seed(error_seed, 5)}
    assert seen[0] != seen[5]


def test_faults_prints_toml_values_and_plain_text() -> None:
    listed = cli("faults").stdout
    assert "None" not in listed and "``" not in listed and "('" not in listed and "= '" not in listed
    assert 'mode = "drop"' in listed and 'modes = ["truncate", "not_json"' in listed
    assert "retry_after_s = (not set)" in listed and "notify = false" in listed


def test_help_texts_and_defaults() -> None:
    assert "the least severe log lines" in cli("proxy", "--help").stdout
    assert "written as in a profile" in cli("faults", "--help").stdout
    run_help = " ".join(cli("run", "--help").stdout.split())
    assert "(default naive)" in run_help and "(default legacy)" in run_help


def test_metrics_addr_port_0_prints_the_bound_address(tmp_path: Path) -> None:
    import select
    import time
    import urllib.request

    proc = subprocess.Popen(
        [*MCPFAULT, "proxy", "--config", "baseline", "--metrics-addr", "127.0.0.1:0", "--", *MCPFAULT, "mock-server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        seen = b""
        deadline = time.monotonic() + 30
        while b"/metrics" not in seen and time.monotonic() < deadline:
            if select.select([proc.stderr], [], [], 0.5)[0]:
                seen += os.read(proc.stderr.fileno(), 4096)
        found = re.search(rb"metrics at (http://127\.0\.0\.1:(\d+)/metrics)", seen)
        assert found and int(found.group(2)) > 0, seen
        with urllib.request.urlopen(found.group(1).decode(), timeout=5) as response:
            assert b"mcpfault_requests_in_flight" in response.read()
    finally:
        proc.kill()
        proc.wait(10)


def test_traces_show_prints_why_a_task_failed_silently(tmp_path: Path) -> None:
    lost = tmp_path / "lost.toml"
    lost.write_text('name = "lost"\n[[faults]]\ntype = "timeout"\ntools = ["open_incident"]\nlimit = 1\n')
    out = tmp_path / "run"
    done = cli(
        "run", "--profile", str(lost), "--agent", "retry-only", "--tasks", "1", "--workflows", "open_incident",
        "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    listing = cli("traces", "show", str(out))
    assert listing.returncode == 0, listing.stderr
    assert "open_incident" in listing.stdout and "failed_silent" in listing.stdout and "timeout/drop" in listing.stdout
    shown = cli("traces", "show", str(out), "--task", "0")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "outcome=failed_silent" in lines[0] and "(retry-only)" in lines[0]
    assert any("proxy" in line and "fault=timeout/drop" in line and "received=nothing" in line for line in lines)
    assert any("CLIENT" in line and "attempt=2" in line for line in lines)
    created = [line for line in lines if "state_change {op=open_incident" in line]
    assert len(created) == 2  # the lost answer's write and the retry's: the duplicate, in the tree
    assert cli("traces", "show", str(out), "--task", "9").returncode == 2


TIME_SERVER = [sys.executable, "-m", "mcp_server_time"]
EVERYTHING_JS = (
    Path(__file__).resolve().parent / "npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
)


def test_dry_run_says_which_rule_matches_which_tool_of_a_real_server() -> None:
    stale = cli("proxy", "--dry-run", "--config", "stale_reads", "--", *TIME_SERVER)
    assert stale.returncode == 0, stale.stderr
    assert "get_current_time, convert_time" in stale.stdout and "matches nothing" not in stale.stdout
    # Every tool of mcp-server-time is read-only: a rule for writes can never fire there.
    writes = cli("proxy", "--dry-run", "--config", "lost_writes", "--", *TIME_SERVER)
    assert writes.returncode == 1
    flat = " ".join(writes.stdout.split())
    assert (
        "rule 'lost-write-response' matches nothing: read_only = false: none of get_current_time, convert_time" in flat
    )
    mock_names = cli("proxy", "--dry-run", "--config", "drift_input", "--", *TIME_SERVER)
    assert mock_names.returncode == 1 and "names none of the server's tools" in " ".join(mock_names.stdout.split())


@pytest.mark.skipif(not EVERYTHING_JS.exists(), reason="server-everything is not installed (npm ci --prefix tests/npm)")
def test_dry_run_reads_resources_and_prompts_of_server_everything() -> None:
    done = cli("proxy", "--dry-run", "--config", "error", "--", "node", str(EVERYTHING_JS), "stdio")
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    found = re.search(r"(\d+) tool\(s\), resources: (\d+), prompts: (\d+)", first)
    assert found and all(int(n) > 0 for n in found.groups()), first


@pytest.mark.parametrize("client", ["claude-desktop", "cursor", "claude-code"])
def test_config_launches_the_server_behind_the_proxy_as_a_client_does(client: str, tmp_path: Path) -> None:
    import json
    import shlex

    import anyio
    from mcp import Client, StdioServerParameters, stdio_client

    events = tmp_path / "events.jsonl"
    done = cli("config", client, "--profile", "error", "--events", str(events), "--", *TIME_SERVER, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    if client == "claude-code":
        words = shlex.split(done.stdout)
        assert words[:3] == ["claude", "mcp", "add"] and words[4] == "-e" and words[5].startswith("PATH=")
        split = words.index("--")
        command, args, env = words[split + 1], words[split + 2 :], {"PATH": words[5].removeprefix("PATH=")}
    else:
        (entry,) = json.loads(done.stdout)["mcpServers"].values()
        command, args, env = entry["command"], entry["args"], entry["env"]
    assert Path(command).is_absolute() and all(not a.startswith(".") for a in args)

    async def use() -> list[str]:
        # As a client launches it: working directory /, nothing but the configured environment.
        params = StdioServerParameters(command=command, args=args, env=env, cwd="/")
        with anyio.fail_after(60):
            async with Client(stdio_client(params), mode="legacy", read_timeout_seconds=30) as session:
                return [t.name for t in (await session.list_tools()).tools]

    assert "get_current_time" in anyio.run(use)
    assert any(e["method"] == "tools/list" for e in read_events(events))
