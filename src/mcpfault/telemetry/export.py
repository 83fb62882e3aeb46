"""Send spans to an OTLP collector (or Jaeger) over OTLP/HTTP: a finished run's span files
(``export_run``), the SDK's spans (``OtlpHttpSpanExporter``) and the proxy's (``fastspans``), all
through one ``OtlpSender`` that honours the ``OTEL_EXPORTER_OTLP_*`` settings (``otel_env``):
protobuf or JSON, headers, timeout, gzip, a CA bundle and a client certificate.

A run writes its spans as OTLP JSON lines (``*spans.jsonl``, one ``ExportTraceServiceRequest`` per
line, hex ids) so it needs no services; ``export_run`` replays them afterwards into the real stack.
Each line is converted to protobuf (hex ids to bytes: the protobuf JSON mapping wants base64 for
bytes fields, OTLP JSON uses hex), lines are merged into batches and POSTed to
``{endpoint}/v1/traces`` with ``Content-Type: application/x-protobuf``.

Retries follow the OTLP/HTTP specification: 429, 502, 503 and 504 are retried, honouring
``Retry-After`` (seconds or an HTTP date, capped), with a bounded number of attempts. Headers come
from ``OTEL_EXPORTER_OTLP_TRACES_HEADERS`` or else ``OTEL_EXPORTER_OTLP_HEADERS``; they are
credentials, so no message, log line or summary ever contains their values.
"""

from __future__ import annotations

import base64
import dataclasses
import email.utils
import gzip
import http.client
import io
import json
import logging
import re
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from mcpfault.errors import MCPFaultError
from mcpfault.telemetry import otel_env
from mcpfault.telemetry.logging import redact_text
from mcpfault.telemetry.otel_env import OtelConfigError, OtlpExport, redact_userinfo
from mcpfault.telemetry.otlp_json import otlp_json_request
from mcpfault.telemetry.span_files import find_span_files, span_file_bytes

_log = logging.getLogger(__name__)

SPAN_FILE_GLOB: Final = "*spans.jsonl"  # and its compressed form, *spans.jsonl.gz (span_files.SPAN_FILE_GLOBS)
RETRYABLE_STATUSES: Final = frozenset({429, 502, 503, 504})  # the OTLP/HTTP specification's list
_MAX_ERRORS: Final = 10  # failure messages kept in the summary
_NON_PRINTABLE: Final = re.compile(r"[^\x20-\x7e]+")


class ExportError(MCPFaultError, RuntimeError):
    """The export stopped: the endpoint is unreachable or refuses everything, or there is nothing to send.

    ``summary`` tells what was sent before it stopped (None when nothing was attempted).
    """

    def __init__(self, message: str, summary: ExportSummary | None = None) -> None:
        super().__init__(message)
        self.summary = summary


@dataclass(frozen=True, slots=True)
class ExportSummary:
    """What ``export_run`` did.

    ``spans`` and ``batches`` count what the collector accepted; ``failures`` counts batches it
    rejected (``failed_spans`` the spans in them), ``rejected_spans`` spans it dropped from
    accepted batches (OTLP partial success); ``skipped_lines`` lines that were not OTLP JSON.
    """

    endpoint: str  # the traces URL, credentials removed
    files: int = 0
    spans: int = 0
    batches: int = 0
    failures: int = 0
    failed_spans: int = 0
    rejected_spans: int = 0
    skipped_lines: int = 0
    retries: int = 0
    errors: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.failures == 0 and self.rejected_spans == 0

    def describe(self) -> str:
        """One line for a person."""
        text = (
            f"exported {self.spans} spans from {self.files} files in {self.batches} batches to {self.endpoint}"
            f" ({self.retries} retries)"
        )
        problems = []
        if self.failures:
            problems.append(f"{self.failures} batches ({self.failed_spans} spans) rejected")
        if self.rejected_spans:
            problems.append(f"{self.rejected_spans} spans dropped by the collector")
        if self.skipped_lines:
            problems.append(f"{self.skipped_lines} lines skipped (not OTLP JSON)")
        return text + ("; " + ", ".join(problems) if problems else "")


class ExportTally:
    """The counts of an export in progress; ``summary`` is where they stand now.

    ``add`` adds to the counts by field name (``tally.add(batches=1, spans=12)``), ``note`` keeps a
    failure message, up to ``_MAX_ERRORS`` of them.
    """

    def __init__(self, endpoint: str) -> None:
        self.summary = ExportSummary(endpoint=endpoint)

    def add(self, **counts: int) -> None:
        self.summary = replace(self.summary, **{name: getattr(self.summary, name) + n for name, n in counts.items()})

    def note(self, error: str) -> None:
        if len(self.summary.errors) < _MAX_ERRORS:
            self.summary = replace(self.summary, errors=(*self.summary.errors, error))


