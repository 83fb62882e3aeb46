"""The core's state: what it knows of the session, the requests in flight, and its bookkeeping.

``ProxyCore`` (``proxy/core.py``) is this class and the parts built on it, one module each: the
records (``core_records.py``), the server's own requests and the notifications
(``core_server_requests.py``), the lanes (``core_lanes.py``), the full path with the proxy's own
tool listing (``core_flow.py``), and the server's exit and restart (``core.py``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import structlog

from mcpfault.faults.engine import Engine
from mcpfault.protocol import jsonrpc
from mcpfault.protocol.eras import META_PROTOCOL_VERSION, EraTracker
from mcpfault.proxy.core_types import DeferringObserver, HeldEvent, InFlight, PlainAnswer, RequestObserver, Stats, To
from mcpfault.proxy.events import EventSink, utc_now
from mcpfault.proxy.tool_listing import ToolListing

log = structlog.get_logger("mcpfault.proxy")
_NOTHING_DEFERRED = threading.local()  # see ``CoreState._deferred``: only ever holds records = None


class CoreState:
    """What every part of ``ProxyCore`` shares: its clocks, sink and observers (given by the transport),
    the requests in flight, and what it learned of the session. Built as ``ProxyCore(engine, ...)``."""

    def __init__(
        self,
        engine: Engine,
        *,
        events: EventSink | None = None,
        observers: Sequence[RequestObserver] = (),
        propagate: bool = True,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = utc_now,
        stats: Stats | None = None,
        era: EraTracker | None = None,
        epoch: float | None = None,
    ) -> None:
        self.engine = engine
        # When the proxy started, on ``clock``: time-windowed rules count from here (shared by HTTP cores).
        self.epoch = clock() if epoch is None else epoch
        # Shared when one proxy runs several cores (one per HTTP session or exchange).
        self.era = era if era is not None else EraTracker()
        self.stats = stats if stats is not None else Stats()
        self._events = events
        self._observers = tuple(observers)
        self._propagate = propagate and bool(self._observers)
        # The one observer (spans, no metrics) that takes plain requests as raw data: see DeferringObserver.
        only = self._observers[0] if len(self._observers) == 1 else None
        self._deferring: DeferringObserver | None = only if getattr(only, "defers", False) else None  # type: ignore[assignment]
        # Whether the observers leave a request nothing can happen to to the lanes: there are none, or
        # only the deferring one (fixed with the observers; see core_lanes).
        self._plain_observed = not self._observers or self._deferring is not None
        # Whether the answer to a request nothing happened to can go by unrecorded: no events file, and
        # observers that leave it to the lanes (the rules that watch answers are read per answer).
        self._answers_pass = events is None and self._plain_observed
        self._clock = clock
        self._wall_clock = wall_clock  # each record's ``time``; ``clock`` times its duration
        self._in_flight: dict[tuple[bool, object], InFlight] = {}
        self._reused: dict[tuple[bool, object], deque[InFlight]] = {}
        self._server_requests: dict[tuple[bool, object], InFlight] = {}  # observed only, bounded by the peer
        self._opaque_logged: set[To] = set()
        # Events of answers a fault holds back, written when the client gets them (or cancels first).
        self._held_events: dict[tuple[bool, object], HeldEvent] = {}
        # Per thread: the events of the lines being handled, written once the transport has written
        # their bytes (``defer_events``), so an answer the client never got is not recorded as received.
        # Without an events sink nothing is ever held: such cores share one that stays empty (an HTTP
        # proxy makes a core for each request outside a session).
        self._deferred = threading.local() if events is not None else _NOTHING_DEFERRED
        # The server's restarts so far, when a supervisor restarts it (None: a server that is not).
        self.generation: int | None = None
        # The transport holds an answer a process fault loses, and performs its at_answer (see
        # ProcessBehaviour.answer_lost); without it the answer goes out and the fault acts on its timer.
        self.holds_lost_answers = False
        # The client's handshake, kept to replay to a restarted server (2025-11-25 era).
        self._initialize: dict[str, Any] | None = None
        self._initialized: bytes | None = None
        self._replay_id: str | None = None  # the replayed initialize, whose answer is the proxy's own
        # The keys of a 2026-07-28 input_required result's inputRequests -> their methods, until the retry
        # answers them (bounded: a server may ask and never hear back).
        self._input_methods: dict[str, str] = {}
        # Answers a lane let through whose spans end once the transport has written them (end_passed).
        self._passed: list[tuple[InFlight, PlainAnswer]] = []
        # The proxy's own tools/list, for rules that match on annotations (proxy/tool_listing.py).
        self._listing = ToolListing()
        self._handshake_done = False  # the client sent notifications/initialized (2025-11-25 era)
        # Stdio: the core sends its listing among the lines it relays and holds requests for it. HTTP:
        # the transport sends it before a request (``listing_due``), as a POST of its own.
        self.lists_in_band = True
        self._listing_stale = False  # out of band: the server said its tools changed since the last listing

    @property
    def observers(self) -> tuple[RequestObserver, ...]:
        return self._observers

    # -- the requests in flight ----------------------------------------------------------------

    def _track(self, pending: InFlight) -> None:
        key = jsonrpc.id_key(pending.body["id"])
        if key in self._in_flight:
            # A client reusing an id while the first is in flight: answers are matched in order.
            self._reused.setdefault(key, deque()).append(pending)
        else:
            self._in_flight[key] = pending

    def _untrack(self, key: tuple[bool, object]) -> InFlight | None:
        pending = self._in_flight.pop(key, None)
        queued = self._reused.get(key)
        if queued:
            self._in_flight[key] = queued.popleft()
            if not queued:
                del self._reused[key]
        return pending

    def _take_waiting(self) -> list[InFlight]:
        waiting = [*self._in_flight.values(), *(p for queue in self._reused.values() for p in queue)]
        self._in_flight.clear()
        self._reused.clear()
        waiting.sort(key=lambda p: p.started)
        return waiting

    @property
    def in_flight(self) -> int:
        return len(self._in_flight) + sum(len(q) for q in self._reused.values())

    # -- counts -------------------------------------------------------------------------------

    def _count_request(self, method: str, params: object) -> None:
        stats = self.stats
        stats.requests[method] += 1
        if method == "server/discover" or (
            params.__class__ is dict
            and (meta := params.get("_meta")).__class__ is dict
            and META_PROTOCOL_VERSION in meta
        ):
            stats.modern_requests += 1

    def _opaque(self, to: To, line: bytes, why: str) -> None:
        direction = "client->server" if to is To.SERVER else "server->client"
        self.stats.opaque[direction] += 1
        if to not in self._opaque_logged:
            self._opaque_logged.add(to)
            log.warning(
                "relaying a line the fault engine cannot parse; it is never faulted (logged once per direction)",
                direction=direction,
                reason=why,
                size_bytes=len(line),
            )
