"""ProxyCore without any I/O: lines in, Emits out."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from mcpfault.faults import profile
from mcpfault.faults.engine import Engine
from mcpfault.proxy.core import ProxyCore, To
from mcpfault.proxy.events import MemoryEventSink
from tests.conftest import call, request


def core(text: str = "", clock: list[float] | None = None) -> tuple[ProxyCore, MemoryEventSink]:
    sink = MemoryEventSink()
    ticks = clock if clock is not None else [0.0]
    return ProxyCore(Engine(profile.loads(text)), events=sink, clock=lambda: ticks[0]), sink


def answer(request_id: Any, **result: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode() + b"\n"


def test_untouched_lines_are_the_same_objects() -> None:
    proxy, sink = core()
    line = call(1, "echo", text="x")
    [emit] = proxy.from_client(line)
    assert emit.to is To.SERVER and emit.data is line
    reply = answer(1, ok=True)
    [back] = proxy.from_server(reply)
    assert back.to is To.CLIENT and back.data is reply
    assert sink.records[0]["client_received"] == "response"


def test_duplicate_ids_in_flight_are_matched_in_order() -> None:
    proxy, sink = core('[[faults]]\ntype = "timeout"\nlimit = 1\n')
    proxy.from_client(call(1, "a"))  # dropped on the way back
    proxy.from_client(call(1, "b"))
    assert proxy.from_server(answer(1, n=1)) == []
    [second] = proxy.from_server(answer(1, n=2))
    assert json.loads(second.data)["result"] == {"n": 2}
    assert [r["client_received"] for r in sink.records] == ["nothing", "response"]


def test_server_initiated_requests_and_client_answers_pass_through() -> None:
    proxy, sink = core('[[faults]]\ntype = "error"\n')
    sampling = request(0, "sampling/createMessage", {"messages": []})
    [to_client] = proxy.from_server(sampling)
    assert to_client.to is To.CLIENT and to_client.data is sampling
    client_answer = answer(0, role="assistant")
    [to_server] = proxy.from_client(client_answer)
    assert to_server.to is To.SERVER and to_server.data is client_answer
    assert sink.records == []


def test_stray_response_with_unknown_id_is_relayed() -> None:
    proxy, _ = core()
    stray = answer(99)
    assert proxy.from_server(stray)[0].data is stray


def test_upstream_exit_answers_what_the_server_never_answered() -> None:
    clock = [0.0]
    proxy, sink = core('[[faults]]\ntype = "timeout"\nlimit = 1\n', clock)
    proxy.from_client(call("x", "a"))
    clock[0] = 1.0
    proxy.from_client(call(2, "b"))
    clock[0] = 2.0
    proxy.from_client(call(3, "c"))
    proxy.from_server(answer("x"))  # dropped by the fault: stays lost
    emits = proxy.upstream_exited(1)
    bodies = [json.loads(e.data) for e in emits]
    assert [b["id"] for b in bodies] == [2, 3]
    assert all(b["error"]["data"]["mcpfault"]["exit_code"] == 1 for b in bodies)
    assert proxy.in_flight == 0
    assert [r["client_received"] for r in sink.records] == ["nothing", "upstream_exited", "upstream_exited"]


def test_error_reply_goes_straight_back() -> None:
    proxy, sink = core('[[faults]]\ntype = "error"\nmode = "tool"\nmessage = "down"\n')
    [emit] = proxy.from_client(call(4, "t"))
    assert emit.to is To.CLIENT
    assert json.loads(emit.data)["result"] == {"content": [{"type": "text", "text": "down"}], "isError": True}
    assert sink.records[0]["upstream_contacted"] is False and sink.records[0]["client_received"] == "tool_error"


def test_drift_notification_precedes_the_rewritten_request() -> None:
    proxy, sink = core('[[faults]]\ntype = "schema_drift"\nrename_args = { a = "b" }\nnotify = true\n')
    emits = proxy.from_client(call(1, "t", b=1))
    assert [e.to for e in emits] == [To.CLIENT, To.SERVER]
    assert json.loads(emits[0].data)["method"] == "notifications/tools/list_changed"
    assert json.loads(emits[1].data)["params"]["arguments"] == {"a": 1}
    assert sink.records == []  # recorded when the answer comes back
    proxy.from_server(answer(1))
    assert sink.records[0]["upstream_request_modified"] is True


def test_opaque_lines_are_counted_per_direction() -> None:
    proxy, _ = core()
    for line in (b"junk\n", b"\xff\n"):
        assert proxy.from_client(line)[0].data is line
    proxy.from_server(b"[1]\n")
    assert proxy.stats.opaque == {"client->server": 2, "server->client": 1}


def test_latency_emits_a_delay() -> None:
    proxy, sink = core('[[faults]]\ntype = "latency"\ndelay_s = 0.75\n')
    proxy.from_client(call(1, "t"))
    [emit] = proxy.from_server(answer(1))
    proxy.answer_delivered(emit.answers)
    assert emit.delay_s == 0.75 and sink.records[0]["delay_s"] == 0.75


def test_malformed_classified_as_malformed() -> None:
    proxy, sink = core('[[faults]]\ntype = "malformed"\nmodes = ["wrong_id"]\n')
    proxy.from_client(call(1, "t"))
    proxy.from_server(answer(1))
    assert sink.records[0]["client_received"] == "malformed" and sink.records[0]["fault_mode"] == "wrong_id"


def cancel(request_id: Any) -> bytes:
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}
    return json.dumps(note).encode() + b"\n"


def test_a_delayed_answer_is_recorded_when_the_client_gets_it() -> None:
    clock = [0.0]
    proxy, sink = core('[[faults]]\ntype = "latency"\ndelay_s = 5.0\n', clock)
    proxy.from_client(call(1, "echo"))
    clock[0] = 0.014  # the server answers fast
    [held] = proxy.from_server(answer(1, ok=True))
    assert held.delay_s == 5.0 and held.answers == 1
    assert sink.records == []  # the client has nothing yet
    clock[0] = 5.014
    proxy.answer_delivered(held.answers)  # what the transport says once the bytes are out
    (event,) = sink.records
    assert event["client_received"] == "response" and event["delay_s"] == 5.0
    assert event["duration_s"] == 5.014  # what the client waited, the injected delay included


def test_a_client_that_cancels_during_the_delay_is_recorded_as_cancelled() -> None:
    clock = [0.0]
    proxy, sink = core('[[faults]]\ntype = "latency"\ndelay_s = 5.0\n', clock)
    proxy.from_client(call(1, "echo"))
    [held] = proxy.from_server(answer(1, ok=True))
    clock[0] = 2.0
    proxy.from_client(cancel(1))
    (event,) = sink.records
    assert event["client_received"] == "cancelled" and event["duration_s"] == 2.0
    assert +proxy.stats.received == {"cancelled": 1}
    proxy.answer_delivered(held.answers)  # the late bytes still go out; the record stays as written
    assert len(sink.records) == 1


def test_a_client_that_leaves_during_the_delay_over_http_is_recorded_as_cancelled() -> None:
    proxy, sink = core('[[faults]]\ntype = "latency"\ndelay_s = 5.0\n')
    proxy.from_client(call(7, "echo"))
    proxy.from_server(answer(7, ok=True))
    assert proxy.end(7, "cancelled") is True  # the HTTP transport, when the client's connection closes
    assert [e["client_received"] for e in sink.records] == ["cancelled"]


def summary_of(proxy: ProxyCore) -> str:
    import io

    from mcpfault.proxy import summary

    out = io.StringIO()
    summary.render(proxy.stats, proxy.engine, proxy.era, out)
    return out.getvalue()


def modern_call(request_id: int, tool: str) -> bytes:
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": tool, "_meta": meta}}
    return json.dumps(body).encode() + b"\n"


def test_summary_says_none_counts_both_eras_and_when_a_drift_took_hold() -> None:
    quiet, _ = core()
    quiet.from_client(call(1, "echo"))
    quiet.from_server(answer(1))
    text = summary_of(quiet)
    assert "faulted requests: none" in text and "client received -" not in text

    drift, _ = core('[[faults]]\nname = "d"\ntype = "schema_drift"\nafter = 2\nrename_fields = { a = "b" }\n')
    for request_id in range(1, 6):
        line = call(request_id, "t") if request_id <= 2 else modern_call(request_id, "t")
        drift.from_client(line)
        drift.from_server(answer(request_id, a=1))
    text = summary_of(drift)
    assert "in force from call 3" in text  # after = 2: the third call is the first drifted one
    assert "eras legacy 2, modern 3" in text


def test_records_take_their_time_from_the_injected_clocks() -> None:
    """Sans-IO: the record's ``time`` is the wall clock given, its duration the core clock's."""
    sink = MemoryEventSink()
    ticks = [10.0]
    wall = datetime(2026, 12, 4, 18, 30, 5, 123456, tzinfo=UTC)
    rule = '[[faults]]\nname = "boom"\ntype = "error"\ntools = ["echo"]\nprobability = 1.0\n'
    proxy = ProxyCore(Engine(profile.loads(rule)), events=sink, clock=lambda: ticks[0], wall_clock=lambda: wall)
    proxy.from_client(call(1, "plain"))
    ticks[0] = 10.25
    proxy.from_server(answer(1, ok=True))
    proxy.from_client(call(2, "echo"))
    base = {"time": "2026-12-04T18:30:05.123+00:00", "upstream_request_modified": False, "era": "unknown"}
    assert sink.records == [
        {
            **base,
            "request_id": 1,
            "method": "tools/call",
            "tool": "plain",
            "rule": None,
            "fault_type": None,
            "fault_mode": None,
            "upstream_contacted": True,
            "client_received": "response",
            "duration_s": 0.25,
            "protocol_version": None,
        },
        {
            **base,
            "request_id": 2,
            "method": "tools/call",
            "tool": "echo",
            "rule": "boom",
            "fault_type": "error",
            "fault_mode": "protocol",
            "upstream_contacted": False,
            "client_received": "error",
            "duration_s": 0.0,
            "protocol_version": None,
            "error_code": -32603,
        },
    ]
