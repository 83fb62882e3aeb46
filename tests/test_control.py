"""The control API: the controller over the engine in-process, then the real proxy processes over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from mcpfault.control.controller import Conflict, Controller, Invalid, NoServerControl, NotFound
from mcpfault.faults import profile
from mcpfault.faults.base import Call
from mcpfault.faults.engine import Engine
from mcpfault.faults.live import LiveRules
from mcpfault.protocol.jsonlines import read_jsonl
from mcpfault.proxy.core import Stats
from mcpfault.proxy.events import MemoryEventSink
from mcpfault.telemetry.span_files import read_spans
from tests.conftest import PROFILES, SCRIPTED_SERVER, call, write_profile
from tests.control_support import CONTROL_LINE, ControlledHttpProxy, api

ERROR_RULE = {"type": "error", "name": "boom", "probability": 0.5, "code": -32603}


def tool_call(request_id: int, tool: str = "echo") -> Call:
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": tool, "arguments": {}}}
    return Call.from_body(body)


def controlled(text: str = "seed = 5\n") -> tuple[Engine, Controller, MemoryEventSink]:
    loaded = profile.loads(text)
    live = LiveRules.of(loaded)
    engine = Engine(loaded, live=live)
    events = MemoryEventSink()
    controller = Controller(live, transport="stdio", counters=engine.counters, stats=Stats(), events=events)
    return engine, controller, events


def fired(engine: Engine, start: int, count: int, tool: str = "echo") -> list[str | None]:
    out = []
    for i in range(start, start + count):
        decision = engine.decide(tool_call(i, tool))
        out.append(decision.applied[0].rule if decision.applied else None)
    return out


# -- the controller over the engine, in-process ---------------------------------------------------


def test_same_control_sequence_at_same_points_reproduces_the_same_faults() -> None:
    def run() -> list[str | None]:
        engine, controller, _ = controlled()
        seen = fired(engine, 0, 10)
        controller.add(ERROR_RULE)
        seen += fired(engine, 10, 30)
        controller.patch("boom", {"probability": 0.9})
        seen += fired(engine, 40, 30)
        controller.off()
        seen += fired(engine, 70, 10)
        controller.on()
        seen += fired(engine, 80, 20)
        return seen

    first, second = run(), run()
    assert first == second
    assert first[:10] == [None] * 10 and first[70:80] == [None] * 10  # before the rule, and switched off
    assert 5 < first[10:40].count("boom") < 25  # p = 0.5 over 30 calls
    assert first[40:70].count("boom") > first[10:40].count("boom")  # p = 0.9 after the patch


def test_a_runtime_rule_is_seeded_by_its_name_not_by_what_else_is_there() -> None:
    lone, lone_controller, _ = controlled("seed = 5\n")
    crowded, crowded_controller, _ = controlled(
        'seed = 5\n[[faults]]\nname = "a"\ntype = "latency"\ntools = ["other"]\ndelay_s = 0.1\n'
        '[[faults]]\nname = "b"\ntype = "timeout"\ntools = ["other"]\n'
    )
    lone_controller.add(ERROR_RULE)
    crowded_controller.add(ERROR_RULE)
    pattern = fired(lone, 0, 200)
    assert pattern == fired(crowded, 0, 200)
    other_name, other_controller, _ = controlled("seed = 5\n")
    other_controller.add({**ERROR_RULE, "name": "bang"})
    assert [bool(r) for r in fired(other_name, 0, 200)] != [bool(r) for r in pattern]


def test_kill_switch_reset_and_counters() -> None:
    engine, controller, events = controlled('seed = 2\n[[faults]]\nname = "always"\ntype = "error"\n')
    controller.add({**ERROR_RULE, "tools": ["only_this"]})
    assert fired(engine, 0, 3) == ["always"] * 3
    controller.off()
    assert fired(engine, 3, 3) == [None] * 3
    assert [r["active"] for r in controller.faults()] == [False, False]
    controller.on()
    controller.patch("always", {"enabled": False})
    assert fired(engine, 6, 2) == [None, None]
    controller.reset()  # the profile as loaded: "boom" gone, "always" enabled again, counters kept
    assert [r["name"] for r in controller.faults()] == ["always"]
    assert fired(engine, 8, 1) == ["always"]
    assert controller.fault("always")["injected"] == 4
    assert [e["control"] for e in events.records] == ["add", "off", "on", "patch", "reset"]
    assert [e["version"] for e in events.records] == [1, 2, 3, 4, 5]


def test_the_next_decision_carries_the_changes_for_its_span() -> None:
    engine, controller, _ = controlled()
    controller.add(ERROR_RULE)
    controller.patch("boom", {"limit": 1})
    first = engine.decide(tool_call(1))
    assert [(c.action, c.rule) for c in first.changes] == [("add", "boom"), ("patch", "boom")]
    assert engine.decide(tool_call(2)).changes == ()
    controller.off()
    # Even a method no rule acts on carries the news (notifications aside, every request has a span).
    listed = engine.decide(Call.from_body({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}))
    assert [c.action for c in listed.changes] == ["off"] and not listed.applied


def test_controller_errors_name_the_problem() -> None:
    _, controller, _ = controlled('[[faults]]\nname = "e"\ntype = "error"\n')
    with pytest.raises(Invalid) as invalid:
        controller.add({"type": "error", "probability": 2, "mode": "sideways", "tools": []})
    assert {p.field for p in invalid.value.problems} == {"probability", "mode", "tools"}
    with pytest.raises(Invalid, match="acts on http only; this proxy relays stdio"):
        controller.add({"type": "reset"})
    with pytest.raises(Conflict, match="'e' exists"):
        controller.add({"type": "latency", "name": "e", "delay_s": 1})
    with pytest.raises(NotFound, match="the rules are: e"):
        controller.remove("missing")
    with pytest.raises(Invalid) as patched:
        controller.patch("e", {"probability": -1, "enabled": "yes", "type": "latency"})
    assert [p.field for p in patched.value.problems] == ["type", "enabled", "probability"]
    with pytest.raises(NoServerControl, match="does not own a server process"):
        import anyio

        anyio.run(controller.crash)


def test_post_problems_read_as_validate_writes_them(tmp_path: Path) -> None:
    rule = {"type": "latency", "name": "slow", "delay_s": -1, "probability": "often", "after": 1.5}
    _, controller, _ = controlled()
    with pytest.raises(Invalid) as invalid:
        controller.add(rule)
    toml = "\n".join(f"{k} = {json.dumps(v)}" for k, v in rule.items())
    path = write_profile(tmp_path, f"[[faults]]\n{toml}\n")
    validate = subprocess.run(
        [sys.executable, "-m", "mcpfault", "validate", str(path)], capture_output=True, text=True, check=False
    )
    assert validate.returncode == 1
    from_validate = [line.split("faults[0]", 1)[1] for line in validate.stderr.splitlines() if "faults[0]" in line]
    from_api = [str(p).split("faults[0]", 1)[1] for p in invalid.value.problems]
    assert len(from_api) == 3 and from_api == from_validate


# -- the real stdio proxy -------------------------------------------------------------------------


def control_url(proxy: Any, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = CONTROL_LINE.search(proxy.stderr_path.read_bytes())
        if found:
            return found.group(1).decode()
        time.sleep(0.05)
    raise RuntimeError(f"no control API line: {proxy.stderr()}")


@pytest.mark.slow
def test_control_api_on_a_live_stdio_proxy(proxy_factory: Any, tmp_path: Path) -> None:
    spans_path = tmp_path / "spans.jsonl"
    proxy = proxy_factory(PROFILES / "baseline.toml", extra=("--control", "127.0.0.1:0", "--spans", str(spans_path)))
    url = control_url(proxy)

    def send(i: int) -> dict[str, Any]:
        proxy.send(call(i, "echo", text="x"))
        return proxy.read_json()

    assert "error" not in send(1)
    status, headers, added = api(url, "POST", "/faults", {**ERROR_RULE, "probability": 1.0, "limit": 2})
    assert status == 201 and added["origin"] == "runtime" and added["matched"] == 0
    assert "Access-Control-Allow-Origin" not in headers
    assert api(url, "POST", "/faults", ERROR_RULE)[0] == 409
    answers = [send(i) for i in range(2, 6)]
    assert ["error" in a for a in answers] == [True, True, False, False]  # the limit of 2 holds
    status, _, one = api(url, "GET", "/faults/boom")
    assert (status, one["matched"], one["injected"]) == (200, 4, 2)
    assert api(url, "PATCH", "/faults/boom", {"limit": 3})[2]["limit"] == 3
    assert "error" in send(6)
    assert api(url, "POST", "/off")[0] == 200
    assert api(url, "PATCH", "/faults/boom", {"limit": None})[0] == 200
    assert "error" not in send(7)
    assert api(url, "POST", "/on")[0] == 200
    assert "error" in send(8)
    assert api(url, "DELETE", "/faults/boom")[0] == 200
    assert api(url, "GET", "/faults/boom")[0] == 404
    assert "error" not in send(9)
    status, _, state = api(url, "GET", "/status")
    assert status == 200 and state["requests"] == {"tools/call": 9} and state["faults"] == {"error": 4}
    assert state["server"]["generation"] == 0 and state["server"]["pid"] > 0 and state["faults_enabled"]
    status, _, bad = api(url, "POST", "/faults", raw=b"{not json")
    assert status == 400 and "not JSON" in bad["error"]
    assert api(url, "GET", "/nothing")[0] == 404
    status, headers, _ = api(url, "PUT", "/faults")
    assert status == 405 and headers["Allow"] == "GET, POST"
    proxy.close_stdin()
    assert proxy.wait() == 0

    records = proxy.events()
    controls = [r for r in records if "control" in r]
    assert [r["control"] for r in controls] == ["add", "patch", "off", "patch", "on", "remove"]
    assert all("request_id" not in r for r in controls)
    assert len([r for r in records if "request_id" in r]) == 9  # every request once, none lost
    # Each change is an event on the span of the next request decided after it.
    events_by_request = {
        span.attributes["jsonrpc.request.id"]: [e.attributes.get("mcpfault.control.action") for e in span.events]
        for span in read_spans(spans_path)
    }
    assert events_by_request["2"].count("add") == 1
    assert events_by_request["6"].count("patch") == 1
    assert [a for a in events_by_request["7"] if a] == ["off", "patch"]
    assert [a for a in events_by_request["9"] if a] == ["remove"]
    assert not [a for a in events_by_request["3"] if a]


@pytest.mark.slow
def test_stdio_process_actions_through_the_api(proxy_factory: Any) -> None:
    proxy = proxy_factory(PROFILES / "baseline.toml", extra=("--control", "127.0.0.1:0"))
    url = control_url(proxy)
    proxy.send(call(1, "echo", text="x"))
    proxy.read_json()
    before = api(url, "GET", "/status")[2]["server"]
    status, _, restarted = api(url, "POST", "/server/restart")
    assert status == 200 and restarted["previous_generation"] == 0
    deadline = time.monotonic() + 10
    while (after := api(url, "GET", "/status")[2]["server"])["generation"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert after["generation"] == 1 and after["pid"] not in (None, before["pid"])
    proxy.send(call(3, "echo", text="after the restart"))  # answered by the next generation
    assert proxy.read_json()["id"] == 3
    assert api(url, "POST", "/server/stall")[0] == 400  # no duration
    status, _, stalled = api(url, "POST", "/server/stall?duration_s=0.8")
    assert status == 202 and stalled["duration_s"] == 0.8
    began = time.monotonic()
    proxy.send(call(2, "echo", text="during the stall"))
    assert proxy.read_json()["id"] == 2
    assert time.monotonic() - began > 0.6  # the frozen server answered only once let go
    assert api(url, "POST", "/server/crash?signal=SIGNOPE")[0] == 400
    status, _, crashed = api(url, "POST", "/server/crash?signal=SIGTERM")
    assert status == 200 and crashed["signal"] == "SIGTERM"
    assert proxy.wait() == 128 + 15  # the proxy ends with its server, as it always does
    assert [r["control"] for r in proxy.events() if "control" in r] == ["restart", "stall", "crash"]


# -- who may use it -------------------------------------------------------------------------------


@pytest.mark.slow
def test_token_host_and_origin_checks(tmp_path: Path) -> None:
    server = [sys.executable, str(SCRIPTED_SERVER)]
    proxy = ControlledHttpProxy(PROFILES / "baseline.toml", tmp_path, server, env={"MCPFAULT_CONTROL_TOKEN": "s3cret"})
    try:
        url = proxy.control
        port = url.rsplit(":", 1)[1]
        good = {"Authorization": "Bearer s3cret"}
        assert api(url, "GET", "/status", headers=good)[0] == 200
        assert api(url, "GET", "/status", headers={**good, "Host": f"localhost:{port}"})[0] == 200
        status, headers, body = api(url, "GET", "/status")
        assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer") and "token" in body["error"]
        assert api(url, "GET", "/status", headers={"Authorization": "Bearer s3cret-not"})[0] == 401
        assert api(url, "POST", "/off", headers={"Authorization": "s3cret"})[0] == 401
        # DNS rebinding: a page on evil.example whose name now points at 127.0.0.1.
        status, _, body = api(url, "POST", "/off", headers={**good, "Host": f"evil.example:{port}"})
        assert status == 403 and "Host" in body["error"]
        assert api(url, "POST", "/off", headers={**good, "Host": "127.0.0.1:1"})[0] == 403
        status, headers, body = api(url, "POST", "/off", headers={**good, "Origin": "http://evil.example"})
        assert status == 403 and "Origin" in body["error"]
        assert not [h for h in headers if h.lower().startswith("access-control")]
        assert api(url, "POST", "/off", headers={**good, "Origin": f"http://127.0.0.1:{port}"})[0] == 200
        status, headers, _ = api(url, "OPTIONS", "/off", headers={**good, "Origin": f"http://127.0.0.1:{port}"})
        assert status == 405 and not [h for h in headers if h.lower().startswith("access-control")]
        # Nothing refused changed anything: only the one allowed /off did.
        assert [r["control"] for r in proxy_events(proxy)] == ["off"]
    finally:
        proxy.close()


def proxy_events(proxy: ControlledHttpProxy) -> list[dict[str, Any]]:
    lines = proxy.events_file.read_text().splitlines()
    return [record for record in map(json.loads, lines) if "control" in record]


def test_a_wide_control_address_needs_a_token(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "mcpfault", "proxy", "-c", str(PROFILES / "baseline.toml")]
    command += ["--control", "0.0.0.0:0", "--", sys.executable, str(SCRIPTED_SERVER)]
    env = {k: v for k, v in __import__("os").environ.items() if k != "MCPFAULT_CONTROL_TOKEN"}
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=30, env=env, check=False, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 2
    assert "MCPFAULT_CONTROL_TOKEN" in done.stderr and "Traceback" not in done.stderr
    bad = subprocess.run(
        [*command[:6], "--control", "127.0.0.1:http", *command[8:]],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert bad.returncode == 2 and "--control '127.0.0.1:http'" in bad.stderr


# -- under load -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_rules_change_100_times_while_8_clients_call(tmp_path: Path) -> None:
    import http.client
    from urllib.parse import urlsplit

    from tests.http_support import modern_call, sse_messages

    proxy = ControlledHttpProxy(PROFILES / "baseline.toml", tmp_path, [sys.executable, str(SCRIPTED_SERVER)])
    at_least = 10  # calls per client; each keeps calling until the 100 changes are done
    changed = threading.Event()
    sent: dict[int, list[int]] = {}
    answers: dict[int, list[dict[str, Any]]] = {}
    failures: list[str] = []
    parts = urlsplit(proxy.url)
    answered = [0]  # calls answered, all clients together (the clients' threads add to it)
    answered_lock = threading.Lock()

    def client(number: int) -> None:
        connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=20)
        got: list[dict[str, Any]] = []
        ids = sent[number] = []
        try:
            i = 0
            while i < at_least or not changed.is_set():
                request_id = number * 100_000 + i
                ids.append(request_id)
                i += 1
                body, headers = modern_call(request_id, "echo", {"text": str(request_id)})
                connection.request("POST", parts.path, body=json.dumps(body), headers=headers)
                response = response_read = connection.getresponse()
                text = response_read.read().decode()
                if response.status == 200 and "event-stream" in response.getheader("Content-Type", ""):
                    got.extend(m for m in sse_messages(text) if m.get("id") == request_id)
                elif response.status == 200:
                    got.append(json.loads(text))
                else:
                    failures.append(f"{request_id}: HTTP {response.status} {text[:200]}")
                with answered_lock:
                    answered[0] += 1
        except Exception as exc:
            failures.append(f"client {number}: {exc!r}")
        finally:
            connection.close()
            answers[number] = got

    try:
        threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        changes = 0
        while changes < 100:
            step = changes % 5
            if step == 0:
                status = api(proxy.control, "POST", "/faults", {**ERROR_RULE, "probability": 0.5})[0]
            elif step == 1:
                status = api(proxy.control, "PATCH", "/faults/boom", {"probability": 1.0})[0]
            elif step == 2:
                status = api(proxy.control, "POST", "/off")[0]
            elif step == 3:
                status = api(proxy.control, "POST", "/on")[0]
            else:
                status = api(proxy.control, "DELETE", "/faults/boom")[0]
            assert status in (200, 201)
            changes += 1
            # Calls between the changes, whatever the machine's speed (on a slow one all 100 were once
            # done before a call came, and no answer was the rule's): at least one after each, and
            # after probability 1.0 and after /off more than the 8 that may have been decided before
            # the change, so that some answers are the rule's errors and some are not.
            with answered_lock:
                target = answered[0] + (9 if step in (1, 2) else 1)
            deadline = time.monotonic() + 20
            while answered[0] < target and not failures:
                assert time.monotonic() < deadline, f"no call was answered in 20 s after change {changes}"
                time.sleep(0.001)
        changed.set()
        for thread in threads:
            thread.join(60)
        status_code, _, state = api(proxy.control, "GET", "/status")
    finally:
        proxy.close()
    assert not failures, failures[:5]
    ids = [a["id"] for got in answers.values() for a in got]
    total = sum(len(each) for each in sent.values())
    assert sorted(ids) == sorted(i for each in sent.values() for i in each)  # one answer for each request
    records = read_jsonl(proxy.events_file, strict=True)
    requests = [r for r in records if "request_id" in r]
    assert Counter(r["request_id"] for r in requests) == Counter(ids)  # decided once each, none lost
    assert len([r for r in records if "control" in r]) == 100
    errors = [a for got in answers.values() for a in got if "error" in a]
    assert len([r for r in requests if r["rule"] == "boom"]) == len(errors) == state["faults_total"]
    assert 0 < len(errors) < total  # the changes really switched faults on and off under load
    assert state["requests_total"] == total and status_code == 200


@pytest.mark.slow
def test_a_windowed_rule_acts_only_inside_its_window_on_a_live_proxy(proxy_factory: Any, tmp_path: Path) -> None:
    windowed = write_profile(tmp_path, '[[faults]]\nname = "w"\ntype = "error"\nstart_after_s = 3\nduration_s = 3\n')
    proxy = proxy_factory(windowed)
    proxy.send(call(0, "echo", text="x"))
    assert "error" not in proxy.read_json(timeout=20)
    # The window is on the proxy's clock, which starts as it writes its start line: each call is judged
    # by when it was sent on that clock, however long the proxy took to start on this machine.
    from mcpfault.proxy.events import START_EVENT

    [start] = [row for row in read_jsonl(proxy.events_path) if row.get("event") == START_EVENT]
    epoch = datetime.fromisoformat(start["time"]).timestamp()
    judged = []
    for i, at in enumerate([1.0, 3.5, 5.5, 7.0], start=1):
        time.sleep(max(0.0, epoch + at - time.time()))
        sent = time.time() - epoch
        proxy.send(call(i, "echo", text="x"))
        errored = "error" in proxy.read_json()
        if min(abs(sent - 3), abs(sent - 6)) > 0.3:  # not so near an edge that reading stdin could cross it
            judged.append((3 <= sent < 6, errored))
    proxy.close_stdin()
    assert proxy.wait() == 0
    assert all(inside == errored for inside, errored in judged), judged
    assert {inside for inside, _ in judged} == {True, False}, judged  # both sides of the window were seen


@pytest.mark.slow
def test_http_process_actions_where_the_proxy_owns_the_server_and_where_it_does_not(tmp_path: Path) -> None:
    from http.server import BaseHTTPRequestHandler

    from tests.http_support import serve_in_thread, server_url

    bridged = ControlledHttpProxy(PROFILES / "baseline.toml", tmp_path, [sys.executable, str(SCRIPTED_SERVER)])
    try:
        pid = api(bridged.control, "GET", "/status")[2]["server"]["pid"]
        status, _, crashed = api(bridged.control, "POST", "/server/crash")
        assert status == 200 and crashed["crashed"] == pid
        assert bridged.proc.wait(15) == 128 + 9  # the proxy ends with the server it fronts, with its status
    finally:
        bridged.close()

    class Quiet(BaseHTTPRequestHandler):
        def log_message(self, *_args: Any) -> None:
            pass

    with serve_in_thread(Quiet) as upstream:
        relay = ControlledHttpProxy(PROFILES / "baseline.toml", tmp_path, [], upstream=server_url(upstream, "/mcp"))
        try:
            assert api(relay.control, "GET", "/status")[2]["server"] is None
            for action in ("crash", "stall?duration_s=1", "restart"):
                status, _, refused = api(relay.control, "POST", f"/server/{action}")
                assert status == 409 and "does not own a server process" in refused["error"], refused
        finally:
            relay.close()


@pytest.mark.slow
def test_hostile_requests_get_json_errors_and_the_proxy_goes_on(tmp_path: Path) -> None:
    proxy = ControlledHttpProxy(PROFILES / "baseline.toml", tmp_path, [sys.executable, str(SCRIPTED_SERVER)])
    try:
        url = proxy.control
        cases: list[tuple[str, str, bytes]] = [
            ("POST", "/faults", b"[" * 100_000),  # nesting beyond the parser's recursion limit
            ("POST", "/faults", b"[1, 2]"),
            ("POST", "/faults", b'"error"'),
            ("POST", "/faults", b'{"type": "error", "probability": NaN, "name": 7}'),
            ("POST", "/faults", b"\xff\xfe"),
            ("PATCH", "/faults/missing", b'{"probability": 0.5}'),
            ("POST", "/server/stall?duration_s=inf", b""),
            ("POST", "/server/stall?duration_s=-1", b""),
            ("POST", "/server/crash?signal=", b""),
            ("GET", "/faults/%2e%2e%2fstatus", b""),
            ("POST", "/faults", b"x" * (2 * 1024 * 1024)),
        ]
        for method, path, raw in cases:
            status, headers, body = api(url, method, path, raw=raw)
            assert 400 <= status < 500, (method, path, status, body)
            assert headers["Content-Type"] == "application/json" and body["error"], (path, body)
        assert api(url, "PATCH", "/faults/x", raw=b"[]")[0] == 404
        assert api(url, "GET", "/status")[0] == 200  # still serving
    finally:
        # Ended cleanly: the SIGTERM is forwarded, and the scripted server it kills exits 143.
        assert proxy.close() == 143
