"""Addresses: the one ``HOST:PORT`` parser, the one http(s) URL check (credentials kept out of its
messages), the loopback check, and the refusal to listen beyond loopback without a token.

Every listener (the HTTP proxy's MCP endpoint, /metrics, the control API) asks these two, so they
agree on what loopback is: ``localhost`` in any case, 127.0.0.0/8, ``::1`` and an IPv4-mapped
``::ffff:127.x.y.z``. Any other name may resolve anywhere, so it counts as beyond loopback.

A leaf module (it imports only ``mcpfault.errors``): any layer may use it.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import SplitResult, urlsplit

from mcpfault.errors import UsageError

_USERINFO = re.compile(r"//[^/@]*@")  # credentials in a URL


def hide_credentials(text: str) -> str:
    """``text`` with the credentials of any URL in it (``//user:pass@``) replaced by ``//***@``."""
    return _USERINFO.sub("//***@", text)


class UrlError(UsageError, ValueError):
    """A value that is no http(s) URL with a host. A ``ValueError`` too, for callers that validate values."""


def check_http_url(value: str, what: str, give: str) -> SplitResult:
    """``value`` split, when it is an http(s) URL with a host and a valid port; else ``UrlError`` naming
    ``what`` and saying what to ``give`` (never the URL's credentials)."""
    try:
        parts = urlsplit(value.strip())
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0-65535
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # an unclosed IPv6 bracket, a bad port
        valid = False
    if not valid:
        raise UrlError(f"{what} {hide_credentials(value)!r} is not an http(s) URL with a host; give {give}")
    return parts


class AddressError(UsageError, ValueError):
    """A ``HOST:PORT`` value that is none. A ``ValueError`` too, for callers that validate values."""


def parse_host_port(value: str, flag: str, example: str = "127.0.0.1:8080") -> tuple[str, int]:
    """(host, port) from ``HOST:PORT``, ``[v6]:PORT`` for IPv6, or ``:PORT`` or a bare ``PORT`` for
    127.0.0.1: the rule of every ``--listen``, ``--control`` and ``--metrics-addr``. Port 0 lets the
    OS pick. An error names ``flag`` and shows ``example``."""
    text = value.strip()
    hint = f"expected HOST:PORT, e.g. {example} (PORT or :PORT alone for loopback, [::1]:PORT for IPv6)"
    if "://" in text:
        raise AddressError(f"{flag} {value!r} is a URL; {hint}, without a scheme or path")
    host, sep, port_text = text.rpartition(":")
    if not sep and text.isdigit():
        host, port_text = "", text
    elif not sep or not port_text:
        raise AddressError(f"{flag} {value!r} has no port; {hint}")
    if host.startswith("["):
        if not host.endswith("]"):
            raise AddressError(f"{flag} {value!r} has an unclosed '[' around its IPv6 host; {hint}")
        host = host[1:-1]
    elif ":" in host:
        raise AddressError(f"{flag} {value!r}: an IPv6 host needs brackets; {hint}")
    if not port_text.isdigit():
        raise AddressError(f"{flag} {value!r}: port {port_text!r} is not a number; {hint}")
    port = int(port_text)
    if port > 65535:
        raise AddressError(f"{flag} {value!r}: port {port} is above 65535; {hint}")
    if any(c.isspace() or c in "/?#@" for c in host):
        raise AddressError(f"{flag} {value!r}: {host!r} is not a host name or address; {hint}")
    return host or "127.0.0.1", port


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
