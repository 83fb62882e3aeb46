"""JSON lines, as every file of ours is written: one JSON value per line, split at LF only.

Not ``str.splitlines``: it also splits at U+2028, U+2029 and other separators, which JSON carries
raw inside strings (orjson writes them unescaped), and would cut a record in two.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def read_jsonl(path: Path, *, strict: bool = False) -> list[Any]:
    """Every complete record of ``path`` ([] when it does not exist); a line that does not parse (a
    writer killed mid-line leaves at most one) is skipped.

    ``strict``, for a file whose writer has finished (what a test reads): a missing file raises
    ``FileNotFoundError`` and a line that does not parse raises ``ValueError`` naming the file and line.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if strict:
            raise
        return []
    return parse_jsonl(data, where=str(path), strict=strict)


def parse_jsonl(data: str | bytes, *, where: str = "<text>", strict: bool = True) -> list[Any]:
    """The records of JSON-lines text already in hand (a process's stdout, say), split at LF only.
    Blank lines are skipped; one that does not parse raises ``ValueError`` naming ``where`` and the
    line, or with ``strict=False`` is skipped (a writer killed mid-line leaves at most one)."""
    text = data if isinstance(data, bytes) else data.encode()
    rows = []
    for number, line in enumerate(text.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError as error:
            if strict:
                raise ValueError(f"{where}:{number}: not a JSON line ({error})") from error
            continue
    return rows


def dumps_line(record: Any, **options: Any) -> str:
    """``record`` as one line of JSON that every reader parses: a non-finite float (NaN, Infinity, which
    Python's json writes bare and Node's JSON.parse refuses) becomes null. No newline; ``options`` go to
    :func:`json.dumps` (``separators``, ``default``, ...)."""
    try:
        return json.dumps(record, allow_nan=False, **options)
    except ValueError:  # rare: inputs are checked, so only a value computed from nothing (0/0) gets here
        return json.dumps(_finite(record), allow_nan=False, **options)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value
