"""The core's records: how a request ends, for its observers and as one line of the events file.

A record is written once the client has its answer: an answer a fault holds back waits for its
delivery (or the client's cancel), and a transport may hold a thread's records until it has written
their bytes (``defer_events``), so that an answer the client never got is not recorded as received.
Each record's ``time`` comes from the core's wall clock and its duration from the core clock.
"""

from __future__ import annotations

from typing import Any

from mcpfault.faults.base import Call, Delivery
from mcpfault.faults.engine import Applied
from mcpfault.protocol import jsonrpc
from mcpfault.proxy.core_state import CoreState
from mcpfault.proxy.core_types import Finished, HeldEvent, InFlight, classify
from mcpfault.telemetry.names import Received

# Endings after which the proxy's own handling time means nothing: no answer was relayed.
# (What an HTTP fault gives the client in place of the answer is untimed too: see ``_record``.)
_UNTIMED: frozenset[Received] = frozenset({"upstream_exited", "server_restarted", "cancelled", "upstream_unreachable"})
# What a client got that was bytes written to it: when that write fails, it got nothing.
_SENT_TO_CLIENT: frozenset[Received] = frozenset(
    {"response", "error", "tool_error", "malformed", "upstream_exited", "server_restarted"}
)


class CoreRecords(CoreState):
    def _record(
        self,
        pending: InFlight,
        delivery: Delivery,
        *,
        upstream_contacted: bool,
        body: dict[str, Any] | None = None,
        received: Received | None = None,
        error_code: int | None = None,
        event: bool = True,
        arrived: float | None = None,
        hold: bool = True,
    ) -> None:
        """``arrived``: when the answer that ends the request reached the proxy (core clock); None when
        none did, so the proxy's share of an upstream round trip cannot be timed."""
        decision, call = pending.decision, pending.call
        if received is None and body is not None and delivery.data is None:
            received, error_code = classify(b"", call.request_id, body)  # the client's answer, already parsed
        elif received is None:
            received, error_code = classify(delivery.data, call.request_id, body)
        elif received in ("upstream_exited", "server_restarted"):
            error_code = jsonrpc.UPSTREAM_UNAVAILABLE
        delay_s = delivery.delay_s + decision.added_delay_s
        if decision.applied:
            self.stats.received[received] += 1
        if self._observers:
            self._finish_observed(
                pending,
                delivery,
                received=received,
                error_code=error_code,
                upstream_contacted=upstream_contacted,
                delay_s=delay_s,
                arrived=arrived,
            )
        if self._events is None or not event:
            return
        record = self._new_record(
            call.request_id,
            call.method,
            call.target if call.method == "tools/call" else None,
            decision.applied[0] if decision.applied else None,
            upstream_contacted=upstream_contacted,
            modified=decision.upstream_request is not None,
            received=received,
        )
        if self.generation is not None:
            record["server_generation"] = self.generation
        if len(decision.applied) > 1:
            record["faults"] = [{"rule": a.rule, "type": a.type_name, "mode": a.mode} for a in decision.applied]
        if error_code is not None:
            record["error_code"] = error_code
        if delivery.fields:
            record["fields"] = list(delivery.fields)
        if delay_s:
            record["delay_s"] = round(delay_s, 6)
        if hold and delay_s > 0 and delivery.data is not None and call.request_id is not None:
            # The client gets this answer only after the delay: the event waits for it (or for a cancel).
            key = jsonrpc.id_key(call.request_id)
            earlier = self._held_events.pop(key, None)
            if earlier is not None:  # a client reusing an id meanwhile: the older one is written as it stands
                self._write_event(earlier.record, earlier.started)
            self._held_events[key] = HeldEvent(record, pending.started, bool(decision.applied))
            return
        # An answer held back under a null id cannot be told apart when it goes out: its event is
        # written now, with the delay the client waits on top.
        self._write_event(record, pending.started, later_s=delay_s if delivery.data is not None else 0.0)

    def _finish_observed(
        self,
        pending: InFlight,
        delivery: Delivery,
        *,
        received: Received,
        error_code: int | None,
        upstream_contacted: bool,
        delay_s: float,
        arrived: float | None,
    ) -> None:
        """The request's ``Finished``, to each observer with its token."""
        decision = pending.decision
        now = self._clock()
        if received in _UNTIMED or (decision.http is not None and received == decision.http.received):
            added_s: float | None = None
        elif upstream_contacted:
            added_s = None if arrived is None else pending.handled_s + (now - arrived)
        else:
            added_s = now - pending.started
        outcome = Finished(
            pending.call,
            decision,
            pending.started,
            now,
            received,
            error_code,
            upstream_contacted,
            delay_s,
            self.era.protocol_version,
            added_s,
            self.generation,
            delivery.fields,
        )
        for observer, token in zip(self._observers, pending.tokens, strict=False):
            observer.finished(token, outcome)

    def _new_record(
        self,
        request_id: Any,
        method: str,
        tool: str | None,
        first: Applied | None,
        *,
        upstream_contacted: bool,
        modified: bool,
        received: Received,
    ) -> dict[str, Any]:
        """One line of the events file, its fields in the order every record has them."""
        return {
            "time": "",  # set as the record is written
            "request_id": request_id,
            "method": method,
            "tool": tool,
            "rule": first.rule if first else None,
            "fault_type": first.type_name if first else None,
            "fault_mode": first.mode if first else None,
            "upstream_contacted": upstream_contacted,
            "upstream_request_modified": modified,
            "client_received": received,
            "duration_s": 0.0,  # set as the record is written: the time until the client got its answer
            "era": self.era.era.value,
            "protocol_version": self.era.protocol_version,
        }

    @property
    def writes_events(self) -> bool:
        """Whether an events sink was given (a transport defers nothing otherwise)."""
        return self._events is not None

    def defer_events(self) -> None:
        """Hold this thread's event records until ``write_deferred_events``: the transport calls it
        before handling lines whose answers it writes after the core's lock is released."""
        if self._events is not None:
            self._deferred.records = []

    def write_deferred_events(self, undelivered: str | None = None) -> None:
        """Write this thread's held records. ``undelivered``: why the write to the client failed; each
        answer that was in it is recorded as ``client_received: nothing`` with that reason."""
        records: list[tuple[dict[str, Any], float, float]] | None = getattr(self._deferred, "records", None)
        self._deferred.records = None
        for record, started, later_s in records or ():
            if undelivered is not None and record.get("client_received") in _SENT_TO_CLIENT:
                self._mark_undelivered(record, undelivered)
            self._write_event(record, started, later_s=later_s)

    def _mark_undelivered(self, record: dict[str, Any], why: str) -> None:
        if record.get("fault_type") is not None:  # counted in Stats.received: the count moves with it
            self.stats.received[record["client_received"]] -= 1
            self.stats.received["nothing"] += 1
        record["client_received"] = "nothing"
        record["undelivered"] = why
        record.pop("error_code", None)

    def answer_delivered(self, request_id: Any) -> None:
        """The transport wrote an answer a fault held back (``Emit.answers``): its event is written now,
        with the time the client waited."""
        self._release_held(request_id, cancelled=False)

    def answer_undelivered(self, request_id: Any, why: str) -> None:
        """A held-back answer could not be written (the client stopped reading): its event says so."""
        if not self._held_events or not jsonrpc.valid_id(request_id):
            return
        held = self._held_events.pop(jsonrpc.id_key(request_id), None)
        if held is not None:
            self._mark_undelivered(held.record, why)
            self._write_event(held.record, held.started)

    def _release_held(self, request_id: Any, *, cancelled: bool) -> bool:
        if not self._held_events or not jsonrpc.valid_id(request_id):
            return False
        held = self._held_events.pop(jsonrpc.id_key(request_id), None)
        if held is None:
            return False
        record = held.record
        if cancelled:
            if held.faulted:
                self.stats.received[record["client_received"]] -= 1
                self.stats.received["cancelled"] += 1
            record["client_received"] = "cancelled"
            record.pop("error_code", None)
        self._write_event(record, held.started)
        return True

    def _write_event(self, record: dict[str, Any], started: float, *, later_s: float = 0.0) -> None:
        assert self._events is not None
        deferred = getattr(self._deferred, "records", None)
        if deferred is not None:
            deferred.append((record, started, later_s))
            return
        record["time"] = self._wall_clock().isoformat(timespec="milliseconds")
        record["duration_s"] = round(self._clock() - started + later_s, 6)
        self._events.write(record)


def held_id(call: Call, delivery: Delivery) -> Any:
    """The id a held-back answer's Emit carries (None when it is not held back, or has a null id)."""
    return call.request_id if delivery.delay_s > 0 else None
