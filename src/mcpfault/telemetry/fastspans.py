"""A minimal span recorder for the proxy's hot path: no OpenTelemetry SDK objects per span.

The SDK costs the proxy ~100 us per request (span start, attribute cleaning, events, the
propagators) plus ~30 us of encoding on its export thread, holding the GIL the relay needs. Here a
span is a handle made of a few ints and strings; ending it appends one tuple to a bounded deque. One
writer thread per recorder builds each span's ending, in batches; the lines are OTLP JSON, the same
format as ``OtlpJsonLinesExporter`` (``read_spans`` and ``mcpfault traces export`` read both), and,
when an endpoint is configured, the same JSON is converted to protobuf and POSTed over OTLP/HTTP.

With ``writer_process`` (the proxy's), the thread only builds compact records (most spans: a
template's number and the raw values of its slots) and ships them to a writer process
(``span_writer``), which fills the templates, joins, writes and exports, on a GIL of its own.
Measured (docs/results/performance.md, sixth pass): the thread's time a span went from 3.9-4.7 us
(build and encode) to 1.8-2.0 (build and ship), and the proxy's CPU a message by ~2.8 us.
The process starts once 512 spans have been written: a short-lived proxy, as each bench session's
is, writes its few spans itself, since the process's start-up (~50 ms of CPU) would cost it more than
the process saves. Otherwise (or when that process cannot start or dies) the thread writes the same
bytes itself.

Configuration follows ``configure_tracing``: the resource comes from the same code (so
``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` apply), everything else from ``otel_env``:
the endpoint (the argument or ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``), the exporter's protocol,
headers (sent, never logged), timeout, compression and TLS files, and the sampler
(``OTEL_TRACES_SAMPLER``/``_ARG``). A request the sampler leaves out gets no span at all: when the
client's own context is unsampled it crosses the proxy untouched; a new trace left out still gets
an unsampled ``traceparent`` upstream, so the server does not start recording it on its own.
"""

from __future__ import annotations

import collections
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson

# Nothing here imports the OpenTelemetry SDK, nor the API, nor the logging set-up: a process that
# records its spans with this alone (the mock server) starts ~75 ms of CPU sooner.
from mcpfault.telemetry import otel_env
from mcpfault.telemetry.current_span import CURRENT_SPAN
from mcpfault.telemetry.otlp_lines import LazyLogger, SpanLinesFile, encode_value, service_resource
from mcpfault.telemetry.span_json import EncodedAttributes, Event, Filled, json_span
from mcpfault.telemetry.span_writer import (
    Definition,
    LineSink,
    Record,
    WriterProcess,
    WriterSetup,
    encode_line,
    proxy_log_settings,
)
from mcpfault.telemetry.traceparent import parse_traceparent, valid_tracestate

if TYPE_CHECKING:
    from opentelemetry.trace import SpanKind

_log = LazyLogger(__name__)
_ZERO_TRACE: Final = "0" * 32
_ZERO_SPAN: Final = "0" * 16
_SPANS_SLOT: Final = "@mcpfault:spans@"  # where a batch's spans go in its OTLP JSON request

MAX_QUEUE: Final = 100_000
BATCH_SPANS: Final = 512
# The spans a recorder writes itself before it starts its writer process (``writer_process``): a batch.
PROCESS_AFTER_SPANS: Final = BATCH_SPANS
ID_POOL: Final = 1024  # root spans drawn ahead: a fifth of a second of requests at 5,000 a second
_SAMPLED_DIGITS: Final = frozenset("13579bdfBDF")
FLUSH_INTERVAL_S: Final = 0.2
SHUTDOWN_WAIT_S: Final = 10.0
# Endings whose fields are read together (end_root_soon): on the relay's thread once this many wait,
# on the writer's at its next wake for fewer.
SOON: Final = 8
YIELD_EVERY: Final = 16  # spans encoded between two GIL releases (~8 us each), while the writer keeps up

# attributes, events, error, end Unix ns, and the span's name when only the ending knows it (or None)
Ending = tuple["dict[str, Any] | EncodedAttributes", list[Event], "tuple[str] | None", int, "str | None"]


