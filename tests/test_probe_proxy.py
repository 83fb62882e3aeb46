"""`mcpfault proxy --probe`: side effects per tool call, findings, lost responses and duplicates.

The server is tests/servers/unsafe_server.py (the official SDK), the client the SDK's Client, the
probe the real eBPF sidecar (CI runs as root) or the fake one with scripted events.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError, StdioServerParameters, stdio_client

from mcpfault.protocol.jsonlines import read_jsonl
from tests.conftest import write_profile

pytestmark = pytest.mark.slow  # real sidecars, bpftrace attaching for seconds

ROOT = Path(__file__).resolve().parent.parent
SERVER = [sys.executable, str(ROOT / "tests" / "servers" / "unsafe_server.py")]
NO_FAULTS = 'name = "none"\nfaults = []  # none on purpose: an empty profile without it is warned of\n'


class World:
    """A temporary HOME with a fake key, a workspace, a scratch tmpdir and a place outside both."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        (self.home / ".ssh").mkdir(parents=True)
        (self.home / ".ssh" / "id_ed25519").write_text("not a real key\n")
        self.workspace = root / "workspace"
        self.scratch = root / "scratch"
        self.outside = root / "outside"
        for path in (self.workspace, self.scratch, self.outside):
            path.mkdir()
        self.events = root / "events.jsonl"
        self.spans = root / "spans.jsonl"
        self.stderr = root / "proxy.stderr"

    def policy(self, **extra: list[str]) -> Path:
        lines = [f'workspace = "{self.workspace}"', f'tmpdir = "{self.scratch}"']
        lines += [f"{key} = {json.dumps(value)}" for key, value in extra.items()]
        path = self.root / "policy.toml"
        path.write_text("[probe]\n" + "\n".join(lines) + "\n")
        return path

    def params(self, probe: str, policy: Path, profile: str = NO_FAULTS) -> StdioServerParameters:
        config = write_profile(self.root, profile)
        args = ["-m", "mcpfault", "proxy", "--config", str(config), "--events", str(self.events)]
        args += ["--spans", str(self.spans), "--probe", probe, "--probe-policy", str(policy), "--", *SERVER]
        env = {**os.environ, "HOME": str(self.home), "PYTHONDONTWRITEBYTECODE": "1"}
        return StdioServerParameters(command=sys.executable, args=args, cwd=str(self.workspace), env=env)

    def reports(self) -> list[dict[str, Any]]:
        return [r for r in read_jsonl(self.events) if r.get("record") == "side_effects"]

    def tool_spans(self) -> list[dict[str, Any]]:
        spans = []
        for line in read_jsonl(self.spans):
            for resource in line["resourceSpans"]:
                for scope in resource["scopeSpans"]:
                    spans += [s for s in scope["spans"] if s["name"].startswith("tools/call")]
        return spans


