"""The span writer process: spans joined into OTLP JSON lines, written and exported off the proxy's GIL.

The recorder's thread (``fastspans``) builds each span's ending and ships batches of compact records
over a pipe: a span's JSON already encoded (bytes), or a template's number and the raw values of its
slots (ids, nanoseconds, the request id), with each template's pieces before its first use. This
process fills the templates, joins each batch into one ``ExportTraceServiceRequest`` line, appends it
to the span file and POSTs it when an endpoint is set: the same bytes the recorder writes itself for
the same records (``encode_line`` serves both).

It is owned by its recorder: started once it has written 512 spans itself, it exits at the pipe's EOF once it has
written what it received, so it ends with the proxy, a proxy killed with SIGKILL too (what was in the
pipe is still written). It ignores SIGINT and SIGTERM: a Ctrl-C or a signal to the proxy's process
group must not cut short the flush of a clean stop, which closes the pipe.

Frames: a 4-byte big-endian length, then the payload. The first is the set-up (``WriterSetup``,
pickled: it is sent once), every other one a batch, ``marshal``-ed (``(definitions, records)``):
marshal is the cheapest of the standard library's encodings for tuples of strings and ints.
"""

from __future__ import annotations

import contextlib
import fcntl
import marshal
import os
import signal
import struct
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import orjson

from mcpfault.telemetry.otlp_lines import LazyLogger, SpanLinesFile
from mcpfault.telemetry.span_json import SpanTemplate

if TYPE_CHECKING:
    from mcpfault.telemetry.export import OtlpSender
    from mcpfault.telemetry.otel_env import OtlpExport

_log = LazyLogger(__name__)
_HEADER: Final = struct.Struct(">I")
PIPE_BYTES: Final = 1 << 20  # a second of spans at 5,000 a second: the proxy seldom waits for the writer