# A root span drawn ahead (``SpanRecorder.roots``), before it has a handle: its trace id, its span id,
# its W3C ``traceparent`` in the form ``keep_root_context`` asked for, its flags, and whether it is
# recorded. Plain values only, so the garbage collector stops tracking it (it moved handles into its
# older generations while their spans waited for the writer). A span whose handle is made on the
# writer's thread (``end_root_later``, ``end_root_soon``) costs the request's path this tuple. Its
# first two items are the ids log lines show (``CURRENT_SPAN``).
Root = tuple[str, str, bytes, str, bool]
# How a root's span ends (``end_root_soon``): what builds it, from what (``end_root_later``'s
# arguments), and what to call with that if the full queue drops it (None: nothing).
RootEnding = tuple[Callable[[Any], "bytes | Filled"], Any, Callable[[Any], None] | None]


# What ``end_later``'s build returns: an Ending, the span's OTLP JSON already encoded, or its template
# and slot values (``SpanTemplate``).
Built = Ending | bytes | Filled


class SpanHandle:
    """A started span: what ``end`` and propagation need, nothing more."""

    __slots__ = (
        "attributes",
        "client_span_id",
        "flags",
        "kind",
        "name",
        "parent_span_id",
        "recording",
        "span_id",
        "start_ns",
        "trace_id",
        "tracestate",
    )

    def __init__(  # noqa: PLR0917 - built once per request on the hot path, positionally
        self,
        trace_id: str,
        span_id: str,
        parent_span_id: str | None,
        flags: str,
        tracestate: str | None,
        name: str,
        kind: int,
        attributes: dict[str, Any],
        start_ns: int,
    ) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_span_id = parent_span_id
        self.flags = flags
        self.tracestate = tracestate
        self.name = name
        self.kind = kind
        self.attributes = attributes
        self.start_ns = start_ns
        # The proxy's leg upstream, as a CLIENT span child of this one, once its context went upstream.
        self.client_span_id: str | None = None
        # Whether the sampler keeps the span: the low bit of the flags' last hex digit. An attribute,
        # not a property: it is read once or twice per request, and the flags never change.
        self.recording = flags[-1] in _SAMPLED_DIGITS

    def traceparent(self) -> str:
        """The W3C ``traceparent`` naming this span as the parent."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"


def root_handle(root: Root, name: str, kind: int, attributes: dict[str, Any], start_unix_ns: int) -> SpanHandle:
    """The handle of a root drawn ahead (``SpanRecorder.roots``), started as given; ``kind`` is OTLP's."""
    return SpanHandle(root[0], root[1], None, root[3], None, name, kind, attributes, start_unix_ns)