@pytest.fixture(autouse=True)
def patient_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's client SIGTERMs its server 2 s after closing its stdin; on a loaded machine the proxy's
    orderly exit (server, sidecar, spans, summary) can take longer, and the summary is what we check."""
    import mcp.client.stdio

    monkeypatch.setattr(mcp.client.stdio, "PROCESS_TERMINATION_TIMEOUT", 30.0)


def run_client(params: StdioServerParameters, stderr: Path, script: Callable[[Client], Any]) -> None:
    async def main() -> None:
        with open(stderr, "w", encoding="utf-8") as errlog, anyio.fail_after(180):
            async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=30) as client:
                await script(client)

    anyio.run(main)


def every_tool(world: World, port: int) -> Callable[[Client], Any]:
    async def script(client: Client) -> None:
        await client.call_tool("echo", {"text": "hi"})
        await client.call_tool("shell_out", {"command": "true"})
        await client.call_tool("read_key", {})
        await client.call_tool("write_outside", {"path": str(world.outside / "note.txt")})
        await client.call_tool("connect_port", {"port": port})
        await client.call_tool("chmod_delete", {"path": str(world.outside / "hook.sh")})
        await client.call_tool("call_ptrace", {})

    return script


EXPECTED = {
    "echo": [],
    "shell_out": ["runtime.exec", "runtime.process_spawn"],
    "read_key": ["runtime.sensitive_read"],
    "write_outside": ["runtime.fs_write"],
    "connect_port": ["runtime.net_connect"],
    "chmod_delete": ["runtime.fs_chmod", "runtime.fs_delete", "runtime.fs_write"],
    "call_ptrace": ["runtime.ptrace"],
}


def findings_by_tool(reports: list[dict[str, Any]]) -> dict[str, list[str]]:
    return {r["tool"]: sorted({f["category"] for f in r["findings"]}) for r in reports}


@pytest.fixture
def listener():
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock.getsockname()[1]
    sock.close()


def test_every_finding_is_attributed_to_the_call_that_caused_it_with_ebpf(tmp_path: Path, listener: int) -> None:
    world = World(tmp_path)
    run_client(world.params("ebpf", world.policy()), world.stderr, every_tool(world, listener))
    reports = world.reports()
    assert [r["tool"] for r in reports] == list(EXPECTED)
    assert findings_by_tool(reports) == EXPECTED, reports
    assert all(r["probe_confirmed"] for r in reports)
    by_tool = {r["tool"]: r for r in reports}
    assert {e["type"] for e in by_tool["shell_out"]["side_effects"]} == {"process_spawn", "exec"}
    assert by_tool["connect_port"]["side_effects"] == [{"type": "connect", "detail": f"tcp 127.0.0.1:{listener}"}]
    key = str(world.home / ".ssh" / "id_ed25519")
    assert any(key in f["detail"] for f in by_tool["read_key"]["findings"])
    assert by_tool["echo"]["side_effects"] == []
    # the same on each tool's span: events and counts
    spans = {s["name"].removeprefix("tools/call "): s for s in world.tool_spans()}
    chmod = spans["chmod_delete"]
    attributes = {a["key"]: a["value"] for a in chmod["attributes"]}
    assert attributes["mcpfault.finding.count"] == {"intValue": "3"}
    categories = sorted(
        next(a["value"]["stringValue"] for a in e["attributes"] if a["key"] == "mcpfault.finding.category")
        for e in chmod["events"]
        if e["name"] == "mcpfault.finding"
    )
    assert categories == EXPECTED["chmod_delete"]
    assert not any(e["name"].startswith("mcpfault.") for e in spans["echo"]["events"])
    summary = world.stderr.read_text()
    assert "side effects per tool" in summary and "ptrace 1 (critical)" in summary


FAKE_SCRIPT = {
    "events": [
        {"trigger": "startup", "event": {"type": "exec", "pid": 1, "argv": ["/usr/bin/python3"]}},
        {"trigger": "begin", "tool": "shell_out", "event": {"type": "process_spawn", "pid": 2, "syscall": "vfork"}},
        {
            "trigger": "begin",
            "tool": "shell_out",
            "event": {"type": "exec", "pid": 3, "argv": ["/bin/sh", "-c", "true"]},
        },
        {
            "trigger": "begin",
            "tool": "read_key",
            "event": {"type": "file_open", "pid": 2, "path": "/h/.ssh/id_ed25519", "flags": "O_RDONLY"},
        },
        {
            "trigger": "end",
            "tool": "write_outside",
            "event": {"type": "file_open", "pid": 2, "path": "/elsewhere/note.txt", "flags": "O_WRONLY|O_CREAT"},
        },
        {
            "trigger": "begin",
            "tool": "connect_port",
            "event": {"type": "connect", "pid": 2, "proto": "tcp", "dst": "127.0.0.1:9"},
        },
        {
            "trigger": "begin",
            "tool": "chmod_delete",
            "event": {"type": "file_open", "pid": 2, "path": "/elsewhere/hook.sh", "flags": "O_WRONLY|O_CREAT|O_TRUNC"},
        },
        {
            "trigger": "begin",
            "tool": "chmod_delete",
            "event": {"type": "chmod", "pid": 2, "path": "/elsewhere/hook.sh", "mode": "755"},
        },
        {
            "trigger": "end",
            "tool": "chmod_delete",
            "event": {"type": "file_delete", "pid": 2, "path": "/elsewhere/hook.sh"},
        },
        {
            "trigger": "begin",
            "tool": "call_ptrace",
            "event": {"type": "ptrace", "pid": 2, "request": 2, "target_pid": 4194303},
        },
    ]
}


def test_the_fake_backend_gives_the_same_findings_deterministically(tmp_path: Path, listener: int) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(FAKE_SCRIPT))
    runs = []
    for attempt in range(2):
        world = World(tmp_path / f"run{attempt}")
        run_client(world.params(f"fake:{script}", world.policy()), world.stderr, every_tool(world, listener))
        runs.append([(r["tool"], r["side_effects"], r["findings"]) for r in world.reports()])
        assert findings_by_tool(world.reports()) == EXPECTED
    assert runs[0] == runs[1]


def test_allow_lists_suppress_what_they_allow(tmp_path: Path, listener: int) -> None:
    world = World(tmp_path)
    policy = world.policy(exec_allow=["/bin/sh"], net_allow=["127.0.0.1"], fs_write_allow=[str(world.outside)])
    run_client(world.params("ebpf", policy), world.stderr, every_tool(world, listener))
    assert findings_by_tool(world.reports()) == {
        **{tool: [] for tool in EXPECTED},
        "shell_out": ["runtime.process_spawn"],  # spawning is not an exec: no allow-list for it in RuntimePolicy
        "read_key": ["runtime.sensitive_read"],
        "call_ptrace": ["runtime.ptrace"],
    }


LOSE_ONE_WRITE = """
name = "lose-one-write"
[[faults]]
name = "lost-write"
type = "timeout"
mode = "drop"
tools = ["write_outside"]
limit = 1
"""


def test_a_dropped_response_then_a_retry_is_one_duplicate_side_effect(tmp_path: Path) -> None:
    world = World(tmp_path)
    target = world.outside / "ledger.txt"

    async def script(client: Client) -> None:
        with pytest.raises(MCPError):
            await client.call_tool("write_outside", {"path": str(target), "text": "pay"}, read_timeout_seconds=2.0)
        await client.call_tool("write_outside", {"path": str(target), "text": "pay"})  # the client retries
        await client.call_tool("write_outside", {"path": str(target), "text": "other"})  # a new call, not a repeat

    run_client(world.params("ebpf", world.policy(), LOSE_ONE_WRITE), world.stderr, script)
    assert target.read_text() == "pay\npay\nother\n"  # the server really acted twice
    lost, retry, other = world.reports()
    assert lost["server_acted"] == "true" and "duplicate_of" not in lost
    assert retry["duplicate_of"] == lost["call_id"] and "server_acted" not in retry
    assert "duplicate_of" not in other
    spans = world.tool_spans()
    acted = [a["value"] for s in spans for a in s["attributes"] if a["key"] == "mcpfault.server.acted"]
    assert acted == [{"stringValue": "true"}]
    duplicates = [e for s in spans for e in s["events"] if e["name"] == "mcpfault.duplicate_side_effect"]
    assert len(duplicates) == 1


@pytest.mark.parametrize(
    ("env", "prefix", "message"),
    [
        ({"MCPFAULT_BPFTRACE": "/nonexistent/bpftrace", "PATH": "/nonexistent"}, [], "needs bpftrace"),
        ({}, ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"], "needs root"),
    ],
)
def test_no_bpftrace_or_no_privileges_is_one_line_and_exit_2_before_anything_starts(
    tmp_path: Path, env: dict[str, str], prefix: list[str], message: str
) -> None:
    if prefix and os.geteuid() != 0:
        pytest.skip("dropping privileges needs root to start from")
    with tempfile.TemporaryDirectory() as shared:  # pytest's tmp_path is closed to the unprivileged user
        Path(shared).chmod(0o777)
        check_refused(Path(shared), env, prefix, message)


def check_refused(where: Path, env: dict[str, str], prefix: list[str], message: str) -> None:
    marker = where / "server-started"
    config = write_profile(where, NO_FAULTS)
    command = [*prefix, sys.executable, "-m", "mcpfault", "proxy", "--config", str(config), "--probe", "ebpf"]
    command += ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    python_path = {"PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        command, input="", capture_output=True, text=True, timeout=60, env={**os.environ, **python_path, **env}
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr
    assert not marker.exists()


def test_the_http_bridge_to_a_stdio_server_reports_side_effects(tmp_path: Path) -> None:

    script = tmp_path / "script.json"
    script.write_text(json.dumps(FAKE_SCRIPT))
    world = World(tmp_path / "w")
    config = write_profile(world.root, NO_FAULTS)
    command = [sys.executable, "-m", "mcpfault", "proxy", "--config", str(config), "--events", str(world.events)]
    command += ["--probe", f"fake:{script}", "--probe-policy", str(world.policy()), "--listen", "127.0.0.1:0"]
    command += ["--", *SERVER]
    proxy = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, cwd=world.workspace)
    try:
        assert proxy.stderr is not None
        line = proxy.stderr.readline()
        url = line.split("serving ", 1)[1].split(" ->", 1)[0]

        async def main() -> None:
            with anyio.fail_after(60):
                async with Client(url) as client:
                    await client.call_tool("call_ptrace", {})
                    await client.call_tool("echo", {"text": "x"})

        anyio.run(main)
    finally:
        proxy.terminate()
        proxy.communicate(timeout=30)
    assert findings_by_tool(world.reports()) == {"call_ptrace": ["runtime.ptrace"], "echo": []}


def test_the_sidecar_is_scoped_before_the_first_call(tmp_path: Path) -> None:
    """The fake's scope-triggered event is ambient: the scope op arrived (the server's pgid, generation 1)."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"events": [{"trigger": "scope", "event": {"type": "exec", "argv": ["/x"]}}]}))
    world = World(tmp_path / "w")

    async def calls(client: Client) -> None:
        await client.call_tool("echo", {"text": "x"})

    run_client(world.params(f"fake:{script}", world.policy()), world.stderr, calls)
    assert "side effects outside any tool call: 1" in world.stderr.read_text()


DYING_SIDECAR = """
import json, sys
print(json.dumps({"type": "status", "message": "ready", "bucket": "startup"}), flush=True)
for line in sys.stdin:
    control = json.loads(line)
    if control.get("phase") == "begin" and control["call_id"].startswith("2:"):
        print("this is not JSON", flush=True)
        sys.exit(3)  # dies during the second tool call
    if control["op"] == "scope":
        print(json.dumps({"type": "status", "message": "scope", "bucket": "ambient", **control}), flush=True)
    elif control["op"] == "mark":
        print(json.dumps({"type": "status", "message": control["phase"], "bucket": "call", "call_id": control["call_id"]}), flush=True)
"""


def test_a_sidecar_that_dies_costs_the_client_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sidecar = tmp_path / "dying_sidecar.py"
    sidecar.write_text(DYING_SIDECAR)
    monkeypatch.setenv("MCPFZ_PROBE_BIN", f"{sys.executable} {sidecar}")
    script = tmp_path / "script.json"
    script.write_text("[]")
    world = World(tmp_path / "w")
    answers: list[str] = []

    async def calls(client: Client) -> None:
        for text in ("one", "two", "three"):
            result = await client.call_tool("echo", {"text": text})
            answers.append(result.structured_content["result"])

    run_client(world.params(f"fake:{script}", world.policy()), world.stderr, calls)
    assert answers == ["one", "two", "three"]
    confirmed = [r["probe_confirmed"] for r in world.reports()]
    assert confirmed == [True, False, False]
    assert "the probe sidecar is gone" in world.stderr.read_text()


