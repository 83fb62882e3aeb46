"""JSON-RPC 2.0 and MCP message helpers shared by every layer (framing, ids, eras, error codes)."""

from mcpfault.protocol.eras import (
    LEGACY_VERSIONS,
    META_PROTOCOL_VERSION,
    MODERN_VERSIONS,
    Era,
    EraTracker,
)
from mcpfault.protocol.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    PARSE_ERROR,
    UPSTREAM_UNAVAILABLE,
    Message,
    MessageKind,
    encode,
    error_response,
    id_key,
    parse,
)

__all__ = [
    # framing and parsing
    "Message",
    "MessageKind",
    "encode",
    "id_key",
    "parse",
    # errors
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "PARSE_ERROR",
    "UPSTREAM_UNAVAILABLE",
    "error_response",
    # protocol eras
    "LEGACY_VERSIONS",
    "META_PROTOCOL_VERSION",
    "MODERN_VERSIONS",
    "Era",
    "EraTracker",
]
