"""Chaos Toolkit controls of chaostoolkit-mcpfault: ``safeguard``."""
