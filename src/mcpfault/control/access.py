"""Who may use the control API: one small function, so one place to change.

Without ``MCPFAULT_CONTROL_TOKEN`` the API listens on loopback only; with it, every request must
send ``Authorization: Bearer <token>`` (compared in constant time). Either way a request whose
``Host`` (or ``Origin``, when a browser sends one) is not the listen address is refused: a web page
cannot reach the API through a DNS name rebound to 127.0.0.1. No CORS headers are ever sent.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from mcpfault.loopback import is_loopback, require_token_beyond_loopback

TOKEN_VARIABLE = "MCPFAULT_CONTROL_TOKEN"
_WILDCARDS = frozenset({"0.0.0.0", "::", ""})


@dataclass(frozen=True, slots=True)
class Access:
    token: bytes | None
    hosts: frozenset[str]  # acceptable Host values (host:port); empty: any (a wildcard bind, token required)

    @classmethod
    def for_address(cls, host: str, port: int, token: str | None) -> Access:
        """Refuses (ValueError) a non-loopback address without a token."""
        require_token_beyond_loopback(
            f"the control API on {host}:{port}",
            host,
            token,
            f"anyone who can reach it could switch faults on; set {TOKEN_VARIABLE} and send it as a bearer token",
        )
        if host in _WILDCARDS:
            return cls(token.encode() if token else None, frozenset())
        names = {f"[{host}]" if ":" in host else host}
        if is_loopback(host):
            names.add("localhost")
        return cls(token.encode() if token else None, frozenset(f"{name}:{port}" for name in names))


def refusal(access: Access, headers: Mapping[str, str]) -> tuple[int, str] | None:
    """(status, why) when the request must be refused; None when it may go on."""
    if access.hosts:
        host = headers.get("Host", "").lower()
        if host not in access.hosts:
            return 403, f"Host {host!r} is not this control API's address ({', '.join(sorted(access.hosts))})"
        origin = headers.get("Origin")
        if origin is not None and origin.lower() not in {f"http://{h}" for h in access.hosts}:
            return 403, f"Origin {origin!r} is not this control API's address; cross-origin requests are refused"
    elif headers.get("Origin") is not None:
        return 403, "cross-origin requests are refused"
    if access.token is not None:
        given = headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, b"Bearer " + access.token):
            return 401, "missing or wrong token: send Authorization: Bearer <MCPFAULT_CONTROL_TOKEN>"
    return None