class SpanRecorder:
    """Spans from ``start``/``end`` on the hot path; a writer thread encodes and exports them.

    The caller owns the recorder and must ``shutdown()`` it: that flushes every queued span and joins
    the writer (bounded by ``SHUTDOWN_WAIT_S``).
    """

    def __init__(
        self,
        service_name: str,
        *,
        spans_file: Path | None,
        otlp_endpoint: str | None = None,
        settings: otel_env.OtelSettings | None = None,
        resource_attributes: Mapping[str, str] | None = None,
        scope_name: str = "mcpfault.proxy",
        scope_version: str | None = None,
        max_queue: int = MAX_QUEUE,
        writer_process: bool = False,
        process_after: int = PROCESS_AFTER_SPANS,
        soon: int = SOON,
    ) -> None:
        self._random = random.Random(os.urandom(32))
        self._queue: collections.deque[tuple[Any, ...]] = collections.deque()
        # What end_root_soon keeps until ``soon`` of them wait (or the writer's next wake).
        self._soon: collections.deque[tuple[Callable[[Any], RootEnding], Any]] = collections.deque()
        self._soon_count = soon
        self._max_queue = max_queue
        self.dropped = 0
        self._warned = False
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        if settings is None:
            settings = otel_env.read(otlp_endpoint)  # raises OtelConfigError (a ValueError) for a bad value
        sampler = settings.sampler
        self._parent_based = sampler.parent_based
        self._root = sampler.root
        self._ratio_bound = sampler.ratio_bound
        # A root span's flags when they do not depend on its trace id (always on, always off).
        self._root_flags = {"on": "01", "off": "00"}.get(self._root)
        # Root spans drawn ahead by the writer thread, so a request does not pay for its ids or its
        # traceparent's text (start_root). A caller on the hot path may pop from this very list
        # (TelemetryObserver.forward_plain): it is refilled in place, never replaced. Each keeps its
        # traceparent in the form its taker writes (``keep_root_context``), by default its ASCII bytes.
        self._root_context = (b"", b"")
        self.roots: list[Root] = []
        self._draw_roots()
        export = settings.export
        self._url = export.url if export is not None else None
        self._json = export is not None and export.protocol == "http/json"
        resource = service_resource(service_name, resource_attributes)
        head: dict[str, Any] = {}
        if resource.attributes:
            head["attributes"] = [{"key": k, "value": encode_value(v)} for k, v in resource.attributes.items()]
        resource_entry: dict[str, Any] = {"resource": head}
        if resource.schema_url:
            resource_entry["schemaUrl"] = resource.schema_url
        scope: dict[str, Any] = {"name": scope_name}
        if scope_version:
            scope["version"] = scope_version
        request = {"resourceSpans": [{**resource_entry, "scopeSpans": [{"scope": scope, "spans": [_SPANS_SLOT]}]}]}
        before, after = orjson.dumps(request).split(orjson.dumps(_SPANS_SLOT))
        self._envelope = (before, after + b"\n")  # the request's JSON before and after its spans
        self._text_envelope = (before.decode(), (after + b"\n").decode())  # the same, for encode_line
        # Opened here, in the proxy, even when a writer process writes: a path that cannot be written
        # is refused at start-up, and the thread writes there itself should the process fail.
        spans_lines = SpanLinesFile(spans_file) if spans_file is not None else None
        sender = None
        if export is not None:
            from mcpfault.telemetry.export import OtlpSender  # protobuf modules: only when sending

            sender = OtlpSender(export, max_attempts=3, max_retry_wait_s=2.0)  # raises for a bad TLS file
        self._sink = LineSink(spans_lines, sender, json=self._json)
        self._setup = WriterSetup(*self._envelope, str(spans_file) if spans_file is not None else None, export)
        self._wants_process = writer_process
        self._process_after = process_after  # spans written before the writer process is worth its start
        self._written = 0
        self._process: WriterProcess | None = None
        self._shipped: set[int] = set()  # the templates the writer process has the definition of

    # -- the hot path ------------------------------------------------------------------------------

    def new_trace_id(self) -> str:
        value = 0
        while not value:
            value = self._random.getrandbits(128)
        return f"{value:032x}"

    def new_span_id(self) -> str:
        value = 0
        while not value:
            value = self._random.getrandbits(64)
        return f"{value:016x}"

    def start(
        self,
        name: str,
        kind: SpanKind | int,
        traceparent: str | None,
        attributes: dict[str, Any],
        start_unix_ns: int,
        *,
        tracestate: str | None = None,
    ) -> SpanHandle | None:
        """A span, child of ``traceparent`` when that is valid, else the root of a new trace.

        None when the sampler leaves out a request whose client context is itself unsampled: there is
        nothing to record and nothing to change, so the request crosses as it came. A span the sampler
        leaves out otherwise is a non-recording handle (sampled flag clear), propagated but never queued.

        Log lines written from here on in this thread or task carry the span's ids (``CURRENT_SPAN``;
        the client's when there is no span), until the next request's span starts.
        """
        # OTLP's span kinds are the API's shifted by one (0 is SPAN_KIND_UNSPECIFIED there).
        otlp_kind = kind if kind.__class__ is int else kind.value + 1  # type: ignore[union-attr]
        parent = parse_traceparent(traceparent)
        if parent is None:
            return self.start_root(name, otlp_kind, attributes, start_unix_ns)
        parent_flags = int(parent.flags, 16)
        if self._parent_based:
            sampled = bool(parent_flags & 1)
        else:
            sampled = self._root == "on" or (self._root == "ratio" and self._in_ratio(parent.trace_id))
        if not sampled and not parent_flags & 1:
            CURRENT_SPAN.set((parent.trace_id, parent.span_id))
            return None
        span_id = self.new_span_id()
        CURRENT_SPAN.set((parent.trace_id, span_id))
        return SpanHandle(
            parent.trace_id,
            span_id,
            parent.span_id,
            f"{parent_flags | 1:02x}" if sampled else f"{parent_flags & ~1:02x}",
            valid_tracestate(tracestate),
            name,
            otlp_kind,
            attributes,
            start_unix_ns,
        )

    def start_root(self, name: str, kind: int, attributes: dict[str, Any], start_unix_ns: int) -> SpanHandle:
        """``start`` for a request that carries no ``traceparent`` (the usual case), in fewer steps:
        the ids come from a root the writer drew ahead (``roots``); ``kind`` is OTLP's."""
        try:
            root = self.roots.pop()
        except IndexError:
            root = self.new_root()
        CURRENT_SPAN.set(root)
        return root_handle(root, name, kind, attributes, start_unix_ns)

    def new_root(self) -> Root:
        """A root span of a new trace as ``roots`` holds them, flagged sampled or not by the sampler."""
        return self._root_span(self.new_trace_id(), self.new_span_id())

    def keep_root_context(self, before: bytes, after: bytes) -> None:
        """Keep each root's traceparent in ``roots`` between ``before`` and ``after``, from now on: the
        form its taker writes (the proxy: the bytes it splices into a request), made off the request's
        path. The roots drawn already are drawn again. Meant for a recorder's set-up: a taker must not
        rely on the form while another may change it."""
        if (before, after) == self._root_context:
            return
        self._root_context = (before, after)
        self.roots[:] = [self._root_span(root[0], root[1]) for root in self.roots]

    def _root_span(self, trace_id: str, span_id: str) -> Root:
        flags = self._root_flags
        if flags is None:
            flags = "01" if self._in_ratio(trace_id) else "00"
        before, after = self._root_context
        context = b"%b00-%b-%b-%b%b" % (before, trace_id.encode(), span_id.encode(), flags.encode(), after)
        return trace_id, span_id, context, flags, flags[-1] in _SAMPLED_DIGITS

    def _draw_roots(self) -> None:
        """Fill the pool ``start_root`` takes from (on the writer thread, between batches): the ids of
        all in one draw, and with a fixed sampler each root in one formatting step (a quarter of the
        writer thread's time went here when each was drawn and formatted on its own)."""
        missing = ID_POOL - len(self.roots)
        if missing <= 0:
            return
        digits = self._random.randbytes(24 * missing).hex()
        # An id of zeros is invalid (one in 2**64): such a draw is left out.
        pairs = ((digits[at : at + 32], digits[at + 32 : at + 48]) for at in range(0, 48 * missing, 48))
        ids = [(trace_id, span_id) for trace_id, span_id in pairs if trace_id != _ZERO_TRACE and span_id != _ZERO_SPAN]
        flags = self._root_flags
        if flags is None:  # a ratio: each root's flags depend on its trace id
            root = self._root_span
            self.roots.extend([root(trace_id, span_id) for trace_id, span_id in ids])
            return
        before, after = (part.decode() for part in self._root_context)  # ASCII: JSON punctuation and names
        tail = f"-{flags}{after}"
        recorded = flags[-1] in _SAMPLED_DIGITS
        self.roots.extend(
            [
                (trace_id, span_id, f"{before}00-{trace_id}-{span_id}{tail}".encode(), flags, recorded)
                for trace_id, span_id in ids
            ]
        )

    def _in_ratio(self, trace_id: str) -> bool:
        # The SDK's TraceIdRatioBased rule: the trace id's lower 64 bits below ratio * 2**64.
        return int(trace_id[16:], 16) < self._ratio_bound

    def end(
        self,
        handle: SpanHandle,
        attributes: dict[str, Any],
        events: list[Event],
        error: tuple[str] | None,
        end_unix_ns: int,
    ) -> None:
        """Queue the finished span for the writer; never blocks (a full queue drops and counts)."""
        if handle.recording:
            self._enqueue((handle, attributes, events, error, end_unix_ns))

    def _enqueue(self, item: tuple[Any, ...]) -> bool:
        """Whether the span was queued: False when the queue is full and it is dropped (and counted)."""
        queue = self._queue
        if len(queue) >= self._max_queue:
            self.dropped += 1
            if not self._warned:
                self._warned = True
                _log.warning("span queue full (%d spans): dropping spans until the writer catches up", self._max_queue)
            return False
        queue.append(item)
        if self._thread is None:
            self._start_writer()
        elif len(queue) >= BATCH_SPANS and not self._wake.is_set():  # set() takes a lock: once is enough
            self._wake.set()
        return True

    def end_later(self, handle: SpanHandle, build: Callable[[SpanHandle, Any], Built], argument: Any) -> bool:
        """``end``, with the ending built on the writer thread: ``build(handle, argument)`` returns
        (attributes, events, error, end Unix ns, name or None to keep the name given to ``start``),
        or the whole span already encoded (``SpanTemplate.fill``). Keeps attribute building, the
        name and the encoding off the caller's hot path. False when the span was not queued: not
        recording, or dropped on a full queue (then ``build`` never runs)."""
        return handle.recording and self._enqueue((handle, build, argument))

    def end_root_later(self, build: Callable[[Any], bytes | Filled], argument: Any) -> bool:
        """``end_later`` for a span that has no handle yet, a root taken from ``roots`` as it was
        drawn: ``build(argument)`` makes the whole span, its JSON or a ``Filled``, on the writer
        thread. The caller has checked that the root is recorded. False when the queue is full and
        the span is dropped (then ``build`` never runs)."""
        return self._enqueue((build, argument))

    def end_root_soon(self, derive: Callable[[Any], RootEnding], item: Any) -> None:
        """``end_root_later(*derive(item))``, for ``soon`` spans at a time (the constructor's): on this
        thread once that many wait, on the writer's at its next wake for fewer, so a span is queued
        as soon as ``end_root_later`` would be, give or take that wake. The endings' fields are then
        read in one loop, warm, rather than cold after every answer. ``item`` may hold a parsed
        request and its answer: a few requests' worth at a time, never a batch's (held that long,
        they reached the garbage collector's oldest generation, whose full collections took ~20 ms)."""
        soon = self._soon
        soon.append((derive, item))
        if len(soon) >= self._soon_count:
            self._derive_soon()
        elif self._thread is None:
            self._start_writer()

    def _derive_soon(self) -> None:
        """What end_root_soon keeps, queued (from either thread: each item is taken once)."""
        soon = self._soon
        while soon:
            try:
                derive, item = soon.popleft()
            except IndexError:  # the other thread took the last one meanwhile
                return
            try:
                build, argument, dropped = derive(item)
            except Exception:  # lose the span, not the others
                _log.exception("could not make a span's ending")
                continue
            if not self._enqueue((build, argument)) and dropped is not None:
                dropped(argument)

    # -- the writer ------------------------------------------------------------------------------

    def _start_writer(self) -> None:
        with self._start_lock:
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(target=self._run, name="mcpfault-spans", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait(FLUSH_INTERVAL_S)
            self._wake.clear()
            stopping = self._stopping
            self._derive_soon()
            while self._queue:
                self._flush_batch()
                # Between batches too: with a backlog (a pipelined burst) the requests empty the pool
                # faster than the queue drains, and a request then draws its own ids.
                self._draw_roots()
                if not stopping and len(self._queue) < BATCH_SPANS:
                    break
            self._draw_roots()
            if stopping and not self._queue:
                return

    def _flush_batch(self) -> None:
        queue = self._queue
        batch = []
        try:
            for _ in range(BATCH_SPANS):
                batch.append(queue.popleft())
        except IndexError:
            pass
        if not batch:
            return
        try:
            records = self.records(batch)
        except Exception:  # a bad attribute must not kill the writer
            _log.exception("could not encode %d spans as OTLP JSON", len(batch))
            return
        if not records:
            return
        self._written += len(batch)
        if self._wants_process and self._written >= self._process_after:
            self._start_process()
        process = self._process
        if process is not None:
            definitions: list[Definition] = []
            shipped: list[Record] = []
            for record in records:
                if record.__class__ is Filled:
                    template, values = record
                    number = template.number
                    if number not in self._shipped:
                        self._shipped.add(number)
                        definitions.append(template.definition())
                    shipped.append((number, values))
                else:
                    shipped.append(record)  # type: ignore[arg-type]  # bytes
            try:
                process.send(definitions, shipped)
                return
            except OSError as exc:
                _log.warning("span writer process gone (%s): spans are written by the proxy itself", exc)
                self._process = None
                process.close(0.0)
        self._write(records)

    def _start_process(self) -> None:
        """Start the writer process, once, when ``process_after`` spans have been written: a proxy with
        fewer (a short session, as each bench session's is) writes them itself, since the process's
        start-up (~50 ms of CPU) would cost it more than the process takes off its requests' path. The
        spans written before are in the file already, so the order of the lines holds."""
        self._wants_process = False
        try:
            self._process = WriterProcess(replace(self._setup, log=proxy_log_settings()))
        except OSError as exc:
            _log.warning("span writer process not started (%s): spans are written by the proxy itself", exc)

    def _write(self, records: list[bytes | Filled]) -> None:
        try:
            line = self._line(records)
        except Exception:
            _log.exception("could not encode %d spans as OTLP JSON", len(records))
            return
        self._sink.write(line, len(records))

    def _line(self, records: list[bytes | Filled]) -> bytes:
        head, tail = self._text_envelope
        return encode_line(head, tail, records)

    def otlp_json_line(self, batch: list[tuple[Any, ...]]) -> bytes:
        """One ``ExportTraceServiceRequest`` in OTLP JSON, newline included, as ``OtlpJsonLinesExporter``
        writes it. Each span is encoded on its own (most from a ``SpanTemplate``) and the request is put
        together around them: the same bytes as encoding the request whole, since orjson writes compact JSON."""
        return self._line(self.records(batch))

    def records(self, batch: list[tuple[Any, ...]]) -> list[bytes | Filled]:
        """Each queued span's JSON, or its template and slot values (``Filled``): its ending built."""
        dumps = orjson.dumps
        spans: list[bytes | Filled] = []
        for index, item in enumerate(batch, 1):
            if len(item) == 2:  # from end_root_later
                build_root, argument = item
                try:
                    spans.append(build_root(argument))
                except Exception:  # lose the span, not the batch
                    _log.exception("could not build a span")
                    continue
            elif len(item) == 3:  # from end_later
                handle, build, argument = item
                try:
                    ending = build(handle, argument)
                    if ending.__class__ is bytes or ending.__class__ is Filled:
                        spans.append(ending)
                    else:
                        *rest, name = ending
                        if name is not None:
                            handle.name = name
                        spans.append(dumps(json_span(handle, *rest)))
                except Exception:  # lose the span, not the batch
                    _log.exception("could not build the end of span %s", handle.span_id)
                    continue
            else:
                spans.append(dumps(json_span(*item)))
            if not index % YIELD_EVERY and len(self._queue) < BATCH_SPANS:
                # Let the relay threads have the GIL: otherwise a request arriving now waits for the
                # interpreter's switch interval (5 ms) while a whole batch is encoded. Not with a
                # backlog: yielding then starved the writer and the queue grew by 76 MiB in 100k calls.
                # sched_yield releases the GIL as sleep(0) does, without the timer slack that makes a
                # sleep(0) last ~56 us here.
                os.sched_yield()
        return spans

    def shutdown(self, timeout_s: float = SHUTDOWN_WAIT_S) -> None:
        """Flush every queued span and stop the writer; waits at most ``timeout_s``."""
        with self._start_lock:
            self._stopping = True
            thread = self._thread
        if thread is None:
            self._derive_soon()
        if thread is None and self._queue:  # spans queued but no writer: flush here
            while self._queue:
                self._flush_batch()
        elif thread is not None:
            deadline = time.monotonic() + timeout_s
            self._wake.set()
            thread.join(timeout_s)
            if thread.is_alive():
                _log.warning("span writer still busy after %.0f s; %d spans not flushed", timeout_s, len(self._queue))
                return
            process = self._process
            if process is not None and not process.close(max(0.0, deadline - time.monotonic())):
                _log.warning("span writer process did not finish in %.0f s: its last spans may be lost", timeout_s)
        if self.dropped:
            _log.warning("%d spans dropped: the span queue was full", self.dropped)
        self._sink.close()

    @property
    def writer_pid(self) -> int | None:
        """The writer process's id, while there is one."""
        return self._process.pid if self._process is not None else None
