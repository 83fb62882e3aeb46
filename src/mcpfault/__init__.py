"""mcpfault: chaos engineering for AI agents that use the Model Context Protocol."""

__version__ = "0.1.0"