# A record: a span's JSON, or (template number, the raw values of its slots).
Record = bytes | tuple[int, tuple[Any, ...]]
# A template's definition: (number, its JSON's pieces with gaps, the slot each gap takes).
Definition = tuple[int, list[str], tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class WriterSetup:
    """What the writer process needs besides the spans: the request's JSON around them, where to send it."""

    head: bytes  # the ExportTraceServiceRequest's JSON before its spans
    tail: bytes  # and after them, newline included
    spans_file: str | None
    export: OtlpExport | None
    log: tuple[str, str] | None = None  # the proxy's log level and format (telemetry.logging.configured)


def encode_line(
    head: str, tail: str, records: Sequence[Any], templates: Mapping[int, SpanTemplate] | None = None
) -> bytes:
    """One ``ExportTraceServiceRequest`` line: ``head``, each record's span JSON, comma-separated, then
    ``tail`` (newline included). A record is a span's JSON (bytes) or a template with the values of
    its slots: a ``Filled`` or, with ``templates``, the template's number (a writer process's).
    All the text is joined once and encoded once, rather than span by span and then again whole
    (measured in a loop of 512-span batches: 1.5 us a span, marshal included, against 3.0)."""
    parts = [head]
    for record in records:
        if record.__class__ is bytes:
            parts.append(record.decode())
        else:
            template, values = record
            if templates is not None:
                template = templates[template]
            parts += template.parts(values)
        parts.append(",")
    if records:
        parts[-1] = tail  # in the place of the last comma
    else:
        parts.append(tail)
    return "".join(parts).encode()


class LineSink:
    """Where a batch's line goes: the span file, the OTLP endpoint, or both."""

    def __init__(self, spans_file: SpanLinesFile | None, sender: OtlpSender | None, *, json: bool) -> None:
        self.file = spans_file
        self._sender = sender
        self._json = json  # http/json: the body is the line itself

    def write(self, line: bytes, count: int) -> None:
        if self.file is not None:
            try:
                self.file.write_line(line)
            except OSError:
                _log.exception("could not write spans to %s", self.file.path)
        if self._sender is not None:
            self._post(self._sender, line, count)

    def _post(self, sender: OtlpSender, line: bytes, count: int) -> None:
        from mcpfault.telemetry.export import ExportError, ExportTally, otlp_json_to_protobuf

        try:
            # http/json: the same request as the line, without its newline
            body = line[:-1] if self._json else otlp_json_to_protobuf(orjson.loads(line)).SerializeToString()
            sender.send(body, count, ExportTally(endpoint=sender.shown))
        except ExportError as exc:  # already free of credentials
            _log.warning("%d spans not exported: %s", count, exc)
        except Exception:
            _log.exception("%d spans not exported to %s", count, sender.shown)

    def close(self) -> None:
        if self.file is not None:
            self.file.shutdown()


def sink_for(setup: WriterSetup) -> LineSink:
    sender = None
    if setup.export is not None:
        from mcpfault.telemetry.export import OtlpSender  # protobuf modules: only when sending

        sender = OtlpSender(setup.export, max_attempts=3, max_retry_wait_s=2.0)
    spans_file = SpanLinesFile(Path(setup.spans_file)) if setup.spans_file is not None else None
    json = setup.export is not None and setup.export.protocol == "http/json"
    return LineSink(spans_file, sender, json=json)


# --- the recorder's side ----------------------------------------------------------------------------


class WriterProcess:
    """The recorder's handle on its writer process. ``send`` raises ``OSError`` once the process is gone."""

    def __init__(self, setup: WriterSetup) -> None:
        # Imported here, not at the top: the mock server, whose recorder never starts a writer, imports
        # neither otherwise and starts ~3 ms of CPU sooner (measured). A proxy imports them anyway.
        import pickle
        import subprocess

        read_end, self._fd = os.pipe()
        with contextlib.suppress(OSError):  # a smaller pipe only makes the recorder wait more often
            fcntl.fcntl(self._fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        try:
            # Not the proxy's stdout: that is the client's channel, and its EOF must not wait for the writer.
            self._process = subprocess.Popen(
                [sys.executable, "-m", "mcpfault.telemetry.span_writer"],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                close_fds=True,
            )
        except BaseException:
            os.close(self._fd)
            raise
        finally:
            os.close(read_end)
        try:
            self._send(pickle.dumps(setup))
        except OSError:  # it died at once: the recorder writes the spans itself
            self.close(0.0)
            raise

    @property
    def pid(self) -> int:
        return self._process.pid

    def send(self, definitions: list[Definition], records: list[Record]) -> None:
        self._send(marshal.dumps((definitions, records)))

    def _send(self, payload: bytes) -> None:
        view = memoryview(_HEADER.pack(len(payload)) + payload)
        while view:  # blocks while the pipe is full, without the GIL
            view = view[os.write(self._fd, view) :]

    def close(self, timeout_s: float) -> bool:
        """EOF to the writer, then wait for it to write what it has and exit; False when it did not
        in ``timeout_s`` (then it is killed: a writer must not outlive its recorder's stop)."""
        import subprocess

        with contextlib.suppress(OSError):
            os.close(self._fd)
        try:
            status = self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
            return False
        return status == 0


# --- the writer process ------------------------------------------------------------------------------


def _frames(fd: int) -> Iterator[bytes]:
    """Each whole frame on ``fd`` until EOF; a frame cut short (its sender killed mid-write) is left out."""
    with os.fdopen(fd, "rb", buffering=PIPE_BYTES, closefd=False) as stream:
        while True:
            header = stream.read(_HEADER.size)
            if len(header) < _HEADER.size:
                return
            (size,) = _HEADER.unpack(header)
            payload = stream.read(size)
            if len(payload) < size:
                return
            yield payload


def proxy_log_settings() -> tuple[str, str] | None:
    """How the proxy logs, when ``telemetry.logging`` configured it; read without importing that
    module (structlog and the OpenTelemetry API: ~120 ms of CPU), which is loaded if it was used."""
    module = sys.modules.get("mcpfault.telemetry.logging")
    return module.configured() if module is not None else None


def _log_like_the_proxy(level: str, fmt: str) -> None:
    """Log as the proxy does (its level, its format, on the stderr both share), set up at the first
    record: a writer that never complains never pays for the logging set-up."""
    import logging

    class ConfigureOnFirstRecord(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            from mcpfault.telemetry import logging as log_setup

            root = logging.getLogger()
            root.removeHandler(self)
            log_setup.configure(level, fmt)  # type: ignore[arg-type]  # the proxy's, as configure took them
            if record.levelno >= root.getEffectiveLevel():
                root.handle(record)

    logging.getLogger().addHandler(ConfigureOnFirstRecord())


def run(fd: int = 0) -> int:
    frames = _frames(fd)
    first = next(frames, None)
    if first is None:
        return 0  # the recorder stopped before it sent anything
    import pickle

    setup: WriterSetup = pickle.loads(first)
    if setup.log is not None:
        _log_like_the_proxy(*setup.log)
    sink = sink_for(setup)
    head, tail = setup.head.decode(), setup.tail.decode()
    templates: dict[int, SpanTemplate] = {}
    try:
        for frame in frames:
            definitions, records = marshal.loads(frame)
            for number, blank, slots in definitions:
                templates[number] = SpanTemplate.from_definition(number, blank, slots)
            try:
                line = encode_line(head, tail, records, templates)
            except Exception:  # as the recorder's own writer: a bad batch must not stop the others
                _log.exception("could not encode %d spans as OTLP JSON", len(records))
                continue
            sink.write(line, len(records))
    finally:
        sink.close()
    return 0


def main() -> int:
    # The recorder ends this process by closing the pipe, after its last batch.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return run()


if __name__ == "__main__":
    raise SystemExit(main())
