"""The control API: JSON over HTTP, one route table and thin handlers over the ``Controller``.

Served by the proxy's own HTTP/1.1 server (proxy/http/server.py) on its own address
(``--control 127.0.0.1:PORT``), in the proxy's event loop. Every answer is JSON; an error is
``{"error": "...", "problems": [...]}`` with 400 (bad body), 401/403 (access), 404, 405 or 409.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote

import structlog

from mcpfault.control.access import Access, refusal
from mcpfault.control.controller import Conflict, ControlError, Controller, Invalid, NoServerControl, NotFound
from mcpfault.errors import Problem
from mcpfault.proxy.http import server as web

log = structlog.get_logger("mcpfault.control")

MAX_BODY_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ApiCall:
    """One API request, as a handler sees it."""

    params: dict[str, str]  # from the path
    query: dict[str, str]
    body: Any  # the JSON body, or None


Handler = Callable[[Controller, ApiCall], Awaitable[tuple[int, Any]]]


async def _list(c: Controller, _call: ApiCall) -> tuple[int, Any]:
    return 200, {"faults_enabled": c.rules.enabled, "version": c.rules.version, "faults": c.faults()}


async def _add(c: Controller, call: ApiCall) -> tuple[int, Any]:
    return 201, c.add(call.body)


async def _get(c: Controller, call: ApiCall) -> tuple[int, Any]:
    return 200, c.fault(call.params["name"])


async def _remove(c: Controller, call: ApiCall) -> tuple[int, Any]:
    c.remove(call.params["name"])
    return 200, {"removed": call.params["name"]}


async def _patch(c: Controller, call: ApiCall) -> tuple[int, Any]:
    return 200, c.patch(call.params["name"], call.body)


async def _off(c: Controller, _call: ApiCall) -> tuple[int, Any]:
    c.off()
    return 200, {"faults_enabled": False}


async def _on(c: Controller, _call: ApiCall) -> tuple[int, Any]:
    c.on()
    return 200, {"faults_enabled": True}


async def _reset(c: Controller, _call: ApiCall) -> tuple[int, Any]:
    c.reset()
    return 200, {"reset": True, "rules": len(c.rules.rules)}


async def _status(c: Controller, _call: ApiCall) -> tuple[int, Any]:
    return 200, c.status()


async def _crash(c: Controller, call: ApiCall) -> tuple[int, Any]:
    try:
        return 200, await c.crash(call.query.get("signal", "SIGKILL"))
    except ValueError as exc:
        raise Invalid([Problem("POST /server/crash", None, "signal", str(exc))]) from None


async def _stall(c: Controller, call: ApiCall) -> tuple[int, Any]:
    raw = call.query.get("duration_s")
    try:
        duration_s = float(raw) if raw is not None else None
    except ValueError:
        duration_s = None
    if duration_s is None:
        problem = Problem("POST /server/stall", None, "duration_s", f"got {raw!r}; give ?duration_s=SECONDS, e.g. 5")
        raise Invalid([problem])
    return 202, await c.stall(duration_s)


async def _restart(c: Controller, _call: ApiCall) -> tuple[int, Any]:
    return 200, await c.restart()


# The API, in one table: (method, path, handler); {name} matches one path segment.
ROUTES: tuple[tuple[str, str, Handler], ...] = (
    ("GET", "/faults", _list),
    ("POST", "/faults", _add),
    ("GET", "/faults/{name}", _get),
    ("DELETE", "/faults/{name}", _remove),
    ("PATCH", "/faults/{name}", _patch),
    ("POST", "/off", _off),
    ("POST", "/on", _on),
    ("POST", "/reset", _reset),
    ("GET", "/status", _status),
    ("POST", "/server/crash", _crash),
    ("POST", "/server/stall", _stall),
    ("POST", "/server/restart", _restart),
)
_COMPILED = [
    (method, re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", path) + "$"), handler)
    for method, path, handler in ROUTES
]
_STATUS_OF: tuple[tuple[type[ControlError], int], ...] = (
    (NotFound, 404),
    (Conflict, 409),
    (Invalid, 400),
    (NoServerControl, 409),
)


def _json(status: int, body: Any) -> web.Response:
    data = json.dumps(body, default=_plain, ensure_ascii=False).encode() + b"\n"
    headers = {"Cache-Control": "no-store"}
    return web.Response(status=status, body=data, content_type="application/json", headers=headers)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | frozenset | set):
        return list(value)
    return str(value)


def _error(status: int, message: str, problems: list[Problem] | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if problems:
        body["problems"] = [
            {"where": p.where(), "field": p.field, "message": p.message, "text": str(p)} for p in problems
        ]
    return _json(status, body)


class ControlApi:
    """The HTTP side: access checks, routing, JSON in and out."""

    def __init__(self, controller: Controller, access: Access) -> None:
        self.controller = controller
        self._access = access

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        refused = refusal(self._access, request.headers)
        if refused is not None:
            status, why = refused
            response = _error(status, why)
            if status == 401:
                response.headers["WWW-Authenticate"] = 'Bearer realm="mcpfault-control"'
            return response
        path = unquote(request.path.rstrip("/") or "/")
        allowed: list[str] = []
        for method, pattern, handler in _COMPILED:
            match = pattern.match(request.path.rstrip("/") or "/")
            if match is None:
                continue
            if method != request.method:
                allowed.append(method)
                continue
            return await self._run(handler, request, {k: unquote(v) for k, v in match.groupdict().items()})
        if allowed:
            response = _error(405, f"{request.method} is not allowed on {path}; use {', '.join(allowed)}")
            response.headers["Allow"] = ", ".join(allowed)
            return response
        routes = ", ".join(f"{m} {p}" for m, p, _ in ROUTES)
        return _error(404, f"no route {request.method} {path}; the routes are: {routes}")

    async def _run(self, handler: Handler, request: web.Request, params: dict[str, str]) -> web.Response:
        try:
            raw = await request.read()
        except web.BodyTooLarge:
            return _error(413, f"the body is larger than {MAX_BODY_BYTES} bytes")
        body: Any = None
        if raw.strip():
            try:
                body = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                return _error(400, f"the body is not JSON: {exc}")
        query = {k: v[-1] for k, v in parse_qs(request.raw_path.partition("?")[2], keep_blank_values=True).items()}
        try:
            status, answer = await handler(self.controller, ApiCall(params, query, body))
        except Invalid as exc:
            count = len(exc.problems)
            return _error(400, f"{count} problem{'s' if count != 1 else ''}", exc.problems)
        except ControlError as exc:
            code = next(status for kind, status in _STATUS_OF if isinstance(exc, kind))
            return _error(code, str(exc))
        except Exception as exc:  # a bug of ours: the caller still gets JSON, and the proxy goes on
            log.exception("the control API failed on a request", path=request.path)
            return _error(500, f"the control API failed ({type(exc).__name__}: {exc}); please report it")
        return _json(status, answer)


class ControlServer:
    """The API listening on its own address. ``async with`` starts and stops it."""

    def __init__(self, controller: Controller, host: str, port: int, token: str | None) -> None:
        self.controller = controller
        self._host, self._port, self._token = host, port, token
        Access.for_address(host, port, token)  # refuses a wide address without a token before anything starts
        self._api: ControlApi | None = None
        self._server: web.HttpServer | None = None
        self.url = ""

    async def start(self) -> str:
        """Listen; the API's base URL (with the real port when the port asked for was 0)."""
        self._server = web.HttpServer(self._handle, max_body_bytes=MAX_BODY_BYTES, keepalive_s=30.0)
        port = await self._server.listen(self._host, self._port)
        self._api = ControlApi(self.controller, Access.for_address(self._host, port, self._token))
        host = f"[{self._host}]" if ":" in self._host else self._host
        self.url = f"http://{host}:{port}"
        return self.url

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        assert self._api is not None
        return await self._api(request)

    async def close(self) -> None:
        await self.controller.aclose()
        if self._server is not None:
            await self._server.close()
            self._server = None

    async def __aenter__(self) -> ControlServer:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()
