"""Cassettes: real MCP sessions recorded on the wire (``mcpfault record``), served back (``mcpfault replay``),
compared (``mcpfault cassette diff``) and shown (``mcpfault cassette show``).

``format`` is the file (JSON lines, a header line first) and its redaction; ``record`` the recording
relay; ``replay`` the server that answers from a cassette; ``matching`` how a request finds its
recorded answer; ``diff`` what changed between two cassettes' listings.
"""
