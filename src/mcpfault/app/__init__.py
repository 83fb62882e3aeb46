"""The application layer: what the integrations (CLI, ``mcpfault.api``, the MCP server, the pytest
plugin, the experiment runner) share to start mcpfault itself.

Its modules import only what they need, and nothing here imports ``mcpfault.cli``: the command line
is one client of this layer, not its home.
"""
