"""Who can reach what mcpfault listens on: the loopback check, and the refusal to listen beyond
loopback without a token.

Every listener (the HTTP proxy's MCP endpoint, /metrics, the control API) asks these two, so they
agree on what loopback is: ``localhost`` in any case, 127.0.0.0/8, ``::1`` and an IPv4-mapped
``::ffff:127.x.y.z``. Any other name may resolve anywhere, so it counts as beyond loopback.

A leaf module (it imports only ``mcpfault.errors``): any layer may use it.
"""

from __future__ import annotations

import ipaddress

from mcpfault.errors import UsageError


class BeyondLoopbackError(UsageError, ValueError):
    """Listening beyond loopback without a token. A ``ValueError`` too, for callers that validate values."""


def is_loopback(host: str) -> bool:
    """True for ``localhost`` (any case, a trailing dot allowed) and loopback addresses, bracketed or not."""
    name = host.strip().strip("[]").rstrip(".").lower()
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name.partition("%")[0])  # a scope (fe80::1%eth0) is no address part
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def require_token_beyond_loopback(what: str, host: str, token: str | None, how: str) -> None:
    """Refuse to serve ``what`` on a ``host`` beyond loopback when no ``token`` is set.

    ``what`` names the listener as the user gave it (``--listen 0.0.0.0:8080``); ``how`` says how to
    give the token (``set MCPFAULT_PROXY_TOKEN and have clients send it in the X-Mcpfault-Token
    header``). An empty token is refused everywhere: it would let anyone in.
    """
    if token is not None and not token:
        raise BeyondLoopbackError(f"{what}: the token is empty; give a non-empty token or none at all")
    if token is None and not is_loopback(host):
        raise BeyondLoopbackError(
            f"{what} is beyond loopback, where anyone on the network could reach it: {how}, or bind 127.0.0.1"
        )
