"""The fault engine: given a request, decide what happens to it. Pure and deterministic.

Each rule owns a ``Random`` seeded from the profile seed and the rule's index, and draws from it
only when a request it matches is eligible (past ``after``, under ``limit``). A decision therefore
depends only on the profile, the seed and the sequence of requests: replaying a run's requests
reproduces its faults exactly. Rules are tried in order and the first that fires wins; persistent
faults (schema drift) apply in addition, from the call they first fire on.
"""

from __future__ import annotations

import json
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from random import Random
from typing import Any

import orjson

from mcpfault.faults.base import STDIO, Call, Delivery, HttpAction, HttpFailure, Injection, PlanContext, ResponseStep
from mcpfault.faults.profile import Profile, Rule
from mcpfault.protocol.eras import HANDSHAKE_METHODS


@dataclass(frozen=True, slots=True)
class Applied:
    """One fault acting on one request, as events, spans and summaries report it."""

    rule: str
    type_name: str
    mode: str


@dataclass(frozen=True, slots=True)
class Decision:
    """What the proxy does with one request. An empty ``applied`` means: leave it alone."""

    applied: tuple[Applied, ...] = ()
    reply: Mapping[str, Any] | None = None
    upstream_request: Mapping[str, Any] | None = None
    steps: tuple[ResponseStep, ...] = ()
    notify: tuple[Mapping[str, Any], ...] = ()
    http: HttpAction | None = None

    @property
    def contacts_upstream(self) -> bool:
        return self.reply is None and (self.http is None or self.http.upstream)

    @property
    def added_delay_s(self) -> float:
        """Delay the transport adds before the first byte (not part of ``deliver``)."""
        http = self.http
        return http.delay_s if http is not None and http.failure is HttpFailure.FIRST_BYTE else 0.0

    def deliver(self, data: bytes) -> Delivery:
        """Run ``data`` (the server's response, or the reply) through every response step."""
        delay_s = 0.0
        current: bytes | None = data
        for step in self.steps:
            if current is None:
                break
            delivered = step(current)
            current, delay_s = delivered.data, delay_s + delivered.delay_s
        return Delivery(current, delay_s)


PASS = Decision()
MAX_CACHED_TOOLS = 1024


@dataclass(slots=True)
class _RuleState:
    rule: Rule
    rng: Random
    matched: int = 0
    injected: int = 0
    active: bool = False  # a persistent fault that has fired


@dataclass(slots=True)
class ResponseHistory:
    """Earlier successful tools/call responses per (tool, arguments), bounded in keys and depth."""

    depth: int = 8
    max_keys: int = 4096
    _entries: OrderedDict[str, deque[bytes]] = field(default_factory=OrderedDict)

    @staticmethod
    def key(call: Call) -> str:
        try:
            return orjson.dumps([call.target, call.arguments], option=orjson.OPT_SORT_KEYS).decode()
        except TypeError:  # what orjson refuses (integers beyond 64 bits) the standard library writes
            return json.dumps([call.target, call.arguments], sort_keys=True, default=str)

    def get(self, call: Call) -> tuple[bytes, ...]:
        found = self._entries.get(self.key(call))
        return tuple(found) if found else ()

    def add(self, call: Call, data: bytes) -> None:
        key = self.key(call)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = deque(maxlen=self.depth)
            if len(self._entries) > self.max_keys:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
        entry.append(data)

    def __len__(self) -> int:
        return len(self._entries)


