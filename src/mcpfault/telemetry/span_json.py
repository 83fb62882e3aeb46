"""A span's OTLP JSON, as the span recorders' writers make it: templates encoded once, attributes
encoded with shared caches, and the span object for the rest.

``fastspans`` keeps the recorder (ids, the queue, the writer thread and process); this module only
turns a span's values into the bytes of its line, in the writer thread or in a writer process
(``span_writer`` fills the templates it is sent), so it imports neither the recorder nor the
OpenTelemetry SDK.
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import orjson

from mcpfault.telemetry import names
from mcpfault.telemetry.otlp_lines import LazyLogger, encode_value, span_flags

if TYPE_CHECKING:
    from mcpfault.telemetry.fastspans import SpanHandle
    from mcpfault.telemetry.span_writer import Definition

_log = LazyLogger(__name__)

Event = tuple[str, int, dict[str, Any]]  # name, Unix ns, attributes


class Filled(NamedTuple):
    """A span's JSON as its template and the values of its slots (``SpanTemplate.fill``): what a
    writer process fills, so the recorder's thread need not."""

    template: SpanTemplate
    values: tuple[Any, ...]

    def json(self) -> bytes:
        return self.template.fill(self.values)


class SpanTemplate:
    """The OTLP JSON of spans that differ only in ids, times and the request id, encoded once.

    Made from one span's JSON object in which each varying value is a ``slot(n)`` string, so a JSON
    string whose quotes the template keeps; ``fill`` puts each span's values there as text (``str``
    of each: a decimal for an int, as OTLP JSON writes nanoseconds; a string as it is, which must be
    JSON string content already, ``json_string_content``). Encoding a span this way costs a join
    instead of building and dumping its objects.
    """

    __slots__ = ("_blank", "_pick", "_slots", "number")

    _SLOT: Final = re.compile(r'"@mcpfault:slot:(\d+)@"')
    _NUMBERS: Final = itertools.count()

    def __init__(self, span: dict[str, Any]) -> None:
        pieces = self._SLOT.split(orjson.dumps(span).decode())
        texts = pieces[0::2]
        # Each slot's quotes stay in the text around it, so a value goes in as it is (str() of it).
        texts = [texts[0] + '"', *['"' + text + '"' for text in texts[1:-1]], '"' + texts[-1]]
        # The JSON's pieces with a gap between each two, where a span's values go in the order the
        # slots appear: one slice assignment and a join, all in C (measured: 1.1 us a span against
        # 1.6 for a loop of appends and 7.8 for str.format, which parses its format on every call).
        slots = tuple(int(number) for number in pieces[1::2])
        self._set(next(self._NUMBERS), [piece for text in texts for piece in (text, "")][:-1], slots)

    def _set(self, number: int, blank: list[str], slots: tuple[int, ...]) -> None:
        assert len(slots) > 1, "itemgetter of one index gives a value, not a tuple: a span has more slots"
        self.number = number  # names the template to a writer process
        self._blank = blank
        self._slots = slots
        self._pick = operator.itemgetter(*slots)

    def definition(self) -> Definition:
        """What ``from_definition`` makes the same template of (in a writer process)."""
        return self.number, self._blank, self._slots

    @classmethod
    def from_definition(cls, number: int, blank: list[str], slots: tuple[int, ...]) -> SpanTemplate:
        template = cls.__new__(cls)
        template._set(number, blank, slots)
        return template

    @staticmethod
    def slot(number: int) -> str:
        return f"@mcpfault:slot:{number}@"

    def parts(self, values: tuple[Any, ...]) -> list[str]:
        """The span's JSON in pieces, ``str(values[n])`` where ``slot(n)`` was: to be joined."""
        out = self._blank.copy()
        out[1::2] = map(str, self._pick(values))
        return out

    def fill(self, values: tuple[Any, ...]) -> bytes:
        """The span's JSON, ``str(values[n])`` where ``slot(n)`` was."""
        return "".join(self.parts(values)).encode()


def json_string_content(text: str) -> str:
    """``text`` as it goes between a JSON string's quotes (escaped as orjson escapes it): how a slot
    takes a string that may need escaping (``SpanTemplate``), such as a client's request id."""
    return orjson.dumps(text).decode()[1:-1]


