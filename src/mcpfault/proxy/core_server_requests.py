"""What the server asks of the client, and the notifications a rule may act on, in the core.

A server's requests (sampling, elicitation, roots) are observed and decided as they pass; the
``server_to_client`` rules act on the client's answer when it comes, and, in the 2026-07-28 era, on
the answers a client's retry carries in its ``inputResponses``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcpfault.faults.base import Call, Delivery, load_object
from mcpfault.faults.engine import PASS
from mcpfault.protocol import jsonrpc
from mcpfault.proxy.core_records import CoreRecords
from mcpfault.proxy.core_types import Emit, InFlight, To, classify
from mcpfault.telemetry.names import Received

# Server-to-client requests waiting for the client's answer, kept for their spans only.
MAX_OBSERVED_SERVER_REQUESTS = 4096


class CoreServerRequests(CoreRecords):
    def _server_request(self, body: dict[str, Any] | None) -> None:
        """A request from the server to the client (sampling, elicitation, roots): observed, and decided
        by the engine, whose ``server_to_client`` rules act on the client's answer when it comes."""
        assert body is not None
        call = Call.from_body(body)
        method = call.method
        acts = self.engine.acts_on(method)
        decision = self.engine.decide(call, self._clock() - self.epoch, with_changes=False) if acts else PASS
        for applied in decision.applied:
            self.stats.faults[(applied.rule, applied.type_name, applied.mode)] += 1
        started = self._clock()
        tokens = tuple(o.started(call, decision, started, from_server=True) for o in self._observers)
        if len(self._server_requests) >= MAX_OBSERVED_SERVER_REQUESTS:
            # A server that never hears back must not grow our memory: the oldest is given up.
            oldest = self._server_requests.pop(next(iter(self._server_requests)))
            self._record(oldest, Delivery(None), upstream_contacted=True, received="nothing", event=False)
        key = jsonrpc.id_key(body["id"])
        reused = self._server_requests.pop(key, None)
        if reused is not None:  # the server reused an id still waiting: the answer goes to the newer one
            self._record(reused, Delivery(None), upstream_contacted=True, received="nothing", event=False)
        self._server_requests[key] = InFlight(body, decision, started, tokens, parsed=call)

    def _server_request_answered(self, body: dict[str, Any] | None, line: bytes) -> list[Emit]:
        """The client's answer to a server request: relayed, or what a fault makes of it (lost, late, an
        error in its place, corrupted); the event says what the server received."""
        assert body is not None
        pending = self._server_requests.pop(jsonrpc.id_key(body["id"]), None)
        if pending is None:
            return [Emit(To.SERVER, line)]
        arrived = self._clock()  # the client's answer is the response here
        decision = pending.decision
        if not decision.applied:
            self._record(pending, Delivery(None), upstream_contacted=True, body=body, event=False, arrived=arrived)
            return [Emit(To.SERVER, line)]
        answer = jsonrpc.encode(dict(decision.reply)) if decision.reply is not None else line
        delivery = decision.deliver(answer)
        # Written now, the delay in it: a held answer's release is keyed by the client's request ids.
        self._record(pending, delivery, upstream_contacted=True, arrived=arrived, hold=False)
        return [] if delivery.data is None else [Emit(To.SERVER, delivery.data, delivery.delay_s)]

    def _notification(self, body: dict[str, Any] | None, line: bytes, to: To) -> list[Emit]:
        """A notification a rule may act on (lose, hold back, send twice); its event says what became of it."""
        assert body is not None
        call = Call.from_body(body)
        decision = self.engine.decide(call, self._clock() - self.epoch, with_changes=False)
        if not decision.applied:
            return [Emit(to, line)]
        delivery = decision.deliver(line)
        first = decision.applied[0]
        self.stats.faults[(first.rule, first.type_name, first.mode)] += 1
        received: Received = "nothing" if delivery.data is None else "notification"
        self.stats.received[received] += 1
        if self._events is not None:
            # A notification from the server came from it: upstream_contacted.
            record = self._new_record(
                None, call.method, None, first, upstream_contacted=to is To.CLIENT, modified=False, received=received
            )
            if delivery.delay_s:
                record["delay_s"] = round(delivery.delay_s, 6)
            self._write_event(record, self._clock())
        if delivery.data is None:
            return []
        # One message per line (a duplicate is two); without the newline when the transport gave none (HTTP).
        framed = line.endswith(b"\n")
        parts = [p if framed else p.rstrip(b"\r\n") for p in delivery.data.splitlines(keepends=True)]
        return [Emit(to, part, delivery.delay_s) for part in parts]

    def _learn_input_requests(self, body: Mapping[str, Any]) -> None:
        result = body.get("result")
        if not isinstance(result, Mapping) or result.get("resultType") != "input_required":
            return
        asked = result.get("inputRequests")
        if not isinstance(asked, Mapping):
            return
        for key, request in asked.items():
            method = request.get("method") if isinstance(request, Mapping) else None
            if isinstance(key, str) and isinstance(method, str):
                if len(self._input_methods) >= MAX_OBSERVED_SERVER_REQUESTS:
                    self._input_methods.pop(next(iter(self._input_methods)))
                self._input_methods[key] = method

    def _fault_input_responses(self, line: bytes) -> tuple[bytes, float]:
        """The retry with what the rules make of each answer in its inputResponses (an answer lost is
        left out; a corrupted one replaced; an error in its place), and how long to hold the retry."""
        body = load_object(line)
        params = body.get("params") if body is not None else None
        responses = params.get("inputResponses") if isinstance(params, dict) else None
        if body is None or not isinstance(params, dict) or not isinstance(responses, dict):
            return line, 0.0
        out, held_s = dict(responses), 0.0
        for key, entry in responses.items():
            method = self._input_methods.pop(key, None) if isinstance(key, str) else None
            if method is None:
                continue
            asked = {"jsonrpc": "2.0", "id": key, "method": method, "params": {}}
            decision = self.engine.decide(Call.from_body(asked), self._clock() - self.epoch, with_changes=False)
            if not decision.applied:
                continue
            answer = {"jsonrpc": "2.0", "id": key, "result": entry}
            delivery = decision.deliver(jsonrpc.encode(dict(decision.reply) if decision.reply is not None else answer))
            held_s = max(held_s, delivery.delay_s)
            delivered = load_object(delivery.data) if delivery.data is not None else None
            if delivery.data is None:
                del out[key]
            elif delivered is None:
                out[key] = delivery.data.decode("utf-8", "replace")  # what arrived was not JSON
            else:
                out[key] = delivered.get("result", delivered.get("error", {}))
            received, error_code = classify(delivery.data, key)
            first = decision.applied[0]
            self.stats.faults[(first.rule, first.type_name, first.mode)] += 1
            self.stats.received[received] += 1
            if self._events is not None:
                # client_received: what the server got for its input request.
                record = self._new_record(
                    key, method, None, first, upstream_contacted=True, modified=out.get(key) != entry, received=received
                )
                if error_code is not None:
                    record["error_code"] = error_code
                if delivery.delay_s:
                    record["delay_s"] = round(delivery.delay_s, 6)
                self._write_event(record, self._clock())
        if out == responses:
            return line, held_s
        return jsonrpc.encode({**body, "params": {**params, "inputResponses": out}}), held_s
