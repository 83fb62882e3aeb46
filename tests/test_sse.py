"""Server-sent event framing: what is a message and what is only framing."""

from __future__ import annotations

from mcpfault.protocol.sse import EventSplitter


def test_a_priming_event_with_empty_data_carries_no_message() -> None:
    # What a spec-compliant server (server-everything, the SDKs' event stores) sends first on a stream.
    events = EventSplitter().feed(b'id: 1_0\ndata: \n\nid: 1_1\nevent: message\ndata: {"a":1}\n\n')
    assert [(e.event_id, e.data) for e in events] == [(b"1_0", None), (b"1_1", b'{"a":1}')]
    assert events[0].raw == b"id: 1_0\ndata: \n\n"  # still relayed byte for byte
