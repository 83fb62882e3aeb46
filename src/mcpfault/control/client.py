"""The one client of the control API (``mcpfault ctl``, ``mcpfault.api``, the Chaos Toolkit extension and
experiments use it): JSON in, JSON out, the standard library's HTTP only.

Errors are values the caller can branch on: ``BadUrl`` (a ValueError) when the URL is none;
``ApiError`` carries the HTTP status and the API's own
message (and problems); ``Unreachable`` means nothing answered at the URL.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from mcpfault.errors import MCPFaultError
from mcpfault.loopback import UrlError, check_http_url

DEFAULT_URL = "http://127.0.0.1:8474"  # Toxiproxy's API port; start the proxy with --control 127.0.0.1:8474
URL_VARIABLE = "MCPFAULT_CONTROL_URL"


class BadUrl(MCPFaultError, ValueError):
    """The control URL is not one: no http(s) scheme and host, or a bad port. Says what to give instead."""


def control_url(given: str) -> str:
    """``given`` as a control API base URL: ``http://HOST:PORT`` as the proxy prints it, or the
    ``HOST:PORT`` that ``proxy --control`` takes (``http://`` is then added). BadUrl otherwise."""
    url = given.strip()
    if "://" not in url and re.fullmatch(r"\[?[A-Za-z0-9_.:-]+\]?:\d+", url):
        url = f"http://{url}"
    try:
        check_http_url(url, "control URL", DEFAULT_URL)
    except UrlError:
        raise BadUrl(
            f"control URL {given!r} is not an http URL; give the URL the proxy printed "
            f"('mcpfault: control API on URL'), e.g. {DEFAULT_URL}, or HOST:PORT as given to proxy --control"
        ) from None
    return url.rstrip("/")


class Unreachable(MCPFaultError):
    """Nothing answered at the control URL (no proxy there, or not with --control)."""


@dataclass
class ApiError(MCPFaultError):
    """The control API refused: its HTTP status, its message and the problems it named (a bad rule)."""

    status: int
    message: str
    problems: list[dict[str, Any]] = field(default_factory=list)

    def __str__(self) -> str:
        return f"HTTP {self.status}: {self.message}"

    def detail(self) -> str:
        """The refusal with every problem the API named, on one line."""
        problems = "; ".join(str(problem.get("text", problem)) for problem in self.problems)
        return f"{self}" + (f" ({problems})" if problems else "")


class Control:
    """A live proxy's control API at ``url`` (as the proxy printed it: ``mcpfault: control API on URL``).

    One method per route; each returns the API's JSON answer. The token, when the proxy has one
    (MCPFAULT_CONTROL_TOKEN), goes in ``Authorization: Bearer``; it is never part of an answer or a repr.
    """

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 10.0) -> None:
        self.url = control_url(url)
        self._token = token
        self._timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"Control({self.url!r})"

    def request(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self._token:
            request.add_header("Authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                answer = json.loads(exc.read())
            except ValueError:
                answer = {}
            message = answer.get("error", exc.reason) if isinstance(answer, dict) else str(exc.reason)
            problems = answer.get("problems", []) if isinstance(answer, dict) else []
            raise ApiError(exc.code, str(message), problems) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Unreachable(f"cannot reach the control API at {self.url}: {reason}") from None

    # One method per route.
    def status(self) -> dict[str, Any]:
        answer: dict[str, Any] = self.request("GET", "/status")
        return answer

    def faults(self) -> dict[str, Any]:
        answer: dict[str, Any] = self.request("GET", "/faults")
        return answer

    def add(self, rule: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = self.request("POST", "/faults", rule)
        return answer

    def patch(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = self.request("PATCH", f"/faults/{quote(name, safe='')}", changes)
        return answer

    def remove(self, name: str) -> Any:
        return self.request("DELETE", f"/faults/{quote(name, safe='')}")

    def off(self) -> Any:
        return self.request("POST", "/off")

    def on(self) -> Any:
        return self.request("POST", "/on")

    def reset(self) -> Any:
        return self.request("POST", "/reset")

    def crash(self, signal_name: str = "SIGKILL") -> Any:
        return self.request("POST", f"/server/crash?signal={quote(signal_name)}")

    def stall(self, duration_s: float) -> Any:
        return self.request("POST", f"/server/stall?duration_s={duration_s:g}")

    def restart(self) -> Any:
        return self.request("POST", "/server/restart")


ControlClient = Control  # its name before mcpfault.api: the same class, for code written against it