# Encoded string and bool attributes, shared between spans: most repeat (method, transport, tool),
# and orjson writes a shared dict as often as it appears. Used by writer threads only; bounded.
_ENCODED: dict[tuple[str, Any], dict[str, Any]] = {}
_MAX_ENCODED: Final = 4096
_UNIQUE: Final = frozenset({names.JSONRPC_REQUEST_ID})  # different in every span: not worth caching


class SharedAttributes(dict[str, Any]):
    """Start attributes shared by many spans and never changed (one per direction, say): encoded once."""

    __slots__ = ()


class EncodedAttributes(list[dict[str, Any]]):
    """Attributes already in OTLP JSON (``encode_attributes``): an ending may give these for a dict,
    appended to the start attributes as they are (so the two must not share keys)."""

    __slots__ = ()


def encode_attributes(attributes: Mapping[str, Any]) -> EncodedAttributes:
    return EncodedAttributes(_attributes(attributes))


_SHARED: dict[int, tuple[SharedAttributes, list[dict[str, Any]]]] = {}


def _shared_attributes(attributes: SharedAttributes) -> list[dict[str, Any]]:
    entry = _SHARED.get(id(attributes))
    if entry is None or entry[0] is not attributes:
        if len(_SHARED) >= _MAX_ENCODED:
            _SHARED.clear()
        entry = _SHARED[id(attributes)] = (attributes, _attributes(attributes))
    return entry[1]


def _attributes(attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for key, value in attributes.items():
        kind = type(value)
        if kind is str and key in _UNIQUE:
            out.append({"key": key, "value": {"stringValue": value}})
            continue
        if kind is str or kind is bool:
            cache_key = (key, value)
            entry = _ENCODED.get(cache_key)
            if entry is None:
                if len(_ENCODED) >= _MAX_ENCODED:
                    _ENCODED.clear()
                field = "stringValue" if kind is str else "boolValue"
                entry = _ENCODED[cache_key] = {"key": key, "value": {field: value}}
            out.append(entry)
            continue
        try:
            out.append({"key": key, "value": encode_value(value)})
        except (TypeError, ValueError) as exc:  # lose the attribute, not the span
            _log.warning("span attribute %r not encoded: %s", key, exc)
    return out


def json_span(
    handle: SpanHandle,
    end_attributes: Mapping[str, Any] | EncodedAttributes,
    events: list[Event],
    error: tuple[str] | None,
    end_ns: int,
) -> dict[str, Any]:
    """A span as an OTLP JSON object (for ``SpanTemplate``: any id or time may be a slot string)."""
    out: dict[str, Any] = {"traceId": handle.trace_id, "spanId": handle.span_id}
    if handle.tracestate:
        out["traceState"] = handle.tracestate
    if handle.parent_span_id is not None:
        out["parentSpanId"] = handle.parent_span_id
    if handle.name:
        out["name"] = handle.name
    out["kind"] = handle.kind
    out["startTimeUnixNano"] = str(handle.start_ns)
    out["endTimeUnixNano"] = str(end_ns)
    start = handle.attributes
    encoded: list[dict[str, Any]]
    if isinstance(end_attributes, EncodedAttributes):
        shared = _shared_attributes(start) if isinstance(start, SharedAttributes) else _attributes(start)
        encoded = shared + end_attributes if shared else end_attributes
    else:
        attributes = {**start, **end_attributes} if end_attributes else start
        encoded = _attributes(attributes) if attributes else []
    if encoded:
        out["attributes"] = encoded
    if events:
        json_events = []
        for name, when, event_attributes in events:
            event: dict[str, Any] = {"timeUnixNano": str(when)}
            if name:
                event["name"] = name
            if event_attributes:
                encoded = _attributes(event_attributes)
                if encoded:
                    event["attributes"] = encoded
            json_events.append(event)
        out["events"] = json_events
    status: dict[str, Any] = {}
    if error is not None:
        if error[0]:
            status["message"] = error[0]
        status["code"] = 2  # STATUS_CODE_ERROR
    out["status"] = status
    out["flags"] = span_flags(remote_parent=handle.parent_span_id is not None)
    return out
