"""The bundled mock MCP server: a deterministic network-operations world served over stdio.

`World` is pure and cheap to import (judges rebuild ground truth with it); `serve` loads the stdio
server only when called. Neither needs the MCP SDK.
"""

from __future__ import annotations

import pathlib

from mcpfault.mock.world import World

__all__ = ["World", "serve"]


def serve(
    seed: int = 0,
    state_path: pathlib.Path | None = None,
    *,
    spans_path: pathlib.Path | None = None,
    otlp_endpoint: str | None = None,
    journal_path: pathlib.Path | None = None,
) -> None:
    """Serve `World.generate(seed)` as an MCP server on stdio; see `mcpfault.mock.server.serve`."""
    from mcpfault.mock.server import serve as serve_stdio

    serve_stdio(
        seed=seed, state_path=state_path, spans_path=spans_path, otlp_endpoint=otlp_endpoint, journal_path=journal_path
    )
