"""What the proxy tells the world about each request: an OpenTelemetry span, and Prometheus metrics.

Spans come from ``SpanRecorder`` (telemetry/fastspans.py), not the SDK: the SDK cost ~100 us a request.

Both are ``RequestObserver``s of the core. The span's parent is the context the client put in
``params._meta``; the proxy puts its own span's context there on the way upstream, so the server's
spans nest under it (``--no-propagate`` keeps the bytes as they were). How each span ends is built
on the span writer's thread, by ``SpanEndings`` (proxy/span_endings.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.trace import SpanKind

from mcpfault.faults.base import Call
from mcpfault.faults.engine import Decision
from mcpfault.protocol import jsonrpc
from mcpfault.proxy.core import Finished, InFlight, PlainAnswer, classify
from mcpfault.proxy.process.supervisor import ServerObserver
from mcpfault.proxy.span_endings import Annotate, Clock, EndingFields, PlainEnding, SpanEndings, plain_finished
from mcpfault.telemetry import names
from mcpfault.telemetry.current_span import CURRENT_SPAN
from mcpfault.telemetry.fastspans import Root, RootEnding, SpanHandle, SpanRecorder, root_handle
from mcpfault.telemetry.metrics import ProxyMetrics
from mcpfault.telemetry.names import Received
from mcpfault.telemetry.otlp_json import KIND_TO_OTLP
from mcpfault.telemetry.propagation import parse_traceparent
from mcpfault.telemetry.span_json import SharedAttributes

_new_tuple = tuple.__new__
_SERVER = KIND_TO_OTLP[SpanKind.SERVER]
_CLIENT = KIND_TO_OTLP[SpanKind.CLIENT]


class TelemetryObserver(ServerObserver):
    """A span per request (when there is a recorder) and the request metrics (when there is a registry);
    the supervised server's restarts, crashes and downtime (metrics)."""

    def __init__(
        self,
        recorder: SpanRecorder | None,
        metrics: ProxyMetrics | None,
        *,
        transport: str = names.NETWORK_TRANSPORT_PIPE,
        attributes: Mapping[str, Any] | None = None,
        propagate: bool = True,
        session_id: str | None = None,
        annotate: Annotate | None = None,
        client_spans: bool = False,
    ) -> None:
        self._recorder = recorder
        # The leg to the upstream as a CLIENT span (client -> proxy SERVER -> proxy CLIENT -> server, as
        # Envoy's traces read), whose id the upstream request carries as its parent.
        self._client_spans = client_spans
        # With spans, plain requests are taken as raw data, built into spans (and observed by the
        # histograms) on the writer thread (proxy.core.DeferringObserver): most of tracing's cost is
        # off the request's path. A span the full queue drops loses its histogram observation too.
        # With metrics alone they are taken as raw data too (the lanes), and counted as they end.
        self.defers = recorder is not None or metrics is not None
        self._annotate = annotate  # more for each span from another observer (the side-effect probe)
        self._propagates = propagate  # False for OTEL_PROPAGATORS=none
        self._metrics = metrics
        self._transport = transport
        # Fixed for every span of this observer: the upstream's address, an HTTP session's id.
        self._attributes = dict(attributes) if attributes else None
        self._clock = Clock()
        # The root spans the recorder draws ahead, each with the bytes that put its traceparent in a
        # request's params (``jsonrpc.with_params_meta``); forward_plain takes them straight from its list.
        self._roots: list[Root] = []
        if recorder is not None:
            recorder.keep_root_context(*jsonrpc.params_with_meta_parts("traceparent"))
            self._roots = recorder.roots
        # Lean: nothing but the span and the metrics needs a request's handle (no annotations, no
        # CLIENT span), so a plain request's root stays as it was drawn (a token of plain values) and
        # its span is made whole, and its histograms observed, on the span writer's thread
        # (SpanEndings.plain_root).
        self._lean = recorder is not None and annotate is None and not client_spans
        # The attributes every span of a direction starts with: built once, shared, never mutated.
        fixed = self._attributes or {}
        self._from_client = SharedAttributes(
            {names.NETWORK_TRANSPORT: transport, names.DIRECTION: names.DIRECTION_CLIENT_TO_SERVER, **fixed}
        )
        self._from_server = SharedAttributes(
            {names.NETWORK_TRANSPORT: transport, names.DIRECTION: names.DIRECTION_SERVER_TO_CLIENT, **fixed}
        )
        # How the spans end, built on the span writer's thread (session_id: for 2025-11-25 traffic only).
        self._spans = SpanEndings(
            self._clock,
            metrics,
            self._from_server,
            from_client=self._from_client,
            session_id=session_id,
            annotate=annotate,
        )
        self._plain = self._spans.plain  # bound once: answered_plain runs on the request's thread
        self._plain_root = self._spans.plain_root
        self._derive_root = self._root_ending  # bound once: one object shared by the endings waiting
        self._on_root_dropped = self._root_dropped if metrics is not None else None
        self._upstream = SharedAttributes({names.NETWORK_TRANSPORT: transport, **fixed})  # the CLIENT spans' start

    def started(
        self, call: Call, decision: Decision, started: float, *, from_server: bool = False
    ) -> SpanHandle | None:
        if self._metrics is not None:
            self._metrics.request_started()
        if self._recorder is None:
            return None
        # Only what the span's identity needs is done here; its attributes are built on the span
        # writer's thread when it ends (``SpanEndings.ending``), off the request's path.
        meta = call.params.get("_meta")
        traceparent = tracestate = None
        if isinstance(meta, dict):
            traceparent, tracestate = meta.get("traceparent"), meta.get("tracestate")
        return self._recorder.start(
            "",  # named by _ending, on the span writer's thread
            _SERVER,
            traceparent,
            self._from_server if from_server else self._from_client,
            self._clock.unix_ns(started),
            tracestate=tracestate,
        )

    def forward_plain(
        self, line: bytes, body: dict[str, Any], started: float, propagate: bool
    ) -> tuple[SpanHandle | Root | None, bytes | None]:
        """``started`` for a request no rule cares about, and its line on the way upstream (with this
        span's ``traceparent`` when ``propagate``), in one step; None for the line leaves the edit to
        the core's general one (``ProxyCore._with_context_line``). The token is a handle, or when the
        observer is lean a root as it was drawn (``Root``), made a span on the span writer's thread."""
        params = body.get("params")
        if (
            self._lean
            and params.__class__ is dict
            and (
                "_meta" not in params
                or (meta := params["_meta"]).__class__ is not dict
                or ("traceparent" not in meta and "tracestate" not in meta)
            )
        ):
            # A new trace, the usual case, in as few steps as it takes (this path runs cache-cold after
            # every wake-up, where each step costs): a root the recorder drew ahead with the bytes of
            # its traceparent, and the edit; no handle, no start time (the request's own, in the
            # core's InFlight, serves).
            if self._metrics is not None:
                self._metrics.request_started()
            try:
                root = self._roots.pop()
            except IndexError:  # drawn faster than the writer draws: its own, then
                assert self._recorder is not None
                root = self._recorder.new_root()
            # Not made the current span for log lines, as start_root's are: nothing logs while a lane
            # carries the request, and its ids would only name it on later lines of other work. A
            # span that was current is no longer (cheaply: the variable's read is cached).
            if CURRENT_SPAN.get() is not None:
                CURRENT_SPAN.set(None)
            if not propagate or not self._propagates:
                return root, line
            upstream = jsonrpc.with_params_meta(line, params, root[2])
            if upstream is None:
                upstream = jsonrpc.with_plain_meta_string(line, params, "traceparent", _traceparent(root))
            return root, upstream
        recorder = self._recorder
        if self._metrics is not None:
            self._metrics.request_started()
        if recorder is None:  # metrics alone: the request crosses as it came, and is counted as it ends
            return None, line
        meta = params.get("_meta") if params.__class__ is dict else None
        span: SpanHandle | Root
        if meta.__class__ is dict and ("traceparent" in meta or "tracestate" in meta):
            traceparent, tracestate = meta.get("traceparent"), meta.get("tracestate")
            started_ns = self._clock.unix_ns(started)
            maybe = recorder.start("", _SERVER, traceparent, self._from_client, started_ns, tracestate=tracestate)
            if maybe is None:
                return None, line  # an unsampled client context: the request crosses as it came
            span = maybe
        else:
            span = recorder.start_root("", _SERVER, self._from_client, self._clock.unix_ns(started))
        if not propagate or not self._propagates:
            return span, line
        if self._client_spans:
            return span, None
        return span, jsonrpc.with_plain_meta_string(line, params, "traceparent", span.traceparent())

    def answered_plain(self, pending: InFlight, answer: PlainAnswer) -> None:
        span = pending.tokens[0]
        metrics = self._metrics
        if span.__class__ is tuple:  # a lean observer's root as it was drawn: made a span on the writer's thread
            if metrics is not None:
                metrics.request_finished()
            if span[4]:  # recorded: its histograms are observed as its span is built
                recorder = self._recorder
                assert recorder is not None
                recorder.end_root_soon(self._derive_root, (pending, answer, span))
            elif metrics is not None:  # sampled out: no span, counted here
                self._count(plain_finished(pending, answer), None)
            return
        if span.__class__ is SpanHandle and span.recording:
            recorder = self._recorder
            assert recorder is not None
            if self._annotate is None and span.tracestate is None:
                # Only what the span's ending needs waits for the writer, not the parsed request and
                # answer: holding hundreds of requests' dicts cost as much as the whole span path
                # (measured: +14 us of added p50, and a sixth of the pipelined rate).
                ending = self._plain_ending_of(pending, answer)
                queued = recorder.end_later(span, self._plain, ending)
                if span.client_span_id is not None:
                    recorder.end_later(self._leg(span, pending.started), self._spans.plain_client, ending)
            else:
                queued = recorder.end_later(span, self._spans.full_plain, (pending, answer))
                if span.client_span_id is not None:
                    leg = self._leg(span, pending.started)
                    recorder.end_later(leg, self._spans.full_plain_client, (pending, answer))
            if metrics is not None and queued:
                metrics.request_finished()  # the histograms are observed as the span is built
            elif metrics is not None:  # dropped on a full queue: counted here, its exemplar not our lost span
                self._count(plain_finished(pending, answer), None)
        elif metrics is not None:
            self._count(plain_finished(pending, answer), span)

    @staticmethod
    def _ending_fields(pending: InFlight, answer: PlainAnswer, root: Root | None = None) -> EndingFields:
        """A plain request's ``PlainEnding``, as a plain tuple (see ``EndingFields``)."""
        body = pending.body
        method = body["method"]
        request_id = body.get("id")
        target = None
        if method == "tools/call":  # the key's target, as _ending takes it from Call.target
            params = body.get("params")
            name = params.get("name") if params.__class__ is dict else None
            target = name if name.__class__ is str else None
        answered = answer.body
        result = answered.get("result")
        if result.__class__ is dict and "error" not in answered and answered.get("id") == request_id:
            # classify's usual answer, without the call: this runs for every traced request.
            received: Received = "tool_error" if result.get("isError") is True else "response"
            error_code = None
        else:
            received, error_code = classify(answer.line, request_id, answered)
        return (
            method,
            target,
            request_id,
            received,
            error_code,
            pending.started,
            answer.now,
            pending.handled_s + (answer.now - answer.arrived),
            answer.protocol_version,
            answer.generation,
            root,
        )

    def _root_ending(self, item: tuple[InFlight, PlainAnswer, Root]) -> RootEnding:
        """How a lean observer's plain request ends (``SpanRecorder.end_root_soon``)."""
        return self._plain_root, self._ending_fields(*item), self._on_root_dropped

    def _root_dropped(self, fields: EndingFields) -> None:
        """A lean observer's span the full queue dropped: its request is counted all the same, as
        ``plain_root`` would have (its exemplar is not the lost span's trace)."""
        assert self._metrics is not None
        method, started, finished, added_s = fields[0], fields[5], fields[6], fields[7]
        self._metrics.observe_request(method, None, finished - started, added_s)

    @classmethod
    def _plain_ending_of(cls, pending: InFlight, answer: PlainAnswer) -> PlainEnding:
        # tuple.__new__ rather than the NamedTuple's own __new__, a Python function of eleven
        # arguments: the same tuple, ~0.3 us sooner on the request's thread.
        return _new_tuple(PlainEnding, cls._ending_fields(pending, answer))

    def propagate(self, token: Any, meta: dict[str, Any]) -> bool:
        # Only traceparent changes: the client's tracestate and baggage pass through as they were.
        if token.__class__ is tuple and self._propagates:  # a root as it was drawn (forward_plain)
            meta["traceparent"] = _traceparent(token)
            return True
        if not isinstance(token, SpanHandle) or not self._propagates:
            return False
        if self._client_spans and token.recording:
            assert self._recorder is not None
            client_span_id = token.client_span_id = self._recorder.new_span_id()
            meta["traceparent"] = f"00-{token.trace_id}-{client_span_id}-{token.flags}"
        else:
            meta["traceparent"] = token.traceparent()
        return True

    def finished(self, token: Any, outcome: Finished) -> None:
        if token.__class__ is tuple:  # a root as it was drawn (forward_plain), ended the general way
            token = root_handle(token, "", _SERVER, self._from_client, self._clock.unix_ns(outcome.started))
        span = token if isinstance(token, SpanHandle) else None
        if self._metrics is not None:
            self._count(outcome, span)
        if span is not None:
            recorder = self._recorder
            assert recorder is not None
            recorder.end_later(span, self._spans.ending, outcome)
            if span.client_span_id is not None:  # its context went upstream: the leg is a CLIENT span
                recorder.end_later(self._leg(span, outcome.started), self._spans.client_ending, outcome)

    def _leg(self, span: SpanHandle, started: float) -> SpanHandle:
        """The CLIENT span of ``span``'s leg upstream."""
        assert span.client_span_id is not None
        return SpanHandle(
            span.trace_id,
            span.client_span_id,
            span.span_id,
            span.flags,
            span.tracestate,
            "",
            _CLIENT,
            self._upstream,
            self._clock.unix_ns(started),
        )

    def upstream_exited(self, exit_code: int) -> None:
        if self._metrics is not None:
            self._metrics.upstream_exited()

    def server_crashed(self, cause: str, exit_status: int) -> None:
        if self._metrics is not None:
            self._metrics.server_crashed(cause)

    def server_restarted(self, generation: int) -> None:
        if self._metrics is not None:
            self._metrics.server_restarted()

    def server_back(self, downtime_s: float) -> None:
        if self._metrics is not None:
            self._metrics.server_downtime(downtime_s)

    def _count(self, outcome: Finished, span: SpanHandle | None) -> None:
        assert self._metrics is not None
        self._metrics.request_finished()
        # An exemplar points at a trace someone recorded: ours, else the client's (when sampled).
        if span is not None:
            trace_id: str | None = span.trace_id if span.recording else None
        else:
            meta = outcome.call.params.get("_meta")
            parent = parse_traceparent(meta.get("traceparent")) if isinstance(meta, dict) else None
            trace_id = parent.trace_id if parent is not None and parent.sampled else None
        first = outcome.decision.applied[0].type_name if outcome.decision.applied else None
        duration_s = outcome.finished - outcome.started + outcome.delay_s
        self._metrics.observe_request(outcome.call.method, first, duration_s, outcome.added_s, trace_id)
        for applied in outcome.decision.applied:
            self._metrics.fault_injected(applied.type_name, applied.mode, trace_id)


def _traceparent(root: Root) -> str:
    """The W3C ``traceparent`` naming a root as it was drawn (``SpanHandle.traceparent``'s)."""
    return f"00-{root[0]}-{root[1]}-{root[3]}"


def fault_label_sets(types: Iterable[Any]) -> tuple[list[str], list[str]]:
    """Allowed Prometheus label values: the catalog's fault types and every mode they report."""
    kinds = list(types)
    return [k.type_name for k in kinds], sorted({m for k in kinds for m in k.MODES})
