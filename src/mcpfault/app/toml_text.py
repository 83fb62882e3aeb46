"""A profile or an experiment given as a mapping, written as the TOML file mcpfault reads (tomli-w).

What was written is checked by reading it back, so a value TOML has no form for (None, an object) is
refused here with its name, never written as something else.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from typing import Any

import tomli_w


def toml_text(document: Mapping[str, Any]) -> str:
    """``document`` as TOML text; ValueError naming what has no TOML form."""
    try:
        text = tomli_w.dumps(dict(document))
    except TypeError as exc:  # tomli-w's word for a value it has no form for
        raise ValueError(f"{exc}; use strings, numbers, booleans, lists and tables") from None
    if not _same(tomllib.loads(text), document):
        raise ValueError("the document cannot be written as TOML exactly")
    return text


def _same(read: Any, given: Any) -> bool:
    """Whether the text read back is what was given (a tuple reads back as a list; nan as nan, which
    TOML spells and the profile's own check then refuses by name)."""
    if isinstance(given, Mapping):
        return isinstance(read, dict) and read.keys() == given.keys() and all(_same(read[k], given[k]) for k in given)
    if isinstance(given, list | tuple):
        return isinstance(read, list) and len(read) == len(given) and all(map(_same, read, given))
    if isinstance(given, float) and math.isnan(given):
        return isinstance(read, float) and math.isnan(read)
    return bool(read == given) and type(read) is type(given)
