"""`mcpfault audit` end to end: real servers (tests/servers/audit_server.py and the bundled mock, both
the official SDK's or ours over real stdio and HTTP), the real proxy with its faults and supervisor, the
real eBPF probe (CI runs as root; not skipped), the `mcpfault` command, `mcpfault.api.audit` and the
`mcpfault mcp-server` tool."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters, stdio_client

from mcpfault.api import audit
from mcpfault.protocol.jsonlines import read_jsonl
from mcpfault.telemetry import names
from mcpfault.telemetry.span_files import read_spans
from tests.http_support import free_port, stop, wait_for_port

pytestmark = pytest.mark.slow  # real servers, proxies and (for some) bpftrace attaching

ROOT = Path(__file__).resolve().parent.parent
SERVER = [sys.executable, str(ROOT / "tests" / "servers" / "audit_server.py")]
MOCK = [sys.executable, "-m", "mcpfault", "mock-server"]
MOCK_EXAMPLES = ROOT / "examples" / "audit" / "mock-examples.toml"
LOST_WAIT_S = 1.0  # the client waits this long for a lost reply: enough, since the proxy drops it at once


@pytest.fixture(autouse=True)
def patient_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's client SIGTERMs its server 2 s after closing its stdin; under load the proxy's orderly
    exit (server, sidecar, spans) can take longer, and its records are what we check."""
    import mcp.client.stdio

    monkeypatch.setattr(mcp.client.stdio, "PROCESS_TERMINATION_TIMEOUT", 30.0)


def mcpfault(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcpfault", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **(env or {})},
    )


