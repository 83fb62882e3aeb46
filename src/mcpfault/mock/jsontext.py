"""JSON text with a 2-space indent, as `json.dumps(value, indent=2)` writes it, at orjson's speed.

A tool's answer is sent as this text besides `structuredContent`, so every tools/call of every
session encodes one; the standard library's indented encoder is pure Python (its C encoder serves
only compact output) and cost each bench session a few ms of CPU. orjson's `OPT_INDENT_2` writes the
same bytes for what the mock's answers hold (str keys; strings, bools, None, ints, and floats in
0.2-250, where both print `repr`); what orjson refuses (a non-str key, an int beyond 64 bits) goes to
the standard library.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def indented(value: Any, *, ensure_ascii: bool = True) -> str:
    """``json.dumps(value, indent=2, ensure_ascii=ensure_ascii)``."""
    try:
        data = orjson.dumps(value, option=orjson.OPT_INDENT_2)
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(value, indent=2, ensure_ascii=ensure_ascii)
    if ensure_ascii and not data.isascii():  # orjson writes non-ASCII raw; json would escape it
        return json.dumps(value, indent=2, ensure_ascii=True)
    return data.decode("utf-8")
