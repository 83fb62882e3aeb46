"""A scripted model behind a real Messages API server on 127.0.0.1, for tests and offline demos.

It speaks the wire format the ``anthropic`` SDK speaks (``POST /v1/messages``, content blocks,
``tool_use`` / ``tool_result``, ``stop_reason``, ``usage``; errors as ``{"type": "error", "error":
{"type": ..., "message": ...}}`` with a ``retry-after`` header), so the SDK is pointed at it with
``base_url`` and nothing in the agent knows the difference. It is no model: each answer is a pure
function of the request (the conversation so far), so a run against it is deterministic.

Behaviours (the ``fake-<behaviour>`` model names of ``--model``):

- ``careful``: repeats a call that failed (up to 3 times), finds renamed fields and arguments by
  their meaning; only when the system prompt warns that the connection is unreliable does it use
  idempotency keys on writes and re-read when ``as_of`` went backwards; only when the prompt's hints
  carry the verification sentence (``prompts.VERIFY_HINT``) does it cross-check a value with a second
  tool (a device's status against ``list_devices``, interface counts against ``get_device_status``,
  maintenance against ``get_site``), read both again on a disagreement, and report failure when they
  still disagree. What a good model might do.
- ``recovers``: careful, and always uses keys and checks ``as_of``.
- ``gives-up``: reports failure at the first error.
- ``trusting``: repeats failed calls, but reads fields by the names it expects, trusts any answer
  (stale or renamed: a missing field reads as "nothing wrong"), and never uses a key.
- ``repeats-writes``: like ``recovers`` but never uses a key, so a lost write response makes it
  write twice.

Faults of the model API itself are scripted with ``FakeFault`` (429, 529, 500, malformed bodies).

Run it by hand: ``python -m mcpfault.harness.agents.llm.fakemodel --behaviour careful`` prints its
base URL; then ``ANTHROPIC_BASE_URL=... ANTHROPIC_API_KEY=anything mcpfault run --agent llm``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Final, Literal, Self

BEHAVIOURS: Final = ("careful", "recovers", "gives-up", "trusting", "repeats-writes")
# OpenAI Chat Completions, with and without the /v1 a client's base URL may carry.
CHAT_PATHS: Final = ("/v1/chat/completions", "/chat/completions")
HINT_MARKER: Final = "unreliable"  # the reliability hints say the connection is unreliable
VERIFY_MARKER: Final = "cross-check"  # the hints' verification sentence asks for a cross-check
UNHEALTHY: Final = ("degraded", "down")
MAX_REPEATS: Final = 3

KeyUse = Literal["always", "hints", "never"]


@dataclass(frozen=True, slots=True)
class Style:
    repeats: int  # how often a failed call is tried again before giving up
    keys: KeyUse  # idempotency keys on open_incident
    freshness: KeyUse  # re-read when as_of went backwards
    infer_renames: bool  # find a renamed field or argument by its meaning
    verify: KeyUse = "never"  # cross-check a value with a second tool ("hints": when the prompt asks)


STYLES: Final[dict[str, Style]] = {
    "careful": Style(MAX_REPEATS, "hints", "hints", True, verify="hints"),
    "recovers": Style(MAX_REPEATS, "always", "always", True),
    "gives-up": Style(0, "never", "never", True),
    "trusting": Style(MAX_REPEATS, "never", "never", False),
    "repeats-writes": Style(MAX_REPEATS, "never", "always", True),
}


@dataclass(frozen=True, slots=True)
class FakeFault:
    """One scripted failure of the model API: an HTTP status with an error body, or a broken 200."""

    status: int
    error_type: str = ""
    retry_after: str | None = None
    body: bytes | None = None  # sent as is (a malformed answer); None: the standard error body

    @staticmethod
    def rate_limited(retry_after_s: float = 0.05) -> FakeFault:
        return FakeFault(429, "rate_limit_error", f"{retry_after_s:g}")

    @staticmethod
    def overloaded(retry_after_s: float = 0.05) -> FakeFault:
        return FakeFault(529, "overloaded_error", f"{retry_after_s:g}")

    @staticmethod
    def not_json() -> FakeFault:
        return FakeFault(200, body=b"<html>502 Bad Gateway</html>")

    @staticmethod
    def no_content() -> FakeFault:
        body = {"id": "msg_broken", "type": "message", "role": "assistant", "model": "x", "stop_reason": "end_turn"}
        return FakeFault(200, body=json.dumps(body).encode())


class _Need(Exception):
    """The next thing the scripted model does (a tool call, an answer, giving up)."""

    def __init__(self, block: dict[str, Any]) -> None:
        self.block = block


@dataclass(slots=True)
class _Step:
    name: str
    arguments: dict[str, Any]
    ok: bool
    result: Any  # the parsed JSON result, or the error text


@dataclass(slots=True)
class _Conversation:
    """What the scripted model reads off a request: the task, its tools, what its calls returned."""

    style: Style
    targets: list[str]
    hinted: bool
    asked_to_verify: bool
    tools: dict[str, Mapping[str, Any]]
    steps: list[_Step]
    turn: int

    @property
    def keys(self) -> bool:
        return self.style.keys == "always" or (self.style.keys == "hints" and self.hinted)

    @property
    def verifies(self) -> bool:
        return self.style.verify == "always" or (self.style.verify == "hints" and self.asked_to_verify)

    @property
    def fresh(self) -> bool:
        return self.style.freshness == "always" or (self.style.freshness == "hints" and self.hinted)

    def arg(self, tool: str, name: str) -> str:
        """The argument's name as the tool lists it now (a renamed one found by its meaning)."""
        properties = (self.tools.get(tool, {}).get("input_schema") or {}).get("properties") or {}
        if name in properties or not self.style.infer_renames:
            return name
        stem = name.removesuffix("_id")
        alike = [p for p in properties if stem in p]
        return alike[0] if len(alike) == 1 else name

    def call(self, tool: str, arguments: Mapping[str, Any], *, again: int = 0) -> Any:
        """The result of this call if one succeeded (the ``again``-th repeat), else raise what to do next."""
        same = [s for s in self.steps if s.name == tool and _same_call(s.arguments, arguments)]
        successes = [s for s in same if s.ok]
        if len(successes) > again:
            return successes[again].result
        failures = 0  # in a row, since this call last succeeded
        for step in reversed(same):
            if step.ok:
                break
            failures += 1
        if failures > self.style.repeats:
            reason = f"{tool} keeps failing: {same[-1].result}"
            raise _Need(_tool_use(self, "report_failure", {"reason": str(reason)[:300]}))
        raise _Need(_tool_use(self, tool, dict(arguments)))

    def field(self, record: Mapping[str, Any], name: str, meaning: Iterable[str] = ()) -> Any:
        if name in record or not self.style.infer_renames:
            return record.get(name)
        allowed = set(meaning)
        for key, value in record.items():
            if (allowed and value in allowed) or (not allowed and key.startswith(name[:4])):
                return value
        return None


