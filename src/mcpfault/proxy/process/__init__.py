"""The server process the proxy starts and supervises: the child, its restarts and its signals."""