class Engine:
    """Decisions for one stream of requests (a stdio connection, an HTTP session).

    Rules whose fault the ``transport`` cannot carry out are left out; since every rule has its
    own RNG, the others decide exactly as they would with them.
    """

    def __init__(self, profile: Profile, *, transport: str = STDIO, in_session: bool = False) -> None:
        self.profile = profile
        self.transport = transport
        self._in_session = in_session
        self._states = [
            _RuleState(rule, Random(f"{profile.seed}:{rule.index}"))
            for rule in profile.rules
            if transport in rule.fault.transports
        ]
        self._by_tool: dict[str, list[_RuleState]] = {}
        self._handshake_rules = [s for s in self._states if s.rule.fault.handshake is not None]
        depths = [getattr(s.rule.fault, "history", 8) for s in self._states if s.rule.fault.needs_history]
        self._history = ResponseHistory(depth=max(depths)) if depths else None
        # Tools as the server's tools/list describes them, for rules that need annotations or schemas.
        self._learns_tools = any(s.rule.read_only is not None or s.rule.fault.needs_tools for s in self._states)
        self._tools: dict[str, Mapping[str, Any]] = {}
        self._methods = frozenset(m for s in self._states for m in s.rule.fault.targets | s.rule.fault.follows) | (
            HANDSHAKE_METHODS if self._states else frozenset()
        )

    @property
    def wants_responses(self) -> bool:
        """Whether ``observe_response`` needs to see tools/call responses."""
        return self._history is not None or self._learns_tools

    def cares_about(self, method: str) -> bool:
        """False when no rule can act on ``method``: the request crosses untouched."""
        return method in self._methods

    def decide(self, call: Call) -> Decision:
        if call.method not in self._methods:
            return PASS
        if call.method in HANDSHAKE_METHODS:
            return self._handshake(call)
        tool = call.target
        eligible: list[_RuleState] = []
        persistent: list[tuple[_RuleState, Injection]] = []
        for state in self._states if tool is None else self._states_for(tool):
            fault, rule = state.rule.fault, state.rule
            if state.active and call.method in fault.targets | fault.follows:
                injection = fault.plan(call, state.rng, self._context(rule))
                if injection is not None:
                    persistent.append((state, injection))
                continue
            if call.method not in fault.targets:
                continue
            state.matched += 1
            if state.matched > rule.after and (rule.limit is None or state.injected < rule.limit):
                eligible.append(state)

        # Persistent faults first: once in force, they shape what the other rules see.
        ordinary: list[_RuleState] = []
        for state in eligible:
            if not state.rule.fault.persistent:
                ordinary.append(state)
                continue
            if self._roll(state):
                state.active = True
                injection = state.rule.fault.plan(call, state.rng, self._context(state.rule, activating=True))
                if injection is not None:
                    state.injected += 1
                    persistent.append((state, injection))

        chosen: tuple[_RuleState, Injection] | None = None
        if not any(injection.reply is not None for _, injection in persistent):
            for state in ordinary:
                if not self._roll(state):
                    continue
                injection = state.rule.fault.plan(call, state.rng, self._context(state.rule))
                if injection is None:
                    continue
                state.injected += 1
                chosen = (state, injection)
                break
        return _combine(persistent, chosen)

    def _states_for(self, tool: str) -> list[_RuleState]:
        """The rules whose globs match ``tool``, in profile order; worked out once per tool name."""
        states = self._by_tool.get(tool)
        if states is None:
            states = [s for s in self._states if s.rule.matches_tool(tool) and self.annotated_as(s.rule, tool)]
            if len(self._by_tool) < MAX_CACHED_TOOLS:  # tool names come from a peer: keep the cache bounded
                self._by_tool[tool] = states
        return states

    def annotated_as(self, rule: Rule, tool: str) -> bool:
        """Whether ``tool`` has the annotations ``rule`` asks for; a tool not listed yet has none."""
        if rule.read_only is None:
            return True
        listed = self._tools.get(tool)
        if listed is None:
            return False
        annotations = listed.get("annotations")
        # readOnlyHint defaults to false (the specification): a tool that says nothing may write.
        read_only = isinstance(annotations, Mapping) and annotations.get("readOnlyHint") is True
        return read_only is rule.read_only

    def _learn_tools(self, body: Mapping[str, Any] | None) -> None:
        result = body.get("result") if body is not None else None
        tools = result.get("tools") if isinstance(result, Mapping) else None
        if not isinstance(tools, list):
            return
        for tool in tools[:MAX_CACHED_TOOLS]:
            if isinstance(tool, Mapping) and isinstance(tool.get("name"), str):
                self._tools[tool["name"]] = tool
        self._by_tool.clear()  # what matches a tool may have changed with its annotations

    def observe_response(self, call: Call, data: bytes, body: Mapping[str, Any] | None) -> None:
        """Remember a server's successful tools/call response (what stale faults replay) and its tools/list
        (what annotation-aware rules and auto drift read)."""
        if call.method == "tools/list" and self._learns_tools:
            self._learn_tools(body)
            return
        if self._history is None or call.method != "tools/call" or body is None:
            return
        result = body.get("result")
        if isinstance(result, Mapping) and not result.get("isError"):
            self._history.add(call, data)

    def _handshake(self, call: Call) -> Decision:
        applied, steps = [], []
        for state in self._handshake_rules:
            step = state.rule.fault.handshake(call)
            if step is not None:
                applied.append(Applied(state.rule.name, state.rule.type_name, "advertise"))
                steps.append(step)
        return Decision(applied=tuple(applied), steps=tuple(steps)) if applied else PASS

    def _context(self, rule: Rule, *, activating: bool = False) -> PlanContext:
        history = self._history.get if self._history is not None else (lambda _call: ())
        return PlanContext(
            rule.name, rule.matches_tool, history, activating, self._in_session, self._tools.get, self.profile.seed
        )

    @staticmethod
    def _roll(state: _RuleState) -> bool:
        # Always draw, even at probability 1, so each rule's stream advances the same way.
        return state.rng.random() < state.rule.probability

    def counters(self) -> list[tuple[str, int, int]]:
        """(rule, matched, injected) for each rule."""
        return [(s.rule.name, s.matched, s.injected) for s in self._states]


def rules_not_carried(profile: Profile, transport: str) -> list[Rule]:
    """The rules of ``profile`` that never fire on ``transport`` (an HTTP fault behind stdio)."""
    return [rule for rule in profile.rules if transport not in rule.fault.transports]


def _combine(persistent: list[tuple[_RuleState, Injection]], chosen: tuple[_RuleState, Injection] | None) -> Decision:
    if not persistent and chosen is None:
        return PASS
    parts = [*persistent, *([chosen] if chosen else [])]
    applied = tuple(Applied(s.rule.name, s.rule.type_name, i.mode) for s, i in parts)
    reply = next((i.reply for _, i in parts if i.reply is not None), None)
    upstream = next((i.upstream_request for _, i in parts if i.upstream_request is not None), None)
    # The server's (or the stale cache's) answer gets the drift's names first, then the chosen fault.
    steps = tuple(i.response for _, i in parts if i.response is not None)
    notify = tuple(n for _, i in parts for n in i.notify)
    http = next((i.http for _, i in parts if i.http is not None), None)
    return Decision(applied=applied, reply=reply, upstream_request=upstream, steps=steps, notify=notify, http=http)