SECRET = "hunter2-do-not-leak"


@pytest.mark.parametrize("backend", ["ebpf", "fake"])
def test_no_secret_in_an_exec_argv_reaches_the_events_or_the_spans(tmp_path: Path, backend: str) -> None:
    """The kernel reports a shell's whole ``-c`` script (up to 200 characters): its secrets are redacted."""
    world = World(tmp_path)
    command = f"true --password={SECRET} --api-key {SECRET} MY_TOKEN={SECRET}"
    script = tmp_path / "script.json"
    exec_event = {"type": "exec", "pid": 3, "argv": ["/bin/sh", "-c", command]}
    script.write_text(json.dumps({"events": [{"trigger": "begin", "tool": "shell_out", "event": exec_event}]}))
    probe = "ebpf" if backend == "ebpf" else f"fake:{script}"

    async def run(client: Client) -> None:
        await client.call_tool("shell_out", {"command": command})

    run_client(world.params(probe, world.policy()), world.stderr, run)
    (report,) = world.reports()
    execs = [e["detail"] for e in report["side_effects"] if e["type"] == "exec"]
    assert execs == ["/bin/sh -c true --password=[redacted] --api-key [redacted] MY_TOKEN=[redacted]"], report
    assert any(f["category"] == "runtime.exec" for f in report["findings"])
    for written in (world.events, world.spans, world.stderr):
        assert SECRET not in written.read_text(), written
