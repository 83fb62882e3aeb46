"""Newline-delimited JSON-RPC 2.0 as MCP's stdio transport frames it.

A line is parsed once (twice when its id is a float: see ``parse``). Lines that are not a JSON-RPC
object (invalid UTF-8, non-JSON, batches, scalars, responses whose id no request can have) come back
as ``MessageKind.OPAQUE``: the proxy relays them untouched and the fault engine never sees them.
"""

from __future__ import annotations

import enum
import json
import math
import re
from typing import Any, Final, NamedTuple

import orjson

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# Implementation-defined server error. -32020..-32099 are reserved by the 2026-07-28 revision.
UPSTREAM_UNAVAILABLE = -32000


class NonFinite(float):
    """NaN or ±Infinity as a peer sent it (not JSON, but Python's json reads and writes it).

    A float subclass so that orjson refuses to encode it (it would write ``null``): ``encode``
    then falls back to the standard library, which writes it back as it came.
    """

    __slots__ = ()


def _parse_float(text: str) -> float:
    value = float(text)
    return NonFinite(value) if math.isinf(value) else value  # 1e999


_decoder = json.JSONDecoder(parse_constant=NonFinite, parse_float=_parse_float)
_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


class MessageKind(enum.Enum):
    REQUEST = "request"
    NOTIFICATION = "notification"
    RESPONSE = "response"
    OPAQUE = "opaque"


class Message(NamedTuple):
    """One parsed line. ``body`` is the decoded object, or None when the line is opaque.

    A NamedTuple, not a dataclass: one is built per line, and a frozen dataclass costs ~4x more to build.
    """

    kind: MessageKind
    body: dict[str, Any] | None
    why_opaque: str = ""

    @property
    def method(self) -> str:
        assert self.body is not None
        method: str = self.body["method"]
        return method

    @property
    def params(self) -> dict[str, Any]:
        assert self.body is not None
        params = self.body.get("params")
        return params if isinstance(params, dict) else {}


def parse(line: bytes) -> Message:
    """Classify one line (with or without its trailing newline) without ever raising."""
    try:
        # orjson is ~5x faster than json; it refuses what JSON-RPC peers still send at times (NaN,
        # 1e999), and then the standard library decides. It reads integers beyond 64 bits as floats:
        # an id that comes back as a float is read again by the standard library, so it stays exact.
        body = orjson.loads(line)
    except (orjson.JSONDecodeError, RecursionError):
        pass
    else:
        if body.__class__ is not dict or body.get("id").__class__ is not float:
            return _classify(body)
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Message(MessageKind.OPAQUE, None, f"invalid UTF-8 at byte {exc.start}")
    try:
        body = _decoder.decode(text)
    except json.JSONDecodeError as exc:
        return Message(MessageKind.OPAQUE, None, f"not JSON ({exc.msg} at column {exc.colno})")
    except (ValueError, RecursionError):
        return Message(MessageKind.OPAQUE, None, "JSON nested too deeply to parse")
    return _classify(body)


# The ids nearly every message has, told apart with one class check (floats, null and the rest take longer).
PLAIN_IDS: Final = (int, str)


def _classify(body: Any) -> Message:
    if body.__class__ is dict:
        # The shapes nearly every line has, decided with the fewest checks: this runs for every message.
        if "method" in body:
            if body.get("id").__class__ in PLAIN_IDS and body["method"].__class__ is str:
                return Message(MessageKind.REQUEST, body)
        elif "result" in body and body.get("id").__class__ in PLAIN_IDS:
            return Message(MessageKind.RESPONSE, body)
    if isinstance(body, list):
        return Message(MessageKind.OPAQUE, None, "a JSON-RPC batch (MCP has no batches since 2025-06-18)")
    if not isinstance(body, dict):
        return Message(MessageKind.OPAQUE, None, f"a JSON {type(body).__name__}, not a JSON-RPC object")
    method = body.get("method")
    if isinstance(method, str):
        if "id" in body and valid_id(body["id"]):
            return Message(MessageKind.REQUEST, body)
        if "id" not in body:
            return Message(MessageKind.NOTIFICATION, body)
        return Message(MessageKind.OPAQUE, None, f"a request id of JSON type {type(body['id']).__name__}")
    if "id" in body and ("result" in body or "error" in body):
        if valid_id(body["id"]):
            return Message(MessageKind.RESPONSE, body)
        # An id that no request can have (true, an object): matching it could only pair it with the wrong one.
        return Message(MessageKind.OPAQUE, None, f"a response id of JSON type {type(body['id']).__name__}")
    return Message(MessageKind.OPAQUE, None, "a JSON object that is neither request, notification nor response")


def valid_id(value: object) -> bool:
    # JSON-RPC allows string, number and null; MCP forbids null but peers send it, and we relay it.
    return value is None or (isinstance(value, str | int | float) and not isinstance(value, bool))