def export_run(
    run_dir: Path,
    endpoint: str | OtlpExport,
    *,
    timeout_s: float | None = 30,
    max_batch_spans: int = 512,
    max_batch_bytes: int = 4 * 1024 * 1024,
    max_attempts: int = 5,
    max_retry_wait_s: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
) -> ExportSummary:
    """Send every span in ``run_dir``'s ``*spans.jsonl`` files (recursively) to ``{endpoint}/v1/traces``.

    ``endpoint`` is the collector's OTLP/HTTP base (``http://127.0.0.1:4318``) or the full traces URL
    (the rest of the ``OTEL_EXPORTER_OTLP_*`` settings then come from the environment), or the
    resolved settings. ``timeout_s`` bounds each HTTP request (None: the settings' timeout). A batch
    holds whole lines, up to ``max_batch_spans`` spans
    or ``max_batch_bytes`` of protobuf (a single larger line goes alone). A retryable answer (429,
    502, 503, 504) or a broken connection is retried up to ``max_attempts`` times per batch, waiting
    ``Retry-After`` (capped at ``max_retry_wait_s``) or an exponential backoff.

    Raises ``ValueError`` for an endpoint that is not an http(s) URL, and ``ExportError`` when there
    are no span files, when the endpoint is unreachable, when it refuses every request (401, 403,
    404, 405, 415) or keeps answering a retryable status. A batch the collector rejects for its
    content (400, 413, 500, ...) is counted in ``failures`` and the export goes on.
    """
    export = otel_env.otlp_export(otel_env.with_traces_path(endpoint)) if isinstance(endpoint, str) else endpoint
    if timeout_s is not None:
        export = dataclasses.replace(export, timeout_s=timeout_s)
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ExportError(f"run directory {run_dir} does not exist or is not a directory")
    files = find_span_files(run_dir)  # as written, or compressed by the bench
    if not files:
        raise ExportError(
            f"no span files ({SPAN_FILE_GLOB}) under {run_dir}; was the run made with tracing on? "
            "(run and bench write client-spans.jsonl, proxy-spans.jsonl and server-spans.jsonl per session)"
        )

    sender = OtlpSender(export, max_attempts=max_attempts, max_retry_wait_s=max_retry_wait_s, sleep=sleep)
    tally = ExportTally(endpoint=sender.shown)
    for path in files:
        tally.add(files=1)
        for batch, span_count in _batches(path, tally, max_batch_spans, max_batch_bytes):
            body = batch
            if export.protocol == "http/json":
                body = protobuf_to_otlp_json(ExportTraceServiceRequest.FromString(batch))
            try:
                sender.send(body, span_count, tally)
            except ExportError as exc:
                raise ExportError(str(exc), tally.summary) from None
    summary = tally.summary
    _log.info("%s", summary.describe())
    return summary


# --- reading and converting ---------------------------------------------------------------------


def _batches(path: Path, tally: ExportTally, max_spans: int, max_bytes: int) -> Iterator[tuple[bytes, int]]:
    """Serialized requests of whole lines from ``path``, with their span counts."""
    batch = ExportTraceServiceRequest()
    spans = size = 0
    for message in _requests(path, tally):
        count = _span_count(message)
        if not count:
            continue
        message_size = message.ByteSize()
        if spans and (spans + count > max_spans or size + message_size > max_bytes):
            yield batch.SerializeToString(), spans
            batch = ExportTraceServiceRequest()
            spans = size = 0
        batch.resource_spans.extend(message.resource_spans)
        spans += count
        size += message_size
    if spans:
        yield batch.SerializeToString(), spans


def _requests(path: Path, tally: ExportTally) -> Iterator[ExportTraceServiceRequest]:
    with io.BytesIO(span_file_bytes(path)) as lines:
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                yield otlp_json_to_protobuf(json.loads(raw))
            except (ValueError, TypeError, ParseError) as exc:
                tally.add(skipped_lines=1)
                if raw.endswith(b"\n"):
                    _log.warning("%s:%d: skipped a line that is not an OTLP JSON trace request (%s)", path, number, exc)
                else:  # a torn last line: its writer was caught mid-batch
                    _log.info("%s:%d: skipped an unfinished last line", path, number)


