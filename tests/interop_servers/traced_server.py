"""An SDK MCPServer with OpenTelemetry on: the mcp 2.x server opens a SERVER span per request,
parented by the traceparent in params._meta. Spans go to the file named by SPANS_FILE."""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from opentelemetry import trace

from mcpfault.telemetry.tracing import configure_tracing

provider = configure_tracing("traced-sdk-server", spans_file=Path(os.environ["SPANS_FILE"]))
assert provider is not None
trace.set_tracer_provider(provider)
server = MCPServer("traced")


@server.tool()
def echo(text: str) -> str:
    return text


try:
    server.run()
finally:
    provider.shutdown()