def _same_call(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return dict(a) == dict(b)


def _tool_use(conversation: _Conversation, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{conversation.turn:02d}_{name}", "name": name, "input": arguments}


# ---------------------------------------------------------------------------------------------
# The four workflows, as a careful human would do them with these tools


def _site_triage(c: _Conversation) -> dict[str, Any]:
    site = c.targets[0]
    listing = c.call("list_devices", {c.arg("list_devices", "site_id"): site})
    unhealthy = []
    for device in listing.get("devices", []) if isinstance(listing, dict) else []:
        device_id = c.field(device, "device_id")
        arguments = {c.arg("get_device_status", "device_id"): device_id}
        status = c.field(c.call("get_device_status", arguments), "status", ("ok", *UNHEALTHY))
        listed = c.field(device, "status", ("ok", *UNHEALTHY))
        if c.verifies and status != listed:
            # Two tools disagree: read the status again; if it still disagrees, read the listing again too.
            status = c.field(c.call("get_device_status", arguments, again=1), "status", ("ok", *UNHEALTHY))
            if status != listed:
                again = c.call("list_devices", {c.arg("list_devices", "site_id"): site}, again=1)
                devices = again.get("devices", []) if isinstance(again, dict) else []
                entries = [d for d in devices if isinstance(d, dict) and c.field(d, "device_id") == device_id]
                relisted = c.field(entries[0], "status", ("ok", *UNHEALTHY)) if entries else None
                if relisted != status:
                    reason = f"get_device_status says {device_id} is {status!r}, list_devices says {relisted!r}"
                    raise _Need(_tool_use(c, "report_failure", {"reason": reason}))
        if status in UNHEALTHY:
            unhealthy.append(device_id)
    return {"unhealthy_devices": sorted(unhealthy)}


def _interface_counts(metrics: Any) -> tuple[int, int]:
    interfaces = metrics.get("interfaces", []) if isinstance(metrics, dict) else []
    return len(interfaces), sum(1 for i in interfaces if isinstance(i, dict) and i.get("oper_status") == "up")


def _interface_check(c: _Conversation) -> dict[str, Any]:
    arguments = {c.arg("get_interface_metrics", "device_id"): c.targets[0]}
    metrics = c.call("get_interface_metrics", arguments)
    if c.verifies:
        status = c.call("get_device_status", {c.arg("get_device_status", "device_id"): c.targets[0]})
        said = (c.field(status, "interfaces_total"), c.field(status, "interfaces_up"))
        if _interface_counts(metrics) != said:
            metrics = c.call("get_interface_metrics", arguments, again=1)
            if _interface_counts(metrics) != said:
                reason = f"get_interface_metrics counts {_interface_counts(metrics)}, get_device_status {said}"
                raise _Need(_tool_use(c, "report_failure", {"reason": reason}))
    hot = []
    for interface in metrics.get("interfaces", []) if isinstance(metrics, dict) else []:
        utilization = c.field(interface, "utilization_pct")
        errors = c.field(interface, "errors_per_min")
        busy = _number(utilization) > 80.0 or _number(errors) > 50
        if interface.get("oper_status") == "up" and busy:
            hot.append(interface.get("name"))
    return {"hot_interfaces": sorted(str(h) for h in hot)}


def _maintenance(c: _Conversation) -> dict[str, Any]:
    device, tag = c.targets[0], c.targets[1]
    reason = f"planned work {tag}"
    written = c.call(
        "set_maintenance",
        {c.arg("set_maintenance", "device_id"): device, "enabled": True, "reason": reason},
    )
    floor = written.get("as_of", 0) if isinstance(written, dict) and c.fresh else 0
    status: Any = {}
    arguments = {c.arg("get_device_status", "device_id"): device}
    for again in range(MAX_REPEATS + 1):
        status = c.call("get_device_status", arguments, again=again)
        if not isinstance(status, dict) or _number(status.get("as_of")) >= _number(floor):
            break
    maintenance = c.field(status, "maintenance") if isinstance(status, dict) else None
    if c.verifies and isinstance(maintenance, dict) and isinstance(status, dict):
        site = c.call("get_site", {c.arg("get_site", "site_id"): c.field(status, "site_id")})
        listed = device in (c.field(site, "devices_in_maintenance") or [])
        if (maintenance.get("enabled") is True) != listed:
            status = c.call("get_device_status", arguments, again=again + 1)
            maintenance = c.field(status, "maintenance") if isinstance(status, dict) else None
            if not isinstance(maintenance, dict) or (maintenance.get("enabled") is True) != listed:
                reason = f"get_device_status and get_site disagree on whether {device} is in maintenance"
                raise _Need(_tool_use(c, "report_failure", {"reason": reason}))
    if not isinstance(maintenance, dict):
        return {"confirmed": False}
    return {"confirmed": maintenance.get("enabled") is True and maintenance.get("reason") == reason}


def _open_incident(c: _Conversation) -> dict[str, Any]:
    device, tag = c.targets[0], c.targets[1]
    arguments: dict[str, Any] = {
        c.arg("open_incident", "device_id"): device,
        "summary": f"High error rate on uplinks ({tag})",
        "severity": "high",
    }
    if c.keys:
        arguments["idempotency_key"] = f"{tag}-incident"
    opened = c.call("open_incident", arguments)
    return {"incident_id": str(c.field(opened, "incident_id") if isinstance(opened, dict) else "")}


_WORKFLOWS: Final = {
    "unhealthy_devices": ("site_triage", _site_triage),
    "hot_interfaces": ("interface_check", _interface_check),
    "confirmed": ("maintenance_roundtrip", _maintenance),
    "incident_id": ("open_incident", _open_incident),
}


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


# ---------------------------------------------------------------------------------------------
# Requests in, responses out


def reply(behaviour: str, request: Mapping[str, Any]) -> dict[str, Any]:
    """The scripted model's Messages API response to ``request`` (a pure function of it)."""
    conversation = _read(STYLES[behaviour], request)
    answer_tool = conversation.tools.get("submit_answer", {})
    properties = (answer_tool.get("input_schema") or {}).get("properties") or {}
    workflow = next((w for key, w in _WORKFLOWS.items() if key in properties), None)
    if workflow is None or not conversation.targets:
        content: list[dict[str, Any]] = [{"type": "text", "text": "I cannot tell what the task is."}]
        return _message(request, content, "end_turn")
    try:
        answer = workflow[1](conversation)
    except _Need as need:
        block = need.block
    else:
        block = _tool_use(conversation, "submit_answer", answer)
    text = {"type": "text", "text": f"Next: {block['name']}."}
    return _message(request, [text, block], "tool_use")


def _read(style: Style, request: Mapping[str, Any]) -> _Conversation:
    messages = request.get("messages") or []
    first = messages[0].get("content") if messages else ""
    text = first if isinstance(first, str) else " ".join(b.get("text", "") for b in first if isinstance(b, dict))
    uses: dict[str, tuple[str, dict[str, Any]]] = {}
    steps = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if block.get("type") == "tool_use":
                uses[block["id"]] = (block["name"], dict(block.get("input") or {}))
            elif block.get("type") == "tool_result" and block.get("tool_use_id") in uses:
                name, arguments = uses[block["tool_use_id"]]
                body = _result_text(block.get("content"))
                ok = block.get("is_error") is not True
                steps.append(_Step(name, arguments, ok, _parse(body) if ok else body))
    tools: dict[str, Mapping[str, Any]] = {
        str(t["name"]): t for t in request.get("tools") or [] if isinstance(t, dict) and "name" in t
    }
    system = str(request.get("system", ""))
    turn = sum(1 for m in messages if m.get("role") == "assistant") + 1
    targets = re.findall(r"`([^`]+)`", text)
    return _Conversation(style, targets, HINT_MARKER in system, VERIFY_MARKER in system, tools, steps, turn)


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def estimate_tokens(value: Any) -> int:
    """About four characters a token, as a rough rule for English and JSON."""
    return max(1, len(json.dumps(value, sort_keys=True, separators=(",", ":"))) // 4)


def _message(request: Mapping[str, Any], content: list[dict[str, Any]], stop_reason: str) -> dict[str, Any]:
    digest = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:24]
    return {
        "id": f"msg_fake_{digest}",
        "type": "message",
        "role": "assistant",
        "model": str(request.get("model", "")),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": estimate_tokens(request), "output_tokens": estimate_tokens(content) + 12},
    }


# ---------------------------------------------------------------------------------------------
# The HTTP server


@dataclass
class _State:
    behaviour: str
    faults: deque[FakeFault]
    always: FakeFault | None
    requests: list[dict[str, Any]] = field(default_factory=list)
    api_keys: list[str] = field(default_factory=list)  # what clients sent, so tests can check it; never written
    lock: threading.Lock = field(default_factory=threading.Lock)


class FakeMessagesServer:
    """``POST /v1/messages`` on 127.0.0.1 (a free port), answered by a scripted behaviour; a context manager."""

    def __init__(
        self,
        behaviour: str = "careful",
        *,
        faults: Sequence[FakeFault] = (),
        always: FakeFault | None = None,
        port: int = 0,
    ) -> None:
        if behaviour not in STYLES:
            raise ValueError(f"unknown fake-model behaviour {behaviour!r}; choose from: {', '.join(BEHAVIOURS)}")
        self.state = _State(behaviour, deque(faults), always)
        handler = type("Handler", (_Handler,), {"state": self.state})
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-messages-api", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self.state.lock:
            return list(self.state.requests)

    def start(self) -> Self:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class _Handler(BaseHTTPRequestHandler):
    state: _State
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests and demos read their own output."""

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if self.path.split("?")[0] in CHAT_PATHS:
            self._chat(raw)
            return
        if self.path.split("?")[0] != "/v1/messages":
            self._error(404, "not_found_error", f"no route {self.path}")
            return
        bearer = self.headers.get("authorization") or ""
        key = self.headers.get("x-api-key") or bearer.removeprefix("Bearer ").strip()
        if not key:
            self._error(401, "authentication_error", "an x-api-key or Authorization: Bearer header is required")
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._error(400, "invalid_request_error", "the body is not JSON")
            return
        with self.state.lock:
            self.state.requests.append(body)
            self.state.api_keys.append(key)
            fault = self.state.faults.popleft() if self.state.faults else self.state.always
        if fault is not None:
            if fault.body is not None:
                self._send(fault.status, fault.body, "application/json")
            else:
                self._error(fault.status, fault.error_type, f"scripted {fault.error_type}", fault.retry_after)
            return
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
            self._error(400, "invalid_request_error", "messages: a non-empty list is required")
            return
        response = reply(self.state.behaviour, body)
        self._send(200, json.dumps(response).encode(), "application/json")

    def _chat(self, raw: bytes) -> None:
        """OpenAI Chat Completions (``fake-llm``): the same policy, the same scripted faults, its wire format."""
        from mcpfault.harness.agents.llm import openai_wire

        bearer = (self.headers.get("authorization") or "").removeprefix("Bearer ").strip()
        if not bearer:
            self._chat_error(401, "invalid_api_key", "an Authorization: Bearer header is required")
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._chat_error(400, "invalid_request_error", "the body is not JSON")
            return
        with self.state.lock:
            self.state.requests.append(body)
            self.state.api_keys.append(bearer)
            fault = self.state.faults.popleft() if self.state.faults else self.state.always
        if fault is not None:
            if fault.body is not None:
                self._send(fault.status, fault.body, "application/json")
            else:
                self._chat_error(fault.status, fault.error_type, f"scripted {fault.error_type}", fault.retry_after)
            return
        try:
            request = openai_wire.chat_request_to_messages(body if isinstance(body, dict) else {})
        except openai_wire.WireError as exc:
            self._chat_error(400, "invalid_request_error", str(exc))
            return
        model = str(request.get("model") or "")
        behaviour = model.removeprefix("fake-") if model.removeprefix("fake-") in STYLES else self.state.behaviour
        answer = openai_wire.messages_response_to_chat(reply(behaviour, request), model)
        self._send(200, json.dumps(answer).encode(), "application/json")

    def _chat_error(self, status: int, error_type: str, message: str, retry_after: str | None = None) -> None:
        body = {"error": {"message": message, "type": error_type, "param": None, "code": error_type}}
        headers = {"retry-after": retry_after} if retry_after is not None else {}
        self._send(status, json.dumps(body).encode(), "application/json", headers)

    def _error(self, status: int, error_type: str, message: str, retry_after: str | None = None) -> None:
        body = {"type": "error", "error": {"type": error_type, "message": message}}
        headers = {"retry-after": retry_after} if retry_after is not None else {}
        self._send(status, json.dumps(body).encode(), "application/json", headers)

    def _send(self, status: int, data: bytes, content_type: str, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", "req_fake")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A scripted fake of the Messages API on 127.0.0.1.")
    parser.add_argument("--behaviour", choices=BEHAVIOURS, default="careful")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    with FakeMessagesServer(args.behaviour, port=args.port) as server:
        print(server.base_url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
