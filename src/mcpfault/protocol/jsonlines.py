"""JSON lines, as every file of ours is written: one JSON value per line, split at LF only.

Not ``str.splitlines``: it also splits at U+2028, U+2029 and other separators, which JSON carries
raw inside strings (orjson writes them unescaped), and would cut a record in two.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_jsonl(path: Path) -> list[Any]:
    """Every complete record of ``path`` ([] when it does not exist); a line that does not parse (a
    writer killed mid-line leaves at most one) is skipped."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    rows = []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows
