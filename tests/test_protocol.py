from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcpfault.protocol import jsonrpc
from mcpfault.protocol.eras import Era, EraTracker
from mcpfault.protocol.jsonrpc import MessageKind


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n', MessageKind.REQUEST),
        (b'{"jsonrpc":"2.0","id":"a","method":"x"}', MessageKind.REQUEST),
        (b'{"jsonrpc":"2.0","id":null,"method":"x"}', MessageKind.REQUEST),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"x"}', MessageKind.REQUEST),
        (b'{"jsonrpc":"2.0","method":"notifications/initialized"}', MessageKind.NOTIFICATION),
        (b'{"jsonrpc":"2.0","id":1,"result":{}}', MessageKind.RESPONSE),
        (b'{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}', MessageKind.RESPONSE),
        (b'{"jsonrpc":"2.0","id":true,"method":"x"}', MessageKind.OPAQUE),
        (b"[{}]", MessageKind.OPAQUE),
        (b"42", MessageKind.OPAQUE),
        (b"\xff\xfe", MessageKind.OPAQUE),
        (b"not json", MessageKind.OPAQUE),
        (b"{}", MessageKind.OPAQUE),
        (b"[" * 100_000, MessageKind.OPAQUE),
    ],
)
def test_parse_classifies_without_raising(line: bytes, kind: MessageKind) -> None:
    message = jsonrpc.parse(line)
    assert message.kind is kind
    if kind is MessageKind.OPAQUE:
        assert message.why_opaque


def test_id_key_keeps_json_types_apart() -> None:
    assert jsonrpc.id_key(1) != jsonrpc.id_key("1")
    assert jsonrpc.id_key(None) != jsonrpc.id_key("null")


def test_encode_is_one_line_even_with_line_separators() -> None:
    data = jsonrpc.encode({"text": "a\nb\u2028c"})
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    assert json.loads(data)["text"] == "a\nb\u2028c"


def test_era_from_legacy_handshake() -> None:
    era = EraTracker()
    era.observe_request("initialize", {"protocolVersion": "2025-11-25"})
    era.observe_handshake_result("initialize", {"protocolVersion": "2025-06-18"})
    assert (era.era, era.protocol_version) == (Era.LEGACY, "2025-06-18")


def test_era_from_modern_meta_and_auto_fallback() -> None:
    era = EraTracker()
    meta = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}
    era.observe_request("server/discover", meta)
    assert (era.era, era.protocol_version) == (Era.MODERN, "2026-07-28")
    # A client in auto mode falls back to initialize when the server is legacy.
    era.observe_request("initialize", {"protocolVersion": "2025-11-25"})
    assert (era.era, era.protocol_version) == (Era.LEGACY, "2025-11-25")


def test_json_lines_split_at_lf_only_and_skip_a_partial_last_line(tmp_path: Path) -> None:
    from mcpfault.protocol.jsonlines import read_jsonl

    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"text": "a\xe2\x80\xa8b\xe2\x80\xa9c\xc2\x85d"}\n{"n": 2}\n{"n": 3, "cut')
    assert read_jsonl(path) == [{"text": "a\u2028b\u2029c\x85d"}, {"n": 2}]
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_strict_json_lines_name_the_line_that_does_not_parse_and_a_missing_file(tmp_path: Path) -> None:
    from mcpfault.protocol.jsonlines import read_jsonl

    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"text": "a\xe2\x80\xa8b"}\n\n{"n": 2}\n')
    assert read_jsonl(path, strict=True) == [{"text": "a\u2028b"}, {"n": 2}]
    path.write_bytes(b'{"n": 1}\n{"n": 2, "cut\n')
    with pytest.raises(ValueError, match=r"rows\.jsonl:2: not a JSON line"):
        read_jsonl(path, strict=True)
    with pytest.raises(FileNotFoundError):
        read_jsonl(tmp_path / "missing.jsonl", strict=True)
