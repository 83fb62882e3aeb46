"""The one way every activity reaches the proxy: ``mcpfault.api.Control`` from configuration and secrets."""

import os
from collections.abc import Callable
from typing import Any, TypeVar

from chaoslib.exceptions import ActivityFailed
from chaoslib.types import Configuration, Secrets

from mcpfault.api import ApiError, Control, Unreachable

URL_KEY = "mcpfault_control_url"
MCP_URL_KEY = "mcpfault_mcp_url"
TOKEN_KEY = "mcpfault_control_token"
URL_VARIABLE = "MCPFAULT_CONTROL_URL"

T = TypeVar("T")


def control(configuration: Configuration | None, secrets: Secrets | None) -> Control:
    """The proxy's control API: ``mcpfault_control_url`` in the configuration (else $MCPFAULT_CONTROL_URL)."""
    url = (configuration or {}).get(URL_KEY) or os.environ.get(URL_VARIABLE)
    if not url:
        raise ActivityFailed(
            f"no control URL: set configuration key {URL_KEY!r} to the URL the proxy printed "
            "('mcpfault: control API on URL'; start it with --control 127.0.0.1:PORT)"
        )
    token = token_of(secrets)
    return Control(str(url), token=token)


def token_of(secrets: Secrets | None) -> str | None:
    """The token, from an activity's secrets (flat) or a control's (by scope: ``mcpfault``)."""
    if not secrets:
        return None
    value = secrets.get(TOKEN_KEY)
    if value is None and isinstance(secrets.get("mcpfault"), dict):
        value = secrets["mcpfault"].get(TOKEN_KEY)
    return str(value) if value else None


def calling(what: str, call: Callable[[], T]) -> T:
    """``call()``, with the API's refusals as ActivityFailed that say what was refused and why."""
    try:
        return call()
    except Unreachable as exc:
        raise ActivityFailed(f"{what}: {exc}; is the proxy running with --control?") from None
    except ApiError as exc:
        raise ActivityFailed(f"{what}: the proxy refused: {exc.detail()}") from None


def answer(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {"answer": value}
