"""``jsonrpc.with_meta_string``: the proxy's trace context written into a request's bytes, the rest of
the line kept as the client wrote it, or None when the text alone cannot say where it goes."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpfault.protocol import jsonrpc

NEW = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
OLD = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def edit(line: bytes) -> bytes | None:
    params = orjson.loads(line).get("params")
    return jsonrpc.with_meta_string(line, params, "traceparent", NEW)


@pytest.mark.parametrize(
    "text",
    [
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"t":"x"}}}',
        '{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}}',
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{},"name":"e"}}',
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta" : {"progressToken":7},"name":"e"}}',
        f'{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"_meta":{{"traceparent":"{OLD}","tracestate":"a=b"}}}}}}',
    ],
)
def test_the_value_lands_in_meta_and_nothing_else_changes(text: str) -> None:
    line = text.encode() + b"\n"
    edited = edit(line)
    assert edited is not None and edited.endswith(b"\n")
    before, after = json.loads(line), json.loads(edited)
    assert after["params"]["_meta"]["traceparent"] == NEW
    after["params"]["_meta"].pop("traceparent")
    before["params"].setdefault("_meta", {}).pop("traceparent", None)
    assert after == before


@pytest.mark.parametrize(
    "text",
    [
        '{"jsonrpc":"2.0","id":1,"method":"ping"}',  # no params object to put it in
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","arguments":{"params":{}}}}',
        f'{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"_meta":{{"traceparent":"{OLD}"}},"echo":"{OLD}"}}}}',
        '{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"traceparent":"\\u0030bad"}}}',
        '{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"x":1},"arguments":{"_meta":{}}}}',
    ],
)
def test_ambiguous_text_is_left_to_the_encoder(text: str) -> None:
    assert edit(text.encode()) is None


@given(st.dictionaries(st.text(max_size=8), st.one_of(st.integers(-(2**53), 2**53), st.text(max_size=12)), max_size=4))
def test_any_params_either_edit_correctly_or_decline(params: dict[str, object]) -> None:
    line = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "m", "params": params}) + b"\n"
    edited = jsonrpc.with_meta_string(line, params, "traceparent", NEW)
    if edited is None:
        return
    after = json.loads(edited)
    meta = after["params"].pop("_meta")
    assert meta.pop("traceparent") == NEW
    original = dict(params)
    original_meta = original.pop("_meta", {})
    assert after["params"] == original and meta == (original_meta if isinstance(original_meta, dict) else {})


@given(st.dictionaries(st.text(max_size=8), st.one_of(st.integers(-(2**53), 2**53), st.text(max_size=12)), max_size=4))
def test_the_opening_made_ahead_gives_the_same_bytes_or_declines(params: dict[str, object]) -> None:
    # with_params_meta: the proxy's common case, its traceparent encoded before the request came.
    line = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "m", "params": params}) + b"\n"
    edited = jsonrpc.with_params_meta(line, params, jsonrpc.params_with_meta("traceparent", NEW))
    if edited is not None:
        assert edited == jsonrpc.with_plain_meta_string(line, params, "traceparent", NEW)


@pytest.mark.parametrize(
    "text",
    [
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "e"}}',  # not compact
        '{"jsonrpc":"2.0","id":1,"method":"ping","params":{}}',  # empty: no comma after _meta
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{},"name":"e"}}',
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","arguments":{"params":{}}}}',
    ],
)
def test_the_opening_made_ahead_declines_what_it_does_not_cover(text: str) -> None:
    line = text.encode() + b"\n"
    opening = jsonrpc.params_with_meta("traceparent", NEW)
    assert jsonrpc.with_params_meta(line, orjson.loads(line)["params"], opening) is None
