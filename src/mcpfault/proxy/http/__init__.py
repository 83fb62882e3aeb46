"""The Streamable HTTP side of the proxy: its server, exchanges, sessions and upstream pool, and the
bridge in front of a stdio server; ``serve`` puts them together."""
