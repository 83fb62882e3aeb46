"""OTLP JSON lines without the OpenTelemetry SDK: what a span writer needs besides the spans.

- ``encode_value``, ``span_flags``: an attribute value as OTLP JSON's ``AnyValue``; a span's ``flags``.
- ``service_resource``: the resource of a process's spans, as the SDK's ``Resource.create`` builds it.
- ``SpanLinesFile``: the append-only file, one OTLP JSON request per line.

The fast span recorder (``fastspans``) stands on these alone, so a process that records its spans with
it (the proxy, the mock server) never imports the SDK, which costs ~75 ms of CPU at each start. The
SDK's side (``otlp_json``, ``span_files``, ``tracing``) is built on the same pieces.
"""

from __future__ import annotations

import base64
import math
import os
import sys
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Final, NamedTuple


class LazyLogger:
    """``logging.getLogger(name)``, importing ``logging`` at the first message: the standard library's
    logging costs ~10 ms of CPU to import, which a span writer that never complains (the mock
    server's) should not pay at every start."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        import logging

        return getattr(logging.getLogger(self._name), attribute)


_log = LazyLogger(__name__)

# --- attribute values and flags -------------------------------------------------------------------

# OTLP span flags: bit 8 says whether bit 9 (parent is remote) is known.
FLAG_HAS_IS_REMOTE: Final = 0x100
FLAG_IS_REMOTE: Final = 0x200

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_NON_FINITE: Final = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def span_flags(remote_parent: bool) -> int:
    """A span's (or a link's) OTLP ``flags``: whether its parent is remote, and that this is known."""
    return FLAG_HAS_IS_REMOTE | (FLAG_IS_REMOTE if remote_parent else 0)


def encode_value(value: Any) -> dict[str, Any]:
    """An attribute value as OTLP JSON's ``AnyValue``; ``TypeError``/``ValueError`` when it has none."""
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"{value} does not fit in int64")
        return {"intValue": str(value)}
    if isinstance(value, float):
        # JSON has no NaN or infinities; the protobuf mapping spells them as strings.
        return {"doubleValue": value if math.isfinite(value) else _NON_FINITE[str(value)]}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode()}
    if isinstance(value, Sequence):
        values = [encode_value(v) for v in value]
        return {"arrayValue": {"values": values} if values else {}}
    if isinstance(value, Mapping):
        items = [{"key": str(k), "value": encode_value(v)} for k, v in value.items()]
        return {"kvlistValue": {"values": items} if items else {}}
    raise TypeError(f"unsupported attribute type {type(value).__name__}")


# --- the resource ---------------------------------------------------------------------------------

SERVICE_NAME: Final = "service.name"
_SERVICE_INSTANCE_ID: Final = "service.instance.id"
_ENV_SERVICE_NAME: Final = "OTEL_SERVICE_NAME"
_ENV_RESOURCE_ATTRIBUTES: Final = "OTEL_RESOURCE_ATTRIBUTES"
_ENV_DETECTORS: Final = "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS"


class ServiceResource(NamedTuple):
    """A process's resource: its attributes (in the SDK's order) and schema URL ("" for none)."""

    attributes: dict[str, Any]
    schema_url: str


def service_resource(service_name: str, explicit: Mapping[str, str] | None = None) -> ServiceResource:
    """The resource of a process's spans: ``explicit``, over the ``OTEL_*`` environment, over ``service_name``.

    ``service_name`` is the program's own default, so ``OTEL_SERVICE_NAME`` (or ``service.name`` in
    ``OTEL_RESOURCE_ATTRIBUTES``) renames the service as operators expect, while a ``service.name`` in
    ``explicit`` wins over both. The rest is what the SDK's ``Resource.create`` adds: the
    ``telemetry.sdk.*`` attributes and a random ``service.instance.id`` per process. Built here, without
    importing the SDK, for the SDK's default detectors; when ``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS`` asks
    for others, the SDK builds it (its detectors are its own).
    """
    if os.environ.get(_ENV_DETECTORS, "").strip():
        return _sdk_resource(service_name, explicit)
    from opentelemetry.sdk.version import __version__ as sdk_version  # a string: no SDK module behind it

    attributes: dict[str, Any] = {
        "telemetry.sdk.language": "python",
        "telemetry.sdk.name": "opentelemetry",
        "telemetry.sdk.version": sdk_version,
        _SERVICE_INSTANCE_ID: _service_instance_id(),
    }
    from_env = _env_attributes()
    attributes.update(from_env)
    if not from_env.get(SERVICE_NAME):
        attributes[SERVICE_NAME] = service_name
    if explicit:
        attributes.update((key, value) for key, value in explicit.items() if key)
    if not attributes.get(SERVICE_NAME):  # as Resource.create names a service nobody named
        executable = os.path.basename(sys.executable) if sys.executable else ""
        attributes[SERVICE_NAME] = f"unknown_service:{executable}" if executable else "unknown_service"
    return ServiceResource(attributes, "")


