"""``mcpfault mcp-server``: mcpfault as an MCP server (the SDK's MCPServer; both eras; stdio or HTTP).

The safety model, in the order a call meets it:
- Confined files: every path is taken inside the work directory (MCPFAULT_WORKDIR, default the
  working directory) and must stay there once resolved: ``../x``, an absolute path outside it and
  a symlink that leads out are refused, each with its own message.
- Validated input: profiles and experiments are validated as ``mcpfault validate`` does; names that
  reach a command line match a strict pattern and a known set; a command is an argv list, run without
  a shell; a control URL must be loopback HTTP.
- Dry run by default: ``run_experiment``, ``set_faults``, ``audit_server`` and overwriting a file do
  nothing unless called with ``dry_run=false`` and ``confirm_destructive=true``; the answer says what
  would happen, or what happened and how to undo it. ``audit_server`` calls a tool annotated destructive
  only with ``call_destructive_tools=true`` as well.
- Bounds: texts, reports, runs' tasks and times have upper limits, named in each refusal.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from mcpfault.errors import UsageError
from mcpfault.loopback import is_loopback
from mcpfault.mcp_server.safety import WORKDIR_VARIABLE, workdir
from mcpfault.mcp_server.tools import PROMPTS, TOOLS

__all__ = ["PROMPTS", "TOOLS", "WORKDIR_VARIABLE", "build", "serve_http", "workdir"]


def build() -> MCPServer:
    server = MCPServer(
        "mcpfault",
        log_level="WARNING",
        instructions="Chaos engineering for MCP: write fault profiles and experiments, run them against the "
        "bundled mock, read reports, change a live proxy's faults. Files stay in the work directory; "
        "anything destructive is a dry run unless dry_run=false and confirm_destructive=true.",
    )
    for tool, hints in TOOLS:
        server.tool(annotations=hints, structured_output=True)(tool)
    for prompt, title in PROMPTS:
        server.prompt(title=title)(prompt)
    return server


async def serve_http(server: MCPServer, host: str, port: int, announce: Any) -> None:
    """Streamable HTTP on ``host:port`` (0: the OS picks); ``announce(url)`` once listening."""
    import socket

    import uvicorn

    if not is_loopback(host):
        raise UsageError(f"--listen {host}: mcp-server serves loopback only (it writes files and runs experiments)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(server.streamable_http_app(host=host), log_level="warning", lifespan="on")
    announce(f"http://{shown}:{bound}/mcp")
    await uvicorn.Server(config).serve(sockets=[sock])
