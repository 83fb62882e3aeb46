"""Property-based fuzzing of the proxy core, both directions (no I/O: thousands of cases per second).

Invariants: it never raises on what a peer sends; what it leaves alone comes out as the same bytes,
in order; every request the engine saw ends in exactly one event (when answered, cancelled, or when
the server exits) and one observed span.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcpfault.faults import profile
from mcpfault.faults.engine import Engine
from mcpfault.protocol import jsonrpc
from mcpfault.protocol.jsonrpc import MessageKind
from mcpfault.proxy.core import ProxyCore, To
from mcpfault.proxy.events import MemoryEventSink

ids = st.one_of(
    st.integers(-(2**70), 2**70), st.text(max_size=6), st.none(), st.floats(allow_nan=False, allow_infinity=False)
)
tools = st.sampled_from(["get_site", "list_devices", "set_maintenance", "open_incident", "echo"])


def request_line(request_id: Any, tool: str, text: str) -> bytes:
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {"t": text}},
    }
    return json.dumps(body, ensure_ascii=False).encode() + b"\n"


junk = st.one_of(
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"") + b"\n"),
    st.just(b"\xff\xfe\x00 not utf-8\n"),
    st.just(b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]\n'),
    st.just(b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"t":"\xe2\x80\xa8"}}\n'),
    st.just(b'{"jsonrpc":"2.0","id":true,"method":"x"}\n'),
)
client_lines = st.lists(
    st.one_of(st.builds(request_line, ids, tools, st.text(max_size=8)), junk), min_size=1, max_size=30
)


class Spans:
    def __init__(self) -> None:
        self.open = 0
        self.ended = 0

    def started(self, call: Any, decision: Any, started: float, *, from_server: bool = False) -> object:
        self.open += 1
        return object()

    def propagate(self, token: Any, meta: dict[str, Any]) -> bool:
        meta["traceparent"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        return True

    def finished(self, token: Any, outcome: Any) -> None:
        self.ended += 1

    def upstream_exited(self, exit_code: int) -> None:
        pass


def delivered(core: ProxyCore, emits: list[Any]) -> list[Any]:
    """What a transport does once an answer a fault held back is out: tell the core (its event is due)."""
    for emit in emits:
        if emit.answers is not None:
            core.answer_delivered(emit.answers)
    return emits


def run_session(text: str, lines: list[bytes], answer_every: int, observed: bool) -> None:
    sink, spans = MemoryEventSink(), Spans()
    core = ProxyCore(Engine(profile.loads(text)), events=sink, observers=[spans] if observed else [])
    forwarded: list[bytes] = []
    requests = 0
    for index, line in enumerate(lines):
        kind = jsonrpc.parse(line).kind
        requests += kind is MessageKind.REQUEST
        emits = delivered(core, core.from_client(line))
        to_server = [e.data for e in emits if e.to is To.SERVER]
        if kind is not MessageKind.REQUEST:
            assert to_server == [line]  # left alone: the very same bytes
        forwarded += to_server
        if index % answer_every == 0:
            for sent in to_server:
                body = jsonrpc.parse(sent).body
                if body is not None and "method" in body and "id" in body:
                    answer = json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": {"ok": True}}).encode() + b"\n"
                    delivered(core, core.from_server(answer))
    core.from_server(b"\xc3\x28 server junk\n")
    core.upstream_exited(1)
    assert core.in_flight == 0
    assert len(sink.records) == requests  # one event per request the engine saw, whatever happened to it
    if observed:
        assert spans.ended == spans.open == requests


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=client_lines, answer_every=st.integers(1, 4), observed=st.booleans())
def test_baseline_core_never_raises_and_accounts_for_every_request(
    lines: list[bytes], answer_every: int, observed: bool
) -> None:
    run_session("", lines, answer_every, observed)


MIXED = Path("profiles/mixed.toml").read_text()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=client_lines, answer_every=st.integers(1, 4), observed=st.booleans())
def test_faulted_core_never_raises_and_accounts_for_every_request(
    lines: list[bytes], answer_every: int, observed: bool
) -> None:
    run_session(MIXED, lines, answer_every, observed)


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(junk, max_size=20))
def test_server_side_junk_is_relayed_untouched_in_order(lines: list[bytes]) -> None:
    core = ProxyCore(Engine(profile.loads("")))
    out = [e.data for line in lines for e in core.from_server(line)]
    assert out == lines
