"""The two protocol eras a proxy must carry, and how a session reveals which one it is in."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
LEGACY_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS = ("2026-07-28",)
HANDSHAKE_METHODS = frozenset({"initialize", "server/discover"})


class Era(enum.Enum):
    UNKNOWN = "unknown"
    LEGACY = "legacy"  # initialize handshake, sessions
    MODERN = "modern"  # server/discover, per-request _meta, stateless


@dataclass(slots=True)
class EraTracker:
    """Learns the era and protocol version from what the client sends and the server answers."""

    era: Era = Era.UNKNOWN
    protocol_version: str | None = None

    def observe_request(self, method: str, params: dict[str, Any]) -> None:
        meta = params.get("_meta")
        if isinstance(meta, dict):
            version = meta.get(META_PROTOCOL_VERSION)
            if isinstance(version, str):
                self.era, self.protocol_version = Era.MODERN, version
                return
        if method == "initialize":
            self.era = Era.LEGACY
            proposed = params.get("protocolVersion")
            if isinstance(proposed, str):
                self.protocol_version = proposed
        elif method == "server/discover":
            self.era = Era.MODERN

    @classmethod
    def from_header(cls, version: str | None) -> EraTracker:
        """What an HTTP request's ``MCP-Protocol-Version`` header tells, when there is no session to remember."""
        if version in LEGACY_VERSIONS:
            return cls(Era.LEGACY, version)
        if version in MODERN_VERSIONS:
            return cls(Era.MODERN, version)
        return cls()

    def observe_handshake_result(self, method: str, result: Any) -> None:
        """The server's answer fixes the negotiated version (it may differ from the proposal)."""
        if not isinstance(result, dict):
            return
        if method == "initialize" and isinstance(result.get("protocolVersion"), str):
            self.era, self.protocol_version = Era.LEGACY, result["protocolVersion"]
        elif method == "server/discover":
            supported = result.get("supportedVersions")
            if self.protocol_version is None and isinstance(supported, list) and supported:
                self.protocol_version = str(supported[0])
