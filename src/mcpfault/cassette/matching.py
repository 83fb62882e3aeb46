"""How a request finds its recorded answer: ``method+params`` (canonical JSON, ``_meta`` and ids ignored),
``sequential`` (the next recorded request of that method) or ``strict`` (the next recorded request, which
must equal this one). A miss names the closest recorded request and how it differs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from mcpfault.cassette.format import Entry
from mcpfault.errors import MCPFaultError
from mcpfault.protocol.eras import HANDSHAKE_METHODS
from mcpfault.telemetry.logging import REDACTED

Matcher = Literal["method+params", "sequential", "strict"]
MATCHERS: Final = ("method+params", "sequential", "strict")


def canonical(params: Any) -> Any:
    """``params`` without ``_meta`` (at any depth: progress tokens, trace context, era metadata)."""
    if isinstance(params, dict):
        return {key: canonical(value) for key, value in sorted(params.items()) if key != "_meta"}
    if isinstance(params, list):
        return [canonical(item) for item in params]
    return params


def differences(recorded: Any, got: Any, where: str = "params") -> list[str]:
    """Where ``got`` differs from ``recorded``; a recorded ``[redacted]`` matches any value."""
    if recorded == REDACTED:
        return []
    if isinstance(recorded, dict) and isinstance(got, dict):
        found = []
        for key in sorted(set(recorded) | set(got)):
            if key not in got:
                found.append(f"{where}.{key} missing (recorded {json.dumps(recorded[key])[:60]})")
            elif key not in recorded:
                found.append(f"{where}.{key} not recorded (got {json.dumps(got[key])[:60]})")
            else:
                found += differences(recorded[key], got[key], f"{where}.{key}")
        return found
    if isinstance(recorded, list) and isinstance(got, list) and len(recorded) == len(got):
        return [
            d
            for index, (r, g) in enumerate(zip(recorded, got, strict=True))
            for d in differences(r, g, f"{where}[{index}]")
        ]
    if recorded != got:
        return [f"{where}: recorded {json.dumps(recorded)[:60]}, got {json.dumps(got)[:60]}"]
    return []


@dataclass(slots=True)
class Recorded:
    """One recorded request, its answer, and what the server sent in between (notifications and
    server-to-client requests, with their offsets from the request)."""

    request: Entry
    answer: Entry | None
    between: list[Entry]
    used: int = 0
    # What the server sent after the answer while no request of the session was pending (a list_changed,
    # a log message), until the client's next request: replayed after the answer, in order.
    after: list[Entry] = field(default_factory=list)

    @property
    def method(self) -> str:
        return str(self.request.message.get("method"))

    @property
    def params(self) -> Any:
        return canonical(self.request.message.get("params", {}))

    def describe(self) -> str:
        return f"{self.method} {json.dumps(self.params)[:120]}"


class Miss(MCPFaultError):
    """No recorded request matches: the message says which recorded one is closest and how it differs."""


class Book:
    """The recorded requests of a cassette, and the matcher that picks one for each live request.

    Sessions: each live handshake (``initialize``, ``server/discover``) begins the next recorded session
    that began with the same handshake (the same era), in the order they were recorded (after the last,
    the first again), and later requests are looked for
    in that session first. ``method+params`` and ``sequential`` then look in the other sessions too (the
    HTTP bridge may interleave two live clients on one replayer); ``strict`` never does.
    """

    def __init__(self, recorded: list[Recorded], matcher: Matcher) -> None:
        self.recorded = recorded
        self.matcher = matcher
        self.sessions = list(dict.fromkeys(item.request.session for item in recorded))
        self._sessions_served = 0
        self.session = self.sessions[0] if self.sessions else "1"
        self._next: dict[str, int] = {}

    def _in_session(self, session: str) -> list[Recorded]:
        return [item for item in self.recorded if item.request.session == session]

    def match(self, method: str, params: Any) -> Recorded:
        params = canonical(params if params is not None else {})
        if method in HANDSHAKE_METHODS:  # the handshake is answered as recorded, whatever the client proposed
            if self.sessions:
                self.session = self._next_session(method)
            for item in self._in_session(self.session) + self.recorded:
                if item.method == method:
                    return self._use(item)
        current = self._in_session(self.session)
        if self.matcher == "strict":
            calls = [item for item in current if item.method not in HANDSHAKE_METHODS]
            position = self._next.get(self.session, 0)
            if position < len(calls):
                item = calls[position]
                if item.method == method and not differences(item.params, params):
                    self._next[self.session] = position + 1
                    return self._use(item)
                raise Miss(self._miss_text(method, params, [item], "strict: the next recorded request is"))
            raise Miss(f"strict: every recorded request of session {self.session} was already answered; got {method}")
        others = [item for item in self.recorded if item.request.session != self.session]
        same_method = [item for item in current + others if item.method == method]
        if self.matcher == "sequential":
            for item in same_method:
                if not item.used:
                    return self._use(item)
            if same_method:
                raise Miss(f"sequential: all {len(same_method)} recorded {method} requests were already answered")
        else:
            equal = [item for item in same_method if not differences(item.params, params)]
            if equal:  # the first not yet used (this session's first), else the last again (a listing asked twice)
                unused = [item for item in equal if not item.used]
                in_session = [item for item in equal if item.request.session == self.session]
                return self._use(unused[0] if unused else (in_session or equal)[-1])
        raise Miss(self._miss_text(method, params, same_method or self.recorded, "closest recorded request:"))

    def _next_session(self, handshake: str) -> str:
        """The next recorded session in turn that began with this handshake (its era's: ``initialize`` or
        ``server/discover``), so a client of either era meets a session of its own; the next in turn
        when none did."""
        count = len(self.sessions)
        order = [self.sessions[(self._sessions_served + n) % count] for n in range(count)]
        chosen = next((s for s in order if any(i.method == handshake for i in self._in_session(s))), order[0])
        self._sessions_served = self.sessions.index(chosen) + 1
        return chosen

    def _use(self, item: Recorded) -> Recorded:
        item.used += 1
        return item

    def _miss_text(self, method: str, params: Any, candidates: list[Recorded], lead: str) -> str:
        got = f"{method} {json.dumps(params)[:120]}"
        if not candidates:
            return f"no recorded request matches {got}: the cassette has no requests"

        def distance(item: Recorded) -> tuple[int, int]:
            return (item.method != method, len(differences(item.params, params)))

        closest = min(candidates, key=distance)
        how = (
            [f"method: recorded {closest.method}, got {method}"]
            if closest.method != method
            else differences(closest.params, params)
        )
        return (
            f"no recorded request matches {got}; {lead} {closest.describe()}; it differs in: "
            f"{'; '.join(how) or 'nothing (it was answered already)'}"
        )
