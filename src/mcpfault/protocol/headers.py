"""The 2026-07-28 HTTP headers that mirror a request's body: ``Mcp-Method``, ``Mcp-Name``, ``Mcp-Param-*``.

A server compares them with the body and rejects a disagreement with -32020 (the SDK's
``mcp.shared.inbound``, whose rules these follow: the name of a tools/call or prompts/get, the URI
of a resources/read; a value that is not visible ASCII travels as ``=?base64?...?=``). A proxy that
rewrites a body calls ``consistent`` so that what it forwards still agrees with itself.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

METHOD_HEADER: Final = "Mcp-Method"
NAME_HEADER: Final = "Mcp-Name"
PARAM_PREFIX: Final = "Mcp-Param-"
PROTOCOL_VERSION_HEADER: Final = "MCP-Protocol-Version"
HEADER_MISMATCH: Final = -32020  # what a 2026-07-28 server answers a request whose headers disagree with it
# The request parameter that Mcp-Name mirrors, per method.
NAME_PARAM: Final[Mapping[str, str]] = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
_SAFE: Final = re.compile(r"^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$")
_SENTINEL: Final = re.compile(r"^=\?base64\?(?P<payload>.*)\?=$")

Headers = list[tuple[str, str]]


def encode_value(value: str) -> str:
    """A header value as a client sends it: as is when it is visible ASCII, else base64 in a sentinel."""
    if _SAFE.match(value) and not _SENTINEL.match(value):
        return value
    return f"=?base64?{base64.b64encode(value.encode()).decode()}?="


def decode_value(raw: str) -> str | None:
    """What a header value carries; None for a malformed base64 sentinel."""
    found = _SENTINEL.match(raw)
    if found is None:
        return raw
    try:
        return base64.b64decode(found.group("payload"), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def consistent(headers: Iterable[tuple[str, str]], body: Mapping[str, Any]) -> Headers:
    """``headers`` made to agree with ``body`` (a request the proxy rewrote): ``Mcp-Method`` and
    ``Mcp-Name`` say what the body says, and an ``Mcp-Param-*`` whose value no argument carries any
    more is dropped. Only headers the client sent are changed: none is added."""
    method = body.get("method")
    params = body.get("params")
    params = params if isinstance(params, Mapping) else {}
    name_param = NAME_PARAM.get(method) if isinstance(method, str) else None
    name = params.get(name_param) if name_param is not None else None
    carried = _scalars(params.get("arguments"))
    out: Headers = []
    for key, given in headers:
        lower = key.lower()
        if lower == METHOD_HEADER.lower() and isinstance(method, str):
            out.append((key, method))
        elif lower == NAME_HEADER.lower() and isinstance(name, str):
            out.append((key, encode_value(name)))
        elif not lower.startswith(PARAM_PREFIX.lower()) or decode_value(given) in carried:
            out.append((key, given))
    return out


def _scalars(node: Any) -> set[str]:
    """Every scalar of ``node`` at any depth, rendered as a header carries it (booleans as true/false)."""
    found: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, Mapping):
            stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)
        elif isinstance(current, bool):
            found.add("true" if current else "false")
        elif isinstance(current, str | int | float):
            found.add(str(current))
    return found
