"""The proxy's protocol logic, free of I/O (sans-IO, as h11 is for HTTP).

A transport feeds it lines from each side and performs the ``Emit``s it returns: where the bytes
go and how long to hold them. The core tracks requests in flight, asks the engine what to do,
applies response transformations, learns the protocol era, and writes one event per request to the
sink the transport gives it, stamped by the clocks it is given. Lines the engine leaves alone are
returned as the very same bytes object.

``ProxyCore`` is built in layers, one module each (see ``core_state.py``); this one adds the end of
requests the server will never answer: its exit, its restart, and a transport giving up on one. The
value types live in ``core_types.py`` and are imported from here as before.
"""

from __future__ import annotations

from typing import Any

from mcpfault.faults.base import Delivery
from mcpfault.protocol import jsonrpc
from mcpfault.protocol.eras import Era
from mcpfault.proxy.core_flow import CoreFlow
from mcpfault.proxy.core_types import (
    DeferringObserver,
    Emit,
    Finished,
    InFlight,
    PlainAnswer,
    RequestObserver,
    Stats,
    To,
    classify,
)
from mcpfault.proxy.replies import server_gone_reply
from mcpfault.telemetry.names import Received

__all__ = [
    "DeferringObserver",
    "Emit",
    "Finished",
    "InFlight",
    "PlainAnswer",
    "ProxyCore",
    "RequestObserver",
    "Stats",
    "To",
    "classify",
]

# Endings a transport reports through ``end()`` the moment it holds the upstream's answer (a status
# it relays, a body it cannot use): the answer arrived then. Any other ``end()`` had no answer to time.
_ENDED_ON_ARRIVAL: frozenset[Received] = frozenset({"http_error", "error"})


class ProxyCore(CoreFlow):
    # -- the end ------------------------------------------------------------------------------

    def upstream_exited(self, exit_code: int, *, stopping: str | None = None) -> list[Emit]:
        """Answer every request the server never answered: no answer will ever come.

        Responses a fault dropped stay lost; the client's EOF follows right after. ``stopping``: the
        signal that ended the proxy (and, passed on, the server), for the answers to say so.
        """
        self.stats.upstream_exit_code = exit_code
        self._abandon_listing()
        for observer in self._observers:
            observer.upstream_exited(exit_code)
        for held in list(self._held_events.values()):  # answers held back go out now, as the transport ends
            self._write_event(held.record, held.started)
        self._held_events.clear()
        for unanswered in self._server_requests.values():
            self._record(unanswered, Delivery(None), upstream_contacted=True, received="upstream_exited", event=False)
        self._server_requests.clear()
        emits = self._answer_waiting(exit_code, None, stopping)
        self.stats.unanswered_at_exit = len(emits)
        return emits

    # -- a supervised server: restarts --------------------------------------------------------------

    def server_restarting(self, exit_status: int, generation: int) -> list[Emit]:
        """The server died and is restarting as ``generation``: answer what it never answered, saying so."""
        if self._replay_id is not None:
            self._replay_id = None  # a replay the dead server never answered: the next one replaces it
        self._abandon_listing()
        return self._answer_waiting(exit_status, generation)

    def _answer_waiting(self, exit_status: int, restarted_as: int | None, stopping: str | None = None) -> list[Emit]:
        """The proxy's own answers to the requests in flight, oldest first: the server is gone, or
        restarting as ``restarted_as``."""
        emits = []
        for pending in self._take_waiting():
            call = pending.call
            reply, received = server_gone_reply(
                call.request_id,
                exit_status=exit_status,
                restarted_as=restarted_as,
                before=f"answering {call.method}",
                stopping=stopping,
            )
            contacted = pending.decision.contacts_upstream  # false for a request a crash kept from the server
            self._record(pending, Delivery(reply), upstream_contacted=contacted, received=received)
            emits.append(Emit(To.CLIENT, reply))
        return emits

    def replay_handshake(self, generation: int) -> list[bytes]:
        """What to send a restarted server so that the client's 2025-11-25 session simply continues:
        its initialize (under an id of the proxy's own, its answer dropped), then, once answered, its
        ``notifications/initialized``. Nothing for the 2026-07-28 era, which is stateless."""
        if self.era.era is not Era.LEGACY or self._initialize is None:
            return []
        self._replay_id = f"mcpfault-replay-{generation}"
        return [jsonrpc.encode({**self._initialize, "id": self._replay_id})]

    @property
    def replaying(self) -> bool:
        """A replayed initialize is waiting for the restarted server's answer."""
        return self._replay_id is not None

    # -- a transport giving up on one request ---------------------------------------------------

    def end(
        self,
        request_id: Any,
        received: Received,
        *,
        reply: bytes | None = None,
        error_code: int | None = None,
        upstream_contacted: bool = True,
    ) -> bool:
        """End one request the transport gave up on: the stream was cut, the client left, the upstream
        could not be reached (``reply``: what the client gets instead). False when it was not in flight.

        ``http_error`` and ``error`` are reported as the upstream's answer arrives, so the proxy's share
        is timed from now; after any other ending no answer crossed the proxy and it is not timed.
        """
        if not jsonrpc.valid_id(request_id):
            return False
        pending = self._untrack(jsonrpc.id_key(request_id))
        if pending is None:
            # The answer may be on its way, held back by a fault: a client leaving now never gets it.
            return received == "cancelled" and self._release_held(request_id, cancelled=True)
        arrived = self._clock() if self._observers and received in _ENDED_ON_ARRIVAL else None
        self._record(
            pending,
            Delivery(reply),
            upstream_contacted=upstream_contacted,
            received=received,
            error_code=error_code,
            arrived=arrived,
        )
        return True