def otlp_json_to_protobuf(request: Any) -> ExportTraceServiceRequest:
    """An OTLP JSON ``ExportTraceServiceRequest`` (hex or base64 ids, integer or named enums) as protobuf.

    Raises ``ValueError`` (``ParseError`` is one) for anything that is not such a request.
    """
    if not isinstance(request, dict) or not isinstance(request.get("resourceSpans", []), list):
        raise ValueError("not an object with a resourceSpans list")
    for resource_spans in request.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()) if isinstance(resource_spans, dict) else ():
            for span in scope_spans.get("spans", ()) if isinstance(scope_spans, dict) else ():
                if isinstance(span, dict):
                    _ids_to_base64(span)
                    for link in span.get("links", ()):
                        if isinstance(link, dict):
                            _ids_to_base64(link)
    message = ExportTraceServiceRequest()
    ParseDict(request, message, ignore_unknown_fields=True)
    return message


def protobuf_to_otlp_json(message: ExportTraceServiceRequest) -> bytes:
    """``message`` as OTLP JSON: the protobuf JSON mapping with hex ids and integer enums."""
    request = MessageToDict(message, use_integers_for_enums=True)
    for resource_spans in request.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                _ids_to_hex(span)
                for link in span.get("links", ()):
                    _ids_to_hex(link)
    return json.dumps(request, separators=(",", ":")).encode()


def _ids_to_hex(item: dict[str, Any]) -> None:
    for key in _ID_SIZES:
        value = item.get(key)
        if isinstance(value, str):
            item[key] = base64.b64decode(value).hex()


_ID_SIZES: Final = {"traceId": 16, "spanId": 8, "parentSpanId": 8}


def _ids_to_base64(item: dict[str, Any]) -> None:
    for key, size in _ID_SIZES.items():
        value = item.get(key)
        if value == "":
            del item[key]  # an absent parent
        elif isinstance(value, str) and len(value) == 2 * size:
            try:
                item[key] = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError:
                raise ValueError(f"{key} {value!r} is neither hex nor base64") from None
        # otherwise already base64 (plain protobuf JSON), checked by the parser


def _span_count(message: ExportTraceServiceRequest) -> int:
    return sum(len(ss.spans) for rs in message.resource_spans for ss in rs.scope_spans)


# --- sending ------------------------------------------------------------------------------------