def tool(document: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [t for t in document["tools"] if t["name"] == name]
    return found


def kinds(record: dict[str, Any]) -> list[str]:
    return [f["kind"] for f in record.get("findings", [])]


def called_tools(out: Path) -> list[str]:
    """The tools/call requests the proxy saw, by tool name, from its events file."""
    return [r["tool"] for r in read_jsonl(out / "events.jsonl") if r.get("method") == "tools/call" and "tool" in r]


def test_a_dry_run_prints_the_plan_and_touches_nothing(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    done = mcpfault("audit", "--workdir", str(workdir), "--state-tool", "list_notes", "--", *SERVER, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "DRY RUN, nothing was called" in done.stdout and "never against production data" in done.stdout
    assert "append_note: hints destructiveHint=false, idempotentHint=true" in done.stdout
    assert re.search(r"wipe_notes: .*\n.*\n  not called: destructive .* needs --confirm-destructive", done.stdout)
    assert "impossible: hints readOnlyHint=true\n  input schema unsatisfiable: no value satisfies" in done.stdout
    assert "observed by: the state tool list_notes({})" in done.stdout
    assert list(workdir.iterdir()) == []  # no tool ran: each of them writes a file here
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]  # and no audit directory was made
    as_json = mcpfault("audit", "--json", "--tools", "open_ticket", "--", *SERVER, cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    document = json.loads(as_json.stdout)
    assert document["dry_run"] is True and document["calls_made"] == 0
    (ticket,) = document["tools"]
    assert ticket["steps"] == ["plain", "lost", "retry", "lost-keyed", "retry-keyed"] and ticket["calls"] == []


def test_the_state_probe_grades_each_tool_and_no_destructive_tool_is_called(tmp_path: Path) -> None:
    out = tmp_path / "out"
    outcome = audit(
        SERVER,
        tools=["append_note", "upsert_setting", "open_ticket", "wipe_notes", "impossible"],
        state_tool="list_notes",
        confirm=True,
        out=out,
        seed=4,
        lost_wait_s=LOST_WAIT_S,
    )
    doc = outcome.document
    assert outcome.exit_code == 1 and not outcome.passed and doc["failing_findings"] == 1
    assert json.loads((out / "audit.json").read_text()) == doc

    append = tool(doc, "append_note")
    assert append["retry_safe"] == "no" and kinds(append) == ["not_idempotent"]
    evidence = append["findings"][0]["evidence"]
    assert [e["call"] for e in evidence] == ["lost", "retry"]
    text = append["arguments"]["text"]
    assert all(e["diff"] == [f"+  {json.dumps(text)},"] for e in evidence), evidence  # one more note each time
    span_ids = {s.span_id for s in read_spans(out / "spans.jsonl")}
    assert all(e["span_id"] in span_ids for e in evidence)

    upsert = tool(doc, "upsert_setting")
    assert upsert["retry_safe"] == "yes" and kinds(upsert) == [] and upsert["effects_seen"] is True
    ticket = tool(doc, "open_ticket")
    assert ticket["idempotency_key"] == "idempotency_key" and ticket["retry_safe"] == "only-with-key"
    assert [c["call"] for c in ticket["calls"]] == ["plain", "lost", "retry", "lost-keyed", "retry-keyed"]
    assert ticket["calls"][-1]["diff"] == []
    assert "key" not in ticket["calls"][0]["arguments"]

    wipe = tool(doc, "wipe_notes")
    assert "--confirm-destructive" in wipe["not_called"] and wipe["calls"] == []
    assert "wipe_notes" not in called_tools(out)
    assert (out / "workdir" / "notes.txt").exists()  # the notes it would have deleted
    impossible = tool(doc, "impossible")
    assert kinds(impossible) == ["unsatisfiable_schema"] and "impossible" not in called_tools(out)
    # Spans and events as any proxied session: the lost replies are dropped-response faults.
    drops = [r for r in read_jsonl(out / "events.jsonl") if r.get("fault_type") == "timeout"]
    assert [r["tool"] for r in drops] == ["append_note", "upsert_setting", "open_ticket", "open_ticket"], drops
    assert all(r["client_received"] == "nothing" and r["upstream_contacted"] for r in drops)


def test_a_state_resource_observes_and_the_call_bound_holds(tmp_path: Path) -> None:
    outcome = audit(
        SERVER,
        tools=["append_note", "upsert_setting"],
        state_resource="notes://all",
        max_calls=3,  # one tool's three calls; the state resource is no tools/call
        confirm=True,
        out=tmp_path / "out",
        lost_wait_s=LOST_WAIT_S,
    )
    append = outcome.tool("append_note")
    assert kinds(append) == ["not_idempotent"] and append["findings"][0]["evidence"][1]["diff"]
    upsert = outcome.tool("upsert_setting")
    assert upsert["calls"] == [] and "the call bound (--max-calls 3)" in upsert["not_called"]
    assert outcome.document["calls_made"] == 3


def test_the_time_bound_leaves_later_tools_uncalled(tmp_path: Path) -> None:
    outcome = audit(
        SERVER,
        tools=["append_note", "upsert_setting"],
        state_tool="list_notes",
        max_time_s=0.5,  # less than one tool's calls take: the lost reply alone is waited for 1 s
        confirm=True,
        out=tmp_path / "out",
        lost_wait_s=LOST_WAIT_S,
    )
    assert [c["call"] for c in outcome.tool("append_note")["calls"]] == ["plain", "lost", "retry"]
    upsert = outcome.tool("upsert_setting")
    assert upsert["calls"] == [] and upsert["not_called"] == "the time bound (--max-time-s 0.5) was reached"
    assert "upsert_setting" not in called_tools(tmp_path / "out")


def test_confirm_destructive_lets_a_destructive_tool_be_called(tmp_path: Path) -> None:
    out = tmp_path / "out"
    outcome = audit(
        SERVER,
        tools=["wipe_notes"],
        state_tool="list_notes",
        confirm=True,
        confirm_destructive=True,
        out=out,
        lost_wait_s=LOST_WAIT_S,
    )
    wipe = outcome.tool("wipe_notes")
    assert wipe["not_called"] is None and [c["call"] for c in wipe["calls"]] == ["plain", "lost", "retry"]
    assert called_tools(out).count("wipe_notes") == 3
    assert wipe["retry_safe"] == "yes"  # deleting what is gone changes nothing


def test_ebpf_sees_the_append_the_lie_and_the_write_outside_the_workdir(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    done = mcpfault(
        "audit", "--confirm", "--probe", "ebpf", "--out", str(out), "--lost-wait-s", "1",
        "--tools", "append_note", "--tools", "peek_notes", "--tools", "export_report",
        "--", *SERVER,
        cwd=tmp_path,
        env={"AUDIT_OUTSIDE_DIR": str(outside)},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    doc = json.loads((out / "audit.json").read_text())
    workdir = out / "workdir"

    append = tool(doc, "append_note")
    assert kinds(append) == ["not_idempotent"] and append["retry_safe"] == "no"
    retry = append["findings"][0]["evidence"][1]
    assert retry["call"] == "retry"
    assert {"type": "file_open", "detail": f"{workdir}/notes.txt (O_WRONLY|O_CREAT|O_APPEND)"} in retry["side_effects"]
    spans = {s.span_id: s for s in read_spans(out / "spans.jsonl")}
    call_id = str(spans[retry["span_id"]].attributes[names.PROBE_CALL_ID])
    assert call_id.startswith(f"{retry['call_number']}:"), call_id  # the probe's window is this call's span

    peek = tool(doc, "peek_notes")
    assert kinds(peek)[0] == "lying" and peek["effects_seen"] is True
    assert any("access.log" in e["detail"] for e in peek["findings"][0]["evidence"][0]["side_effects"])

    export = tool(doc, "export_report")
    assert "flagged" in kinds(export) and export["outside_workdir"] is True
    flagged = next(f for f in export["findings"] if f["kind"] == "flagged")
    assert str(outside / "report.txt") in flagged["evidence"][0]["outside_workdir"][0]["detail"]
    assert "lying (high)" in done.stdout and "flagged (medium)" in done.stdout and "FAILED" in done.stdout
    assert retry["span_id"] in done.stdout  # the table's evidence names the span


def test_ebpf_and_the_state_probe_both_see_a_lost_reply_crash_and_the_retry(tmp_path: Path) -> None:
    out = tmp_path / "out"
    outcome = audit(
        SERVER,
        tools=["append_note"],
        state_tool="list_notes",
        probe="ebpf",
        lose="crash",
        confirm=True,
        out=out,
        lost_wait_s=LOST_WAIT_S,
    )
    append = outcome.tool("append_note")
    assert kinds(append) == ["not_idempotent"]
    lost, retry = append["findings"][0]["evidence"]
    assert "restarted" in append["calls"][1]["error"]
    for evidence in (lost, retry):
        assert evidence["diff"] and any("notes.txt" in e["detail"] for e in evidence["side_effects"])


def normal(document: dict[str, Any], out: Path) -> str:
    """The document without what differs between two runs of the same audit: ids, times, paths."""
    text = json.dumps(document, sort_keys=True).replace(str(out), "OUT")
    text = re.sub(r'"(span_id|trace_id)": "[0-9a-f]+"', r'"\1": "ID"', text)
    return re.sub(r'"wall_s": [0-9.]+', '"wall_s": 0', text)


def test_the_same_seed_gives_the_same_arguments_and_the_same_report(tmp_path: Path) -> None:
    runs = []
    for name in ("one", "two"):
        out = tmp_path / name
        outcome = audit(
            SERVER,
            tools=["append_note", "open_ticket"],
            state_tool="list_notes",
            seed=9,
            confirm=True,
            out=out,
            lost_wait_s=LOST_WAIT_S,
        )
        runs.append(normal(outcome.document, out))
    assert runs[0] == runs[1]
    again = audit(
        SERVER,
        tools=["append_note", "open_ticket"],
        state_tool="list_notes",
        seed=9,
        confirm=True,
        out=tmp_path / "one",
        lost_wait_s=LOST_WAIT_S,
    )
    started = [r for r in read_jsonl(tmp_path / "one" / "events.jsonl") if r.get("event") == "proxy_started"]
    assert len(started) == 1  # the earlier audit's records were not left to be read as this one's
    assert json.loads(normal(again.document, tmp_path / "one"))["tools"][1]["retry_safe"] == "only-with-key"
    plans = [audit(SERVER, seed=seed, state_tool="list_notes").plan for seed in (9, 9, 10)]
    assert plans[0] == plans[1] and plans[0] != plans[2]


def test_the_bundled_mock_passes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = mcpfault(
        "audit", "--confirm", "--examples", str(MOCK_EXAMPLES), "--probe", "ebpf", "--out", str(out),
        "--state-tool", "get_device_status", "--state-args", '{"device_id": "ams2-core01"}', "--lost-wait-s", "1",
        "--", *MOCK,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads((out / "audit.json").read_text())
    assert doc["passed"] and doc["failing_findings"] == 0
    graded = {t["name"]: t["retry_safe"] for t in doc["tools"] if not t["not_called"]}
    assert graded == {
        "list_sites": "yes",
        "get_site": "yes",
        "list_devices": "yes",
        "get_interface_metrics": "yes",
        "set_maintenance": "yes",
        "open_incident": "only-with-key",
    }
    assert all(not t["findings"] for t in doc["tools"])


def test_an_http_server_is_audited_through_upstream(tmp_path: Path) -> None:
    port = free_port()
    server = subprocess.Popen(
        [*SERVER, "--http", str(port)], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_port(port, server)
        outcome = audit(
            upstream=f"http://127.0.0.1:{port}/mcp",
            tools=["append_note", "upsert_setting"],
            state_tool="list_notes",
            confirm=True,
            out=tmp_path / "out",
            lost_wait_s=LOST_WAIT_S,
        )
    finally:
        stop(server)
    assert kinds(outcome.tool("append_note")) == ["not_idempotent"]
    assert outcome.tool("upsert_setting")["retry_safe"] == "yes"
    assert (tmp_path / "notes.txt").exists()  # the server's own directory: the audit does not run it


def test_bad_input_and_a_server_that_cannot_start_get_clear_errors(tmp_path: Path) -> None:
    bad = mcpfault("audit", "--state-tool", "x", "--state-args", "[1]", "--", *SERVER, cwd=tmp_path)
    assert bad.returncode == 2 and "--state-args '[1]': give a JSON object" in bad.stderr
    none = mcpfault("audit", cwd=tmp_path)
    assert none.returncode == 2 and "give the server's command after '--'" in none.stderr
    no_probe = mcpfault("audit", "--confirm", "--probe", "fake:/no/such/events.json", "--", *SERVER, cwd=tmp_path)
    assert no_probe.returncode == 127 and "the proxy said: mcpfault proxy: --probe fake:/no/such" in no_probe.stderr
    relative = mcpfault("audit", "--", sys.executable, "no_such_server.py", cwd=tmp_path)
    assert relative.returncode == 127, relative.stderr
    assert "give its command with absolute paths" in relative.stderr and "no_such_server.py" in relative.stderr


def test_the_mcp_server_tool_has_the_same_safety_model(tmp_path: Path) -> None:
    async def main() -> None:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "mcpfault", "mcp-server"],
            env={**os.environ, "MCPFAULT_WORKDIR": str(tmp_path)},
        )
        with open(os.devnull, "w", encoding="utf-8") as errlog:
            async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=240) as client:
                base = {"server_command": SERVER, "tools": ["append_note", "wipe_notes"], "state_tool": "list_notes"}
                dry = await client.call_tool("audit_server", base)
                assert not dry.is_error, dry.content
                answer = dry.structured_content
                assert answer is not None and answer["dry_run"] and answer["audit_json"] is None
                assert any("needs --confirm-destructive" in line for line in answer["plan"])
                assert not (tmp_path / "audits").exists()
                half = await client.call_tool("audit_server", {**base, "dry_run": False})
                assert half.is_error and "confirm_destructive=true" in str(half.content)
                real = await client.call_tool("audit_server", {**base, "dry_run": False, "confirm_destructive": True})
                assert not real.is_error, real.content
                done = real.structured_content
                assert done is not None and done["passed"] is False
                by_name = {t["name"]: t for t in done["tools"]}
                assert by_name["append_note"]["findings"][0].startswith("not_idempotent (high)")
                assert "--confirm-destructive" in by_name["wipe_notes"]["not_called"]
                assert done["audit_json"].startswith("audits/") and (tmp_path / done["audit_json"]).exists()

    anyio.run(main)
