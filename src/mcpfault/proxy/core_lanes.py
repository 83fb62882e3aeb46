"""The core's lanes: a line nothing can happen to, in as few steps as it takes.

A request no rule cares about, while no observer needs more than its raw data, and its answer while
nothing records or watches answers, go through here: counted and tracked, never parsed into a
``Call``. ``_untouched_request`` and ``_untouched_answer`` are the one test of "nothing can happen to
this line"; the full path (``core_flow.py``) asks them too, and takes the same shortcut when they say so.
"""

from __future__ import annotations

from typing import Any

import orjson

from mcpfault.faults.engine import PASS
from mcpfault.protocol import jsonrpc
from mcpfault.protocol.eras import HANDSHAKE_METHODS, Era
from mcpfault.proxy.core_context import with_context_line
from mcpfault.proxy.core_server_requests import CoreServerRequests
from mcpfault.proxy.core_types import InFlight, PlainAnswer

_new_tuple = tuple.__new__


class CoreLanes(CoreServerRequests):
    @property
    def has_lanes(self) -> bool:
        """Whether ``lane_from_client`` and ``lane_from_server`` can take a line at all (not with
        observers other than one deferring span recorder)."""
        return self._plain_observed

    def _untouched_request(self, method: str) -> bool:
        """Nothing can happen to a request for ``method`` on its way: no rule cares about it (read per
        request: rules change at run time), and the observers leave it to the lanes."""
        return self._plain_observed and not self.engine.cares_about(method)

    def _untouched_answer(self, pending: InFlight) -> bool:
        """Nothing can happen to the answer to ``pending``: nothing happened to the request, and no
        record, observer or rule watches answers."""
        return pending.decision is PASS and self._answers_pass and not self.engine.wants_responses

    def lane_from_client(self, line: bytes) -> bytes | None:
        """The common case in as few steps as it takes: when ``line`` is one request nothing can
        happen to on its way, it is counted and tracked here, and this returns what the transport
        sends the server (the line, or with spans the line carrying their context). None: nothing
        was done, and ``from_client`` decides. A lane of its own because it runs cache-cold after
        every wake-up, where each call and object costs microseconds."""
        if self._input_methods or self.era.era is Era.UNKNOWN:
            return None
        try:
            body = orjson.loads(line)
        except (orjson.JSONDecodeError, RecursionError):  # as jsonrpc.parse
            return None
        if body.__class__ is not dict or body.get("id").__class__ not in jsonrpc.PLAIN_IDS:
            return None
        method = body.get("method")
        if method.__class__ is not str or method in HANDSHAKE_METHODS or not self._untouched_request(method):
            return None
        self._count_request(method, body.get("params"))
        return self._pass_request(line, body)

    def _pass_request(self, line: bytes, body: dict[str, Any]) -> bytes:
        """Track a request nothing can happen to; what goes to the server."""
        deferring = self._deferring
        if deferring is None:
            self._track(InFlight(body, PASS, self._clock()))
            return line
        # Traced: the span's ids now (they go upstream), the rest on the span writer's thread.
        started = self._clock()
        token, upstream = deferring.forward_plain(line, body, started, self._propagate)
        tokens = (token,)
        if upstream is None:
            upstream = with_context_line(self._observers, line, body, tokens)
        # tuple.__new__, not the NamedTuple's Python __new__: the same tuple, a call fewer per request.
        self._track(_new_tuple(InFlight, (body, PASS, started, tokens, self._clock() - started, None)))
        return upstream

    def lane_from_server(self, line: bytes) -> bytes | None:
        """When ``line`` answers a request that went through untouched, and nothing watches answers,
        the request is done with here, and this returns the line for the transport to send the
        client. None: nothing was done, and ``from_server`` decides."""
        arrived = self._clock() if self._deferring is not None else None
        if not self._answers_pass or self._replay_id is not None or b'"input_required"' in line:
            return None
        try:
            body = orjson.loads(line)
        except (orjson.JSONDecodeError, RecursionError):  # as jsonrpc.parse
            return None
        if body.__class__ is not dict or "method" in body or ("result" not in body and "error" not in body):
            return None
        request_id = body.get("id")
        if request_id.__class__ not in jsonrpc.PLAIN_IDS:
            return None
        key = jsonrpc.id_key(request_id)
        pending = self._in_flight.get(key)
        if pending is None or key in self._reused or not self._untouched_answer(pending):
            return None
        del self._in_flight[key]
        self._pass_answer(pending, line, body, arrived, later=True)
        return line

    def _pass_answer(
        self, pending: InFlight, line: bytes, body: dict[str, Any], arrived: float | None, *, later: bool = False
    ) -> None:
        """The end of a request nothing happened to, and nothing watches answers. ``later``: its span
        ends in ``end_passed``, after the transport has written the answer."""
        method = pending.body["method"]
        if method in HANDSHAKE_METHODS:
            self.era.observe_handshake_result(method, body.get("result"))
        deferring = self._deferring
        if deferring is not None:
            # tuple.__new__, not the NamedTuple's Python __new__: the same tuple, a call fewer per request.
            answer = _new_tuple(
                PlainAnswer, (line, body, arrived or 0.0, self._clock(), self.era.protocol_version, self.generation)
            )
            if later:
                self._passed.append((pending, answer))
            else:
                deferring.answered_plain(pending, answer)

    def end_passed(self) -> None:
        """End the requests whose answers ``lane_from_server`` let through, once the transport has
        written them: the client need not wait for their spans and metrics. Called by the thread that
        called the lane, with or without the core's lock (the observer's ending does not need it)."""
        passed = self._passed
        if passed:
            deferring = self._deferring
            assert deferring is not None
            self._passed = []
            answered = deferring.answered_plain
            for pending, answer in passed:
                answered(pending, answer)
