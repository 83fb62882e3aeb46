"""Who decides what, behind the HTTP proxy: one engine and one core per MCP session.

Determinism over HTTP: each 2025-11-25 session (an ``Mcp-Session-Id``) gets its own engine, seeded
from the profile alone, so the faults of a session depend only on that session's own sequence of
requests, however many sessions run beside it. Requests without a session (the 2026-07-28 era,
and the ``initialize`` that opens a session) share one engine and are decided in the order they
arrive: reproducible for a client that sends one request at a time, and, with concurrent clients,
the same decisions in the same order, dealt to whichever request comes first.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mcpfault.faults.base import HTTP
from mcpfault.faults.engine import Decision, Engine
from mcpfault.faults.live import LiveRules
from mcpfault.faults.profile import Profile
from mcpfault.protocol.eras import EraTracker
from mcpfault.proxy.core import ProxyCore, RequestObserver, Stats
from mcpfault.proxy.events import EventSink

# Sessions kept at once; the least recently used is forgotten first (it gets a fresh engine if it returns).
MAX_SESSIONS = 10_000

ObserversFor = Callable[[str | None], Sequence[RequestObserver]]


@dataclass(slots=True)
class HttpSession:
    engine: Engine
    core: ProxyCore


class Sessions:
    """The cores of one HTTP proxy, and the totals its exit summary reports."""

    def __init__(
        self,
        profile: Profile,
        *,
        events: EventSink | None,
        observers_for: ObserversFor,
        propagate: bool,
        max_sessions: int = MAX_SESSIONS,
        live: LiveRules | None = None,
        owns_process: bool = False,
    ) -> None:
        self.profile = profile
        self.live = live if live is not None else LiveRules.of(profile)  # one rule set for every session
        self.epoch = time.monotonic()  # time windows count from the proxy's start, whenever a session began
        self._owns_process = owns_process  # the proxy started the server (the stdio bridge): process faults fire
        self.stats = Stats()
        self.era = EraTracker()  # the last era learned, for the summary
        self._events = events
        self._observers_for = observers_for
        self._propagate = propagate
        self._max_sessions = max_sessions
        self._sessions: OrderedDict[str, HttpSession] = OrderedDict()
        self._sessionless = Engine(profile, transport=HTTP, live=self.live, owns_process=owns_process)
        self._sessionless_observers = observers_for(None)
        self._retired: Counter[str] = Counter()  # matched counts of forgotten sessions' rules
        self._retired_injected: Counter[str] = Counter()
        self.sessions_started = 0
        self._lost: OrderedDict[str, None] = OrderedDict()  # sessions answered 404 by a fault, bounded
        self._no_rules: Engine | None = None  # what decides the requests on lost sessions: nothing

    def due(self, elapsed_s: float) -> list[Decision]:
        """Time-triggered rules due now (a process fault at ``start_after_s``): one clock for the whole
        proxy, so they are the sessionless engine's (session engines never fire them)."""
        decisions = self._sessionless.due(elapsed_s)
        for decision in decisions:
            for applied in decision.applied:
                self.stats.faults[(applied.rule, applied.type_name, applied.mode)] += 1
        return decisions

    def next_due_s(self) -> float | None:
        return self._sessionless.next_due_s()

    def exchange_core(self, protocol_version: str | None = None) -> ProxyCore:
        """A core for one request outside any session: its ids cannot collide with another client's.
        ``protocol_version``: the request's ``MCP-Protocol-Version`` header, the era's only memory here."""
        return self._core(
            self._sessionless, self._sessionless_observers, self._propagate, EraTracker.from_header(protocol_version)
        )

    def session(self, session_id: str, era: EraTracker | None = None) -> HttpSession:
        """The session's core, created on first sight (from the handshake's era when there is one)."""
        found = self._sessions.get(session_id)
        if found is not None:
            self._sessions.move_to_end(session_id)
            return found
        engine = Engine(
            self.profile,
            transport=HTTP,
            in_session=True,
            live=self.live,
            session_id=session_id,
            owns_process=self._owns_process,
        )
        core = self._core(
            engine, self._observers_for(session_id), self._propagate, era if era is not None else EraTracker()
        )
        created = self._sessions[session_id] = HttpSession(engine, core)
        self.sessions_started += 1
        if len(self._sessions) > self._max_sessions:
            _, oldest = self._sessions.popitem(last=False)
            self._retire(oldest)
        return created

    def forget(self, session_id: str) -> None:
        """The session ended (DELETE) or its server no longer knows it (404)."""
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._retire(session)

    def lose(self, session_id: str) -> None:
        """The proxy answered 404 for the session: from now on every request on it gets 404."""
        self.forget(session_id)
        self._lost[session_id] = None
        if len(self._lost) > self._max_sessions:
            self._lost.popitem(last=False)

    def is_lost(self, session_id: str) -> bool:
        return session_id in self._lost

    def lost_core(self, session_id: str, protocol_version: str | None = None) -> ProxyCore:
        """A core for one request on a lost session: an engine without rules (nothing more is injected),
        so the request's event and span say what it got, as for any request."""
        if self._no_rules is None:
            empty = dataclasses.replace(self.profile, rules=())
            self._no_rules = Engine(empty, transport=HTTP, live=LiveRules.of(empty))
        return self._core(
            self._no_rules, self._observers_for(session_id), False, EraTracker.from_header(protocol_version)
        )

    def _core(
        self, engine: Engine, observers: Sequence[RequestObserver], propagate: bool, era: EraTracker
    ) -> ProxyCore:
        core = ProxyCore(
            engine,
            events=self._events,
            observers=observers,
            propagate=propagate,
            stats=self.stats,
            era=era,
            epoch=self.epoch,
        )
        core.lists_in_band = False  # the transport sends the proxy's own tools/list, as POSTs of its own
        return core

    def learned(self, era: EraTracker) -> None:
        if era.protocol_version is not None:
            self.era = era

    def _retire(self, session: HttpSession) -> None:
        for name, matched, injected in session.engine.counters():
            self._retired[name] += matched
            self._retired_injected[name] += injected

    def __len__(self) -> int:
        return len(self._sessions)

    # The exit summary reads these, as it reads an Engine's.
    def counters(self) -> list[tuple[str, int, int]]:
        matched, injected = Counter(self._retired), Counter(self._retired_injected)
        for engine in (self._sessionless, *(s.engine for s in self._sessions.values())):
            for name, m, i in engine.counters():
                matched[name] += m
                injected[name] += i
        names = dict.fromkeys([name for name, _, _ in self._sessionless.counters()] + list(matched))
        return [(name, matched[name], injected[name]) for name in names]