_instance_id: tuple[int, str] | None = None  # (pid, id)
_instance_lock = threading.Lock()


def _service_instance_id() -> str:
    """A random UUID per process, as the SDK's detector gives: the same for every resource of one
    process, a new one in a forked child."""
    global _instance_id  # noqa: PLW0603 - one per process, as the SDK keeps it
    with _instance_lock:
        if _instance_id is None or _instance_id[0] != os.getpid():
            _instance_id = (os.getpid(), str(uuid.uuid4()))
        return _instance_id[1]


def _env_attributes() -> dict[str, str]:
    """``OTEL_RESOURCE_ATTRIBUTES`` (``k=v,...``, values URL-decoded), then ``OTEL_SERVICE_NAME``, as the SDK does."""
    found: dict[str, str] = {}
    listed = os.environ.get(_ENV_RESOURCE_ATTRIBUTES)
    if listed:
        from urllib.parse import unquote

        for item in listed.split(","):
            key, equals, value = item.partition("=")
            if not equals:
                _log.warning("Invalid key value resource attribute pair %s: no '='", item)
                continue
            if key.strip():  # the SDK drops an attribute with an empty key
                found[key.strip()] = unquote(value.strip())
    service_name = os.environ.get(_ENV_SERVICE_NAME)
    if service_name:
        found[SERVICE_NAME] = service_name
    return found


def _sdk_resource(service_name: str, explicit: Mapping[str, str] | None) -> ServiceResource:
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource

    attributes: dict[str, str] = {}
    # Resource.create merges our attributes over the environment's, so service_name would always
    # win; pass it only when the environment names no service.
    if not OTELResourceDetector().detect().attributes.get(SERVICE_NAME):
        attributes[SERVICE_NAME] = service_name
    if explicit:
        attributes.update(explicit)
    resource = Resource.create(attributes)
    return ServiceResource(dict(resource.attributes), resource.schema_url)


# --- the file -------------------------------------------------------------------------------------


class SpanLinesFile:
    """An OTLP JSON-lines span file, open for append: each ``write_line`` adds one whole line.

    The file is opened for append, unbuffered, and each line goes out in one ``write`` call: with
    O_APPEND that keeps lines from several processes of one run whole rather than interleaved, and a
    crash loses at most the batch in flight, leaving at worst a torn last line that ``read_spans`` skips.
    """

    def __init__(self, path: Path) -> None:
        self._path = Path(path)
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._file: IO[bytes] | None = self._path.open("ab", buffering=0)
        # A previous writer that died mid-line left a torn line; end it so our first line stays whole.
        if self._path.stat().st_size > 0 and not _ends_with_newline(self._path):
            self._write_all(b"\n")

    @property
    def path(self) -> Path:
        return self._path

    def write_line(self, line: bytes) -> bool:
        """Append ``line`` (an encoded request, newline included) whole; False once shut down.

        Raises ``OSError`` when the file cannot take it. For writers that encode spans themselves.
        """
        with self._lock:
            if self._file is None:
                return False
            self._write_all(line)
            return True

    def _write_all(self, data: bytes) -> None:
        assert self._file is not None
        view = memoryview(data)
        while view:  # a raw write may be short (a full disk, a signal); never leave half a line unsaid
            written = self._file.write(view)
            if not written:
                raise OSError(f"could not write to {self._path}")
            view = view[written:]

    def shutdown(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"
