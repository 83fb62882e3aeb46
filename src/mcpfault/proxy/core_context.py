"""The proxy's trace context in a request's ``params._meta``, as the core's observers write it.

Both the lanes and the full path send requests upstream with it, so the server's spans nest under ours.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mcpfault.protocol import jsonrpc
from mcpfault.proxy.core_types import RequestObserver


def with_context_line(
    observers: Sequence[RequestObserver], line: bytes, body: dict[str, Any], tokens: tuple[Any, ...]
) -> bytes:
    """The client's line with the proxy's trace context in ``params._meta``.

    When only ``traceparent`` changes (the usual case) the line is edited as bytes, which costs a
    fraction of encoding the request again and leaves every other byte as the client wrote it.
    """
    written: dict[str, Any] = {}  # what the observers write, merged over the client's _meta below
    changed = False
    for observer, token in zip(observers, tokens, strict=True):
        changed = observer.propagate(token, written) or changed
    if not changed:
        return line
    params = body.get("params")
    traceparent = written.get("traceparent")
    if len(written) == 1 and isinstance(traceparent, str):
        edited = jsonrpc.with_meta_string(line, params, "traceparent", traceparent)
        if edited is not None:
            return edited
    old = params.get("_meta") if isinstance(params, Mapping) else None
    changed_params = dict(params) if isinstance(params, Mapping) else {}
    changed_params["_meta"] = {**old, **written} if isinstance(old, Mapping) else written
    return jsonrpc.encode({**body, "params": changed_params})


def with_context(
    observers: Sequence[RequestObserver], body: Mapping[str, Any], tokens: tuple[Any, ...]
) -> Mapping[str, Any] | None:
    """The request with the proxy's trace context in ``params._meta``; None when no observer wrote any."""
    params = body.get("params")
    params = dict(params) if isinstance(params, Mapping) else {}
    meta = dict(params["_meta"]) if isinstance(params.get("_meta"), Mapping) else {}
    changed = False
    for observer, token in zip(observers, tokens, strict=True):
        changed = observer.propagate(token, meta) or changed
    if not changed:
        return None
    params["_meta"] = meta
    return {**body, "params": params}
