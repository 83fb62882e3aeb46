"""The mock's write journal: one line per state change before its answer, replayed so state survives a restart."""

from __future__ import annotations

import json
import pathlib
import select
import signal
import subprocess
import sys
from typing import Any

import pytest

from mcpfault.mock import World
from mcpfault.mock.journal import Journal, JournalError
from mcpfault.mock.session import Session
from mcpfault.protocol.jsonlines import read_jsonl

SEED = 5
TIMEOUT = 30.0
INITIALIZE = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}


def _session(journal: pathlib.Path, seed: int = SEED) -> Session:
    session = Session(World.generate(seed), journal=Journal(journal, seed))
    session.replay()
    response = session.handle({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INITIALIZE})
    assert "result" in response
    return session


def _call(session: Session, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    response = session.handle(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    )
    result: dict[str, Any] = response["result"]
    return result


def _lines(path: pathlib.Path) -> list[dict[str, Any]]:
    return read_jsonl(path, strict=True)


def _without_noops(state: dict[str, Any]) -> dict[str, Any]:
    """The state a replay must reproduce: everything but the write log's no-op entries."""
    return {
        **{k: v for k, v in state.items() if k not in ("writes", "write_log")},
        "write_log": [w for w in state["write_log"] if w["changed"]],
    }


def test_only_state_changes_are_journaled_and_a_replay_rebuilds_the_state(tmp_path: pathlib.Path) -> None:
    journal = tmp_path / "journal.jsonl"
    first = _session(journal)
    device, other = first.world.device_ids()[:2]
    _call(first, "list_sites", {})
    _call(first, "get_device_status", {"device_id": device})
    assert not journal.exists()  # reads write nothing
    _call(first, "set_maintenance", {"device_id": device, "enabled": True, "reason": "swap PSU"})
    _call(first, "set_maintenance", {"device_id": device, "enabled": True, "reason": "swap PSU"})  # no change
    incident = {"device_id": other, "summary": "flapping", "severity": "high", "idempotency_key": "k1"}
    assert _call(first, "open_incident", incident)["structuredContent"]["created"] is True
    assert _call(first, "open_incident", incident)["structuredContent"]["created"] is False  # the key was seen
    _call(first, "open_incident", {"device_id": other, "summary": "again", "severity": "low"})
    refused = _call(first, "open_incident", {"device_id": other, "summary": " ", "severity": "low"})
    assert refused["isError"] is True
    lines = _lines(journal)
    assert [(line["tool"], line["revision"]) for line in lines] == [
        ("set_maintenance", 2),
        ("open_incident", 3),
        ("open_incident", 4),
    ]
    assert {line["seed"] for line in lines} == {SEED}

    restarted = _session(journal)  # a new process's memory, from the seed and the journal
    assert restarted.world.revision == first.world.revision == 4
    assert _without_noops(restarted.world.final_state()) == _without_noops(first.world.final_state())
    assert len(_lines(journal)) == 3  # replaying appends nothing
    # It goes on from where the first left off: the next incident id, the next revision.
    created = _call(restarted, "open_incident", {"device_id": device, "summary": "after", "severity": "low"})
    last = max(int(i.incident_id.removeprefix("INC-")) for i in first.world.incidents())
    assert created["structuredContent"]["incident_id"] == f"INC-{last + 1}"
    assert created["structuredContent"]["as_of"] == 5


def test_a_journal_of_another_world_is_refused(tmp_path: pathlib.Path) -> None:
    journal = tmp_path / "journal.jsonl"
    session = _session(journal)
    _call(session, "open_incident", {"device_id": session.world.device_ids()[0], "summary": "s", "severity": "low"})
    with pytest.raises(JournalError, match="seed 5, this world has seed 6"):
        _session(journal, seed=6)
    journal.write_text(journal.read_text() + '{"v": 1, "seed": 5}\n')
    with pytest.raises(JournalError, match="line 2: an entry needs 'tool'"):
        _session(journal)
    journal.write_text('not json\n{"v": 1}\n')
    with pytest.raises(JournalError, match="line 1: not JSON"):
        _session(journal)


def test_a_torn_last_line_is_skipped(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = tmp_path / "journal.jsonl"
    session = _session(journal)
    _call(session, "open_incident", {"device_id": session.world.device_ids()[0], "summary": "s", "severity": "low"})
    with journal.open("a") as out:
        out.write('{"v": 1, "seed": 5, "tool": "open_in')  # the process died mid-line
    assert _session(journal).world.revision == 2
    assert "a torn last line, skipped" in capsys.readouterr().err


# ---- the real server: killed with SIGKILL (no state written), started again on its journal --------


class _Server:
    def __init__(self, tmp_path: pathlib.Path, seed: int = SEED) -> None:
        self.state = tmp_path / "state.json"
        self.journal = tmp_path / "journal.jsonl"
        command = [sys.executable, "-m", "mcpfault.mock", "--seed", str(seed), "--state", str(self.state)]
        self.proc = subprocess.Popen(
            [*command, "--journal", str(self.journal)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._id = 0

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._id += 1
        self.proc.stdin.write(
            json.dumps({"jsonrpc": "2.0", "id": self._id, "method": method, "params": params}).encode()
        )
        self.proc.stdin.write(b"\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], TIMEOUT)
        assert ready, f"no answer within {TIMEOUT}s"
        response: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return response

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request("tools/call", {"name": name, "arguments": arguments})["result"]
        return result

    def close(self) -> tuple[int, str]:
        """Close stdin and wait: the exit status and stderr."""
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        try:
            rc = self.proc.wait(TIMEOUT)
        finally:
            self.proc.kill()
        stderr = self.proc.stderr.read().decode()
        for stream in (self.proc.stdout, self.proc.stderr):
            assert stream is not None
            stream.close()
        return rc, stderr


@pytest.mark.slow
def test_state_survives_a_sigkill_through_the_journal(tmp_path: pathlib.Path) -> None:
    device = World.generate(SEED).device_ids()[0]
    first = _Server(tmp_path)
    try:
        first.request("initialize", INITIALIZE)
        opened = first.call("open_incident", {"device_id": device, "summary": "before the kill", "severity": "low"})
        # The line is on disk by the time the answer arrives.
        assert [line["tool"] for line in _lines(first.journal)] == ["open_incident"]
        first.proc.send_signal(signal.SIGKILL)
        assert first.proc.wait(TIMEOUT) == -signal.SIGKILL
    finally:
        first.close()
    assert not first.state.exists()  # killed: its memory is gone, only the journal is left

    second = _Server(tmp_path)
    second.request("initialize", INITIALIZE)
    status = second.call("get_device_status", {"device_id": device})["structuredContent"]
    assert opened["structuredContent"]["incident_id"] in status["open_incident_ids"]
    assert status["as_of"] == 2
    second.call("set_maintenance", {"device_id": device, "enabled": True, "reason": "r"})
    rc, _ = second.close()
    assert rc == 0
    state = json.loads(second.state.read_text())
    assert state["revision"] == 3
    assert [i["summary"] for i in state["incidents"] if i["summary"] == "before the kill"] == ["before the kill"]
    assert [w["op"] for w in state["write_log"]] == ["open_incident", "set_maintenance"]


@pytest.mark.slow
def test_a_journal_of_another_seed_exits_2_and_leaves_the_state_file_alone(tmp_path: pathlib.Path) -> None:
    first = _Server(tmp_path)
    first.request("initialize", INITIALIZE)
    first.call("open_incident", {"device_id": World.generate(SEED).device_ids()[0], "summary": "s", "severity": "low"})
    assert first.close()[0] == 0
    kept = first.state.read_text()
    rc, stderr = _Server(tmp_path, seed=SEED + 1).close()
    assert rc == 2
    assert f"journal.jsonl, line 1: written for seed {SEED}, this world has seed {SEED + 1}" in stderr
    assert first.state.read_text() == kept