class OtlpSender:
    """POSTs encoded ``ExportTraceServiceRequest`` bodies as ``export`` says (protobuf or JSON, gzip or
    not, TLS files), retrying as the OTLP/HTTP specification says.

    Header values never appear in a message; ``shown`` is the URL without credentials, for messages.
    Raises ``OtelConfigError`` when a TLS file is not a usable PEM certificate or key.
    """

    def __init__(
        self,
        export: OtlpExport,
        *,
        max_attempts: int,
        max_retry_wait_s: float,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.export = export
        self.url = export.url
        self.shown = export.shown
        self.headers = {**export.headers, "Content-Type": export.content_type, "User-Agent": "mcpfault-export"}
        if export.compression == "gzip":
            self.headers["Content-Encoding"] = "gzip"
        self.secrets = [value for value in export.headers.values() if len(value) >= 4]
        self.timeout_s = export.timeout_s
        self.max_attempts = max(1, max_attempts)
        self.max_retry_wait_s = max_retry_wait_s
        self.sleep = sleep
        self._tls = _tls_context(export) if export.url.startswith("https:") else None

    def send(self, body: bytes, span_count: int, tally: ExportTally) -> None:
        """Send one batch of ``span_count`` spans, counting the outcome in ``tally``.

        Raises ``ExportError`` when the endpoint is unreachable, refuses the export or stays busy;
        a batch rejected for its content is counted in ``tally`` instead.
        """
        if self.export.compression == "gzip":
            body = gzip.compress(body, compresslevel=6)
        for attempt in range(1, self.max_attempts + 1):
            last = attempt == self.max_attempts
            request = urllib.request.Request(self.url, data=body, headers=self.headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s, context=self._tls) as response:
                    self._accepted(response.read(), span_count, tally)
                    return
            except urllib.error.HTTPError as exc:
                status, retry_after, detail = exc.code, exc.headers.get("Retry-After"), self._detail(exc)
                exc.close()
                if status in RETRYABLE_STATUSES:
                    if last:
                        raise ExportError(
                            f"OTLP endpoint {self.shown} still answered {status} {_reason(status)} after "
                            f"{self.max_attempts} attempts{detail}; the collector is overloaded or down, try later"
                        ) from None
                    tally.add(retries=1)
                    self.sleep(self._wait(retry_after, attempt))
                    continue
                if status in (401, 403):
                    raise ExportError(
                        f"OTLP endpoint {self.shown} refused the export: {status} {_reason(status)}{detail}; "
                        "check the credentials given in OTEL_EXPORTER_OTLP_HEADERS"
                    ) from None
                if status in (404, 405, 415):
                    raise ExportError(
                        f"OTLP endpoint {self.shown} refused the export: {status} {_reason(status)}{detail}; "
                        "is it a collector's OTLP/HTTP receiver (port 4318, path /v1/traces, protobuf)?"
                    ) from None
                problem = f"{status} {_reason(status)}{detail}"
                tally.add(failures=1, failed_spans=span_count)
                tally.note(problem)
                _log.warning("OTLP endpoint %s rejected %d spans: %s", self.shown, span_count, problem)
                return
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                # Nothing listens there, or the name does not resolve: no point retrying before the
                # first success. A reset or a timeout may be a collector restarting: retried.
                before_first_success = tally.summary.batches == 0
                unreachable = isinstance(reason, ConnectionRefusedError | socket.gaierror) and before_first_success
                if unreachable or last:
                    raise ExportError(
                        f"cannot reach OTLP endpoint {self.shown}: {self._clean(str(reason))}; is the collector "
                        "running and listening there (OTLP/HTTP, usually port 4318)?"
                    ) from None
                tally.add(retries=1)
                self.sleep(self._wait(None, attempt))

    def _accepted(self, body: bytes, span_count: int, tally: ExportTally) -> None:
        tally.add(batches=1, spans=span_count)
        if not body:
            return
        answer = ExportTraceServiceResponse()
        try:
            answer.ParseFromString(body)
        except DecodeError:
            return  # a JSON or empty-ish body from a lenient receiver: the 2xx is what counts
        rejected = answer.partial_success.rejected_spans
        if rejected:
            tally.add(rejected_spans=rejected, spans=-min(rejected, span_count))
            message = self._clean(answer.partial_success.error_message)
            tally.note(f"partial success: {rejected} spans rejected ({message})")

    def _wait(self, retry_after: str | None, attempt: int) -> float:
        seconds = _retry_after_s(retry_after)
        if seconds is None:
            seconds = 0.5 * 2 ** (attempt - 1)
        return max(0.0, min(seconds, self.max_retry_wait_s))

    def _detail(self, exc: urllib.error.HTTPError) -> str:
        try:
            text = exc.read(2048).decode("utf-8", "replace")
        except (OSError, http.client.HTTPException):
            return ""
        text = _NON_PRINTABLE.sub(" ", text).strip()[:200]
        return f" ({self._clean(text)})" if text else ""

    def _clean(self, text: str) -> str:
        # A receiver might echo what it was sent: keep header values out of every message.
        for secret in self.secrets:
            text = text.replace(secret, "[redacted]")
        return redact_userinfo(redact_text(text))


def _tls_context(export: OtlpExport) -> ssl.SSLContext:
    """Verification against the system's CAs, or ``certificate`` alone; a client certificate when given."""
    try:
        context = ssl.create_default_context(cafile=str(export.certificate) if export.certificate else None)
        if export.client_certificate is not None:
            context.load_cert_chain(str(export.client_certificate), str(export.client_key))
    except (ssl.SSLError, OSError) as exc:
        raise OtelConfigError(
            f"OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE / CLIENT_CERTIFICATE / CLIENT_KEY: cannot load ({exc}); "
            "give PEM files: the CA bundle, the client's certificate and its unencrypted key"
        ) from None
    return context


class OtlpHttpSpanExporter(SpanExporter):
    """The SDK's spans over the same ``OtlpSender`` (so the same ``OTEL_EXPORTER_OTLP_*`` settings apply)."""

    def __init__(self, export: OtlpExport) -> None:
        self._sender = OtlpSender(export, max_attempts=3, max_retry_wait_s=2.0)
        self._json = export.protocol == "http/json"

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        request = otlp_json_request(spans)
        if not request:
            return SpanExportResult.SUCCESS
        body = json.dumps(request).encode() if self._json else otlp_json_to_protobuf(request).SerializeToString()
        tally = ExportTally(endpoint=self._sender.shown)
        try:
            self._sender.send(body, len(spans), tally)
        except ExportError as exc:  # already free of credentials
            _log.warning("%d spans not exported: %s", len(spans), exc)
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS if tally.summary.ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        pass


def _reason(status: int) -> str:
    return http.client.responses.get(status, "")


def _retry_after_s(value: str | None) -> float | None:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date (RFC 9110); None if absent or bad."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
