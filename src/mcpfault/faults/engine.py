"""The fault engine: given a request, decide what happens to it. Pure and deterministic.

Each rule owns a ``Random`` seeded from the profile seed and the rule's index, and draws from it
only when a request it matches is eligible (past ``after``, under ``limit``). A decision therefore
depends only on the profile, the seed and the sequence of requests: replaying a run's requests
reproduces its faults exactly. Rules are tried in order and the first that fires wins; persistent
faults (schema drift) apply in addition, from the call they first fire on.

The rules come from a ``LiveRules`` (faults/live.py) that a controller may swap at run time: each
request is decided against the one set read when it arrived, and a rule's state (RNG, counters)
survives changes to the rule. A rule with ``start_after_s``/``duration_s`` is in force only inside
that window of the ``elapsed_s`` the transport passes in (the engine reads no clock). A rule with
``sessions`` acts only in that share of HTTP sessions, picked by a hash of the seed and the session id.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from random import Random
from typing import Any

import orjson

from mcpfault.faults.base import (
    STDIO,
    Call,
    Delivery,
    HttpBehaviour,
    Injection,
    PlanContext,
    ProcessBehaviour,
    ResponseStep,
)
from mcpfault.faults.live import LiveRules, RuleChange, RuleSet
from mcpfault.faults.profile import Profile, Rule
from mcpfault.protocol.eras import HANDSHAKE_METHODS


@dataclass(frozen=True, slots=True)
class Applied:
    """One fault acting on one request, as events, spans and summaries report it."""

    rule: str
    type_name: str
    mode: str
    event: str  # the span event it leaves on the proxy's span (the fault type's ``event_name``)


@dataclass(frozen=True, slots=True)
class Decision:
    """What the proxy does with one request. An empty ``applied`` means: leave it alone."""

    applied: tuple[Applied, ...] = ()
    reply: Mapping[str, Any] | None = None
    upstream_request: Mapping[str, Any] | None = None
    steps: tuple[ResponseStep, ...] = ()
    notify: tuple[Mapping[str, Any], ...] = ()
    http: HttpBehaviour | None = None
    process: ProcessBehaviour | None = None
    changes: tuple[RuleChange, ...] = ()  # rule-set changes since this engine's previous decision

    @property
    def contacts_upstream(self) -> bool:
        if self.reply is not None:
            return False
        if self.process is not None and self.process.before_request:
            return False
        return self.http is None or self.http.reaches_server

    @property
    def added_delay_s(self) -> float:
        """Delay the transport adds before the first byte (not part of ``deliver``)."""
        return self.http.first_byte_delay_s if self.http is not None else 0.0

    def deliver(self, data: bytes) -> Delivery:
        """Run ``data`` (the server's response, or the reply) through every response step."""
        delay_s = 0.0
        current: bytes | None = data
        fields: tuple[str, ...] = ()
        for step in self.steps:
            if current is None:
                break
            delivered = step(current)
            current, delay_s = delivered.data, delay_s + delivered.delay_s
            fields += delivered.fields
        return Delivery(current, delay_s, fields)


PASS = Decision()
MAX_CACHED_TOOLS = 1024
# What a time-triggered rule's fault plans for: no request triggered it.
TIMER = Call(method="mcpfault/timer", request_id=None, params={}, body={})


@dataclass(slots=True)
class _RuleState:
    rule: Rule
    rng: Random
    matched: int = 0
    injected: int = 0
    active: bool = False  # a persistent fault that has fired
    timed_out: bool = False  # a time-triggered rule that has fired (it fires once)


@dataclass(slots=True)
class ResponseHistory:
    """Earlier successful responses per (method, name, arguments, cursor), bounded in keys and depth."""

    depth: int = 8
    max_keys: int = 4096
    _entries: OrderedDict[str, deque[bytes]] = field(default_factory=OrderedDict)

    @staticmethod
    def key(call: Call) -> str:
        # A list's pages differ by cursor; a tool, prompt or resource by its name and arguments.
        parts = [call.method, call.target, call.arguments, call.params.get("cursor")]
        try:
            return orjson.dumps(parts, option=orjson.OPT_SORT_KEYS).decode()
        except TypeError:  # what orjson refuses (integers beyond 64 bits) the standard library writes
            return json.dumps(parts, sort_keys=True, default=str)

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


def session_share(seed: int, session_id: str) -> float:
    """Where a session falls in [0, 1): the same for the same seed and id, spread evenly across ids."""
    digest = hashlib.sha256(f"{seed}:{session_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class Engine:
    """Decisions for one stream of requests (a stdio connection, an HTTP session).

    Rules whose fault the ``transport`` cannot carry out are left out; since every rule has its
    own RNG, the others decide exactly as they would with them.
    """

    def __init__(
        self,
        profile: Profile,
        *,
        transport: str = STDIO,
        in_session: bool = False,
        session_id: str | None = None,
        live: LiveRules | None = None,
        owns_process: bool | None = None,
    ) -> None:
        self.profile = profile
        self.transport = transport
        self._in_session = in_session
        # The stdio proxy always starts its server; an HTTP proxy only with a command after '--'.
        self.owns_process = transport == STDIO if owns_process is None else owns_process
        self._live = live if live is not None else LiveRules.of(profile)
        self._by_key: dict[int, _RuleState] = {}
        self._all_states: tuple[_RuleState, ...] = ()  # every rule of the set, enabled or not (for counters)
        self._states: list[_RuleState] = []
        self._timed: list[_RuleState] = []  # process faults with start_after_s: fired by due(), not requests
        self._history: ResponseHistory | None = None
        self._history_methods: frozenset[str] = frozenset()  # the methods whose answers stale rules replay
        self._methods: frozenset[str] = frozenset()
        self._session_id = session_id  # for rules with a sessions share (a blast radius)
        self._pending: tuple[RuleChange, ...] = ()
        # Tools and prompts as the server's tools/list and prompts/list describe them (kept across rule-set changes).
        self._tools: dict[str, Mapping[str, Any]] = {}
        self._prompts: dict[str, Mapping[str, Any]] = {}
        self._learns_tools = False
        self._listed = False  # a complete listing of the proxy's own arrived (learn_tools)
        self._set = self._live.current
        self._seen_version = self._set.version  # changes made before this engine existed are not news to it
        self._apply(self._set)

    def _in_radius(self, rule: Rule, seed: int) -> bool:
        """Whether this engine's session is inside the rule's share of sessions (outside any session: no)."""
        if rule.sessions is None:
            return True
        if self._session_id is None:
            return False
        return session_share(seed, self._session_id) < rule.sessions

    def _refresh(self) -> RuleSet:
        """The current set, applied; read once per request, so one request sees one set."""
        current = self._live.current
        if current is not self._set:
            self._set = current
            self._pending = (*self._pending, *current.changes_since(self._seen_version))
            self._seen_version = current.version
            self._apply(current)
        return current

    def _apply(self, rules: RuleSet) -> None:
        states: list[_RuleState] = []
        every: list[_RuleState] = []
        for live in rules.rules:
            if not _carried(live.rule, self.transport, self.owns_process):
                continue
            state = self._by_key.get(live.key)
            if state is None:
                state = self._by_key[live.key] = _RuleState(live.rule, Random(f"{rules.seed}:{live.seed_key}"))
            else:
                state.rule = live.rule  # a changed probability or limit; its RNG and counters carry on
            every.append(state)
            if live.enabled and rules.enabled and self._in_radius(live.rule, rules.seed):
                states.append(state)
        # A profile rule's state is kept while it is removed (reset brings it back, counters kept).
        present = {live.key for live in rules.rules}
        for key in [k for k in self._by_key if k not in present and k >= len(self.profile.rules)]:
            del self._by_key[key]
        self._timed = [s for s in states if _time_triggered(s.rule)]
        self._states = states = [s for s in states if not _time_triggered(s.rule)]
        self._all_states = tuple(every)
        self._by_name: dict[tuple[str, str], list[_RuleState]] = {}
        self._handshake_rules = [s for s in states if s.rule.fault.handshake is not None]
        depths = [s.rule.fault.history_depth() for s in states]
        if any(depths) and (self._history is None or self._history.depth < max(depths)):
            self._history = ResponseHistory(depth=max(depths))
        self._history_methods = frozenset(m for s in states if s.rule.fault.history_depth() for m in s.rule.methods)
        # Tools as the server's tools/list describes them, for rules that need annotations or schemas.
        self._learns_tools = any(s.rule.read_only is not None or s.rule.fault.needs_tools for s in states)
        self._methods = frozenset(m for s in states for m in s.rule.methods | s.rule.fault.follows) | (
            HANDSHAKE_METHODS if states else frozenset()
        )

    @property
    def wants_responses(self) -> bool:
        """Whether ``observe_response`` needs to see tools/call responses."""
        if self._live.current is not self._set:
            self._refresh()
        return self._history is not None or self._learns_tools

    def cares_about(self, method: str) -> bool:
        """False when no rule can act on ``method`` and no change is news: the request crosses untouched."""
        if self._live.current is not self._set:
            self._refresh()
        return method in self._methods or bool(self._pending)

    def acts_on(self, method: str) -> bool:
        """Whether some rule can act on ``method`` (a notification, a server's request): unlike
        ``cares_about``, pending rule-set changes do not count, as they are news for a request's span."""
        if self._live.current is not self._set:
            self._refresh()
        return method in self._methods

    def decide(self, call: Call, elapsed_s: float = 0.0, *, with_changes: bool = True) -> Decision:
        """What happens to ``call``, ``elapsed_s`` seconds after the proxy started (for time windows).

        ``with_changes``: the rule-set changes since the last decision ride on this one (else they wait)."""
        self._refresh()
        if self._pending and with_changes:
            changes, self._pending = self._pending, ()
            decision = self._decide(call, elapsed_s)
            return dataclasses.replace(decision, changes=changes)
        return self._decide(call, elapsed_s)

    def _decide(self, call: Call, elapsed_s: float) -> Decision:
        if call.method not in self._methods:
            return PASS
        if call.method in HANDSHAKE_METHODS:
            return self._handshake(call)
        kind, name = call.kind, call.target
        eligible: list[_RuleState] = []
        persistent: list[tuple[_RuleState, Injection]] = []
        for state in self._states if kind is None or name is None else self._states_for(kind, name):
            fault, rule = state.rule.fault, state.rule
            if (rule.start_after_s is not None or rule.duration_s is not None) and not rule.in_window(elapsed_s):
                continue  # outside its window the rule is not in force: it neither counts nor draws
            if state.active and (call.method in rule.methods or call.method in fault.follows):
                injection = fault.plan(call, state.rng, self._context(rule))
                if injection is not None:
                    persistent.append((state, injection))
                continue
            if call.method not in rule.methods:
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

    def due(self, elapsed_s: float) -> list[Decision]:
        """The time-triggered rules (process faults with ``start_after_s``) that fire now, each once."""
        decisions = []
        for state in self._timed:
            start = state.rule.start_after_s
            if state.timed_out or start is None or elapsed_s < start:
                continue
            state.timed_out = True
            state.matched += 1
            if not self._roll(state):
                continue
            injection = state.rule.fault.plan(TIMER, state.rng, self._context(state.rule))
            if injection is not None:
                state.injected += 1
                decisions.append(_combine([], (state, injection)))
        return decisions

    def next_due_s(self) -> float | None:
        """When the next time-triggered rule is due (seconds since the proxy started); None: never."""
        pending = [s.rule.start_after_s for s in self._timed if not s.timed_out and s.rule.start_after_s is not None]
        return min(pending) if pending else None

    def _states_for(self, kind: str, name: str) -> list[_RuleState]:
        """The rules whose glob for ``kind`` matches ``name``, in profile order; worked out once per name."""
        key = (kind, name)
        states = self._by_name.get(key)
        if states is None:
            states = [
                s
                for s in self._states
                if s.rule.matches(kind, name) and (kind != "tools" or self.annotated_as(s.rule, name))
            ]
            if len(self._by_name) < MAX_CACHED_TOOLS:  # names come from a peer: keep the cache bounded
                self._by_name[key] = states
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

    def _learn(self, body: Mapping[str, Any] | None, key: str, into: dict[str, Mapping[str, Any]]) -> None:
        result = body.get("result") if body is not None else None
        listed = result.get(key) if isinstance(result, Mapping) else None
        if not isinstance(listed, list):
            return
        for entry in listed[:MAX_CACHED_TOOLS]:
            if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
                into[entry["name"]] = entry
        self._by_name.clear()  # what matches a tool may have changed with its annotations

    @property
    def learns_tools(self) -> bool:
        """Whether some rule matches on what the server's tools/list says (annotations, schemas): the
        proxy then lists the tools itself, whatever its client does (proxy/tool_listing.py)."""
        if self._live.current is not self._set:
            self._refresh()
        return self._learns_tools

    @property
    def has_tool_listing(self) -> bool:
        """Whether a complete listing reached ``learn_tools`` (the client's own listings do not count)."""
        return self._listed

    def learn_tools(self, tools: Sequence[Mapping[str, Any]]) -> None:
        """A complete listing of the server's tools (every page), which replaces what was known."""
        self._listed = True
        self._tools = {entry["name"]: entry for entry in tools[:MAX_CACHED_TOOLS] if isinstance(entry.get("name"), str)}
        self._by_name.clear()  # what matches a tool may have changed with its annotations

    def observe_response(self, call: Call, data: bytes, body: Mapping[str, Any] | None) -> None:
        """Remember a server's successful responses (what stale faults replay) and its tools/list and
        prompts/list (what annotation-aware rules and auto drift read)."""
        if call.method == "tools/list" and self._learns_tools:
            self._learn(body, "tools", self._tools)
        elif call.method == "prompts/list" and self._learns_tools:
            self._learn(body, "prompts", self._prompts)
        if self._history is None or call.method not in self._history_methods or body is None:
            return
        result = body.get("result")
        if isinstance(result, Mapping) and not result.get("isError"):
            self._history.add(call, data)

    def _handshake(self, call: Call) -> Decision:
        applied, steps = [], []
        for state in self._handshake_rules:
            step = state.rule.fault.handshake(call)
            if step is not None:
                applied.append(Applied(state.rule.name, state.rule.type_name, "advertise", state.rule.fault.event_name))
                steps.append(step)
        return Decision(applied=tuple(applied), steps=tuple(steps)) if applied else PASS

    def _context(self, rule: Rule, *, activating: bool = False) -> PlanContext:
        history = self._history.get if self._history is not None else (lambda _call: ())
        return PlanContext(
            rule.name,
            rule.matches_tool,
            history,
            activating,
            self._in_session,
            self._tools.get,
            self.profile.seed,
            rule.methods,
            self._prompts.get,
            rule.matches,
        )

    @staticmethod
    def _roll(state: _RuleState) -> bool:
        # Always draw, even at probability 1, so each rule's stream advances the same way.
        return state.rng.random() < state.rule.probability

    def counters(self) -> list[tuple[str, int, int]]:
        """(rule, matched, injected) for each rule of the set last applied, enabled or not.

        Only reads: safe from another thread than the one deciding."""
        return [(s.rule.name, s.matched, s.injected) for s in self._all_states]


def rules_not_carried(profile: Profile, transport: str, *, owns_process: bool | None = None) -> list[Rule]:
    """The rules of ``profile`` that never fire on ``transport`` (an HTTP fault behind stdio, a process
    fault in front of a server the proxy did not start)."""
    owns = transport == STDIO if owns_process is None else owns_process
    return [rule for rule in profile.rules if not _carried(rule, transport, owns)]


def _carried(rule: Rule, transport: str, owns_process: bool) -> bool:
    return transport in rule.fault.transports and (owns_process or not rule.fault.needs_process)


def _time_triggered(rule: Rule) -> bool:
    """A process fault with ``start_after_s`` fires once at that time, not on a request."""
    return rule.fault.needs_process and rule.start_after_s is not None


def _combine(persistent: list[tuple[_RuleState, Injection]], chosen: tuple[_RuleState, Injection] | None) -> Decision:
    if not persistent and chosen is None:
        return PASS
    parts = [*persistent, *([chosen] if chosen else [])]
    applied = tuple(Applied(s.rule.name, s.rule.type_name, i.mode, s.rule.fault.event_name) for s, i in parts)
    reply = next((i.reply for _, i in parts if i.reply is not None), None)
    upstream = next((i.upstream_request for _, i in parts if i.upstream_request is not None), None)
    # The server's (or the stale cache's) answer gets the drift's names first, then the chosen fault.
    steps = tuple(i.response for _, i in parts if i.response is not None)
    notify = tuple(n for _, i in parts for n in i.notify)
    http = next((i.http for _, i in parts if i.http is not None), None)
    process = next((i.process for _, i in parts if i.process is not None), None)
    return Decision(
        applied=applied,
        reply=reply,
        upstream_request=upstream,
        steps=steps,
        notify=notify,
        http=http,
        process=process,
    )