def id_key(request_id: object) -> tuple[bool, object]:
    """A dict key that keeps ``1`` and ``"1"`` apart, as JSON-RPC does (``1`` and ``1.0`` are one id)."""
    return (request_id.__class__ is str, request_id)


_PARAMS_OPEN: Final = re.compile(rb'"params"\s*:\s*\{')
_META_OPEN: Final = re.compile(rb'"_meta"\s*:\s*\{')
_PLAIN_STRING: Final = re.compile(r"[\x20-\x21\x23-\x5b\x5d-\x7e]*")  # printable ASCII, no quote, no backslash


def with_meta_string(line: bytes, params: object, key: str, value: str) -> bytes | None:
    """``line`` (a request's bytes) with ``params._meta[key] = value``, edited as bytes: the rest of the
    line stays as the peer wrote it, and nothing is parsed or encoded again.

    ``params`` is the request's parsed ``params``. None when the edit cannot be made safely from the
    text alone (the key or the old value appears more than once, an escape is involved, no ``params``
    object): the caller then encodes the changed request instead.
    """
    if not _PLAIN_STRING.fullmatch(key) or not _PLAIN_STRING.fullmatch(value):
        return None
    return with_plain_meta_string(line, params, key, value)


# Where compact JSON's params object opens: a request's ``_meta`` goes right after it.
PARAMS_OPEN: Final = b'"params":{'


def params_with_meta(key: str, value: str) -> bytes:
    """``PARAMS_OPEN`` followed by a ``_meta`` of one plain member (``with_plain_meta_string``'s
    ``key`` and ``value``) and a comma: the bytes ``with_params_meta`` puts in its place. Made ahead
    of the request (the proxy's traceparents are drawn before they are needed)."""
    before, after = params_with_meta_parts(key)
    return before + value.encode() + after


def params_with_meta_parts(key: str) -> tuple[bytes, bytes]:
    """What comes before and after the value in ``params_with_meta(key, value)``."""
    return PARAMS_OPEN + f'"_meta":{{"{key}":"'.encode(), b'"},'


def with_params_meta(line: bytes, params: object, opening: bytes) -> bytes | None:
    """``with_plain_meta_string`` in its common case, with the member already encoded
    (``params_with_meta(key, value)``): compact JSON, ``params`` a non-empty object without ``_meta``,
    ``"params"`` once in the line (so it is the request's own). The same bytes, one copy of the line;
    None when the line is not that case (``with_plain_meta_string`` then decides)."""
    if params.__class__ is dict and params and "_meta" not in params and line.count(b'"params"') == 1:
        edited = line.replace(PARAMS_OPEN, opening, 1)
        if len(edited) != len(line):  # the params object opened as compact JSON opens it
            return edited
    return None


def with_plain_meta_string(line: bytes, params: object, key: str, value: str) -> bytes | None:
    """``with_meta_string`` for a ``key`` and ``value`` the caller knows are plain printable ASCII
    without quotes or backslashes (a ``traceparent`` the proxy made): the request's hot path."""
    if not isinstance(params, dict):
        return None
    new = f'"{key}":"{value}"'.encode()
    meta = params.get("_meta")
    if meta is None:
        if line.count(b'"params"') != 1:
            return None
        # Compact JSON (what SDKs write) is found without the regular expression.
        end = line.find(b'"params":{') + 10
        if end < 10:
            if (found := _PARAMS_OPEN.search(line)) is None:
                return None
            end = found.end()
        insert = b'"_meta":{' + new + (b"}," if params else b"}")
        return line[:end] + insert + line[end:]
    if not isinstance(meta, dict):
        return None
    old = meta.get(key)
    if old is None:
        if key in meta or line.count(b'"_meta"') != 1 or (found := _META_OPEN.search(line)) is None:
            return None
        return line[: found.end()] + new + (b"," if meta else b"") + line[found.end() :]
    if not isinstance(old, str) or not _PLAIN_STRING.fullmatch(old):
        return None
    quoted = f'"{old}"'.encode()
    if line.count(quoted) != 1:
        return None
    return line.replace(quoted, f'"{value}"'.encode())


def encode(message: dict[str, Any]) -> bytes:
    """One compact JSON line; control characters are escaped, so the line has no embedded newline.

    orjson writes what the standard library writes (measured: ~5x faster); what it refuses (integers
    beyond 64 bits, ``NonFinite``, lone surrogates) goes to the standard library.
    """
    try:
        return orjson.dumps(message, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # orjson.JSONEncodeError is one
        return (_encoder.encode(message) + "\n").encode("utf-8")


def error_response(request_id: object, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def tool_error_result(request_id: object, text: str, *, modern: bool = False) -> dict[str, Any]:
    """A tools/call result with ``isError: true``: a tool execution error, not a protocol error.

    In the 2026-07-28 era every result carries ``resultType``; clients reject one without it.
    """
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": True}
    if modern:
        result["resultType"] = "complete"
    return {"jsonrpc": "2.0", "id": request_id, "result": result}
