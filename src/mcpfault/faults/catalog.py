"""The fault types a profile may name. Adding a fault is one module plus one line here."""

from __future__ import annotations

from collections.abc import Iterator

from mcpfault.faults.base import Fault
from mcpfault.faults.cpu_starve import CpuStarve
from mcpfault.faults.crash import Crash
from mcpfault.faults.error import Error
from mcpfault.faults.http_first_byte import FirstByteLatency
from mcpfault.faults.http_header_mismatch import HeaderMismatch
from mcpfault.faults.http_reset import Reset
from mcpfault.faults.http_session_expired import SessionExpired
from mcpfault.faults.http_status import HttpStatus
from mcpfault.faults.http_stream_cut import HttpStreamCut
from mcpfault.faults.latency import Latency
from mcpfault.faults.lie import Lie
from mcpfault.faults.malformed import Malformed
from mcpfault.faults.notification import Notification
from mcpfault.faults.oom_kill import OomKill
from mcpfault.faults.schema_drift import SchemaDrift
from mcpfault.faults.stale import Stale
from mcpfault.faults.stall import Stall
from mcpfault.faults.timeout import Timeout
from mcpfault.telemetry import names as telemetry_names

EVENT_PREFIX = "mcpfault."
# The span events that are not a fault's: a fault type may not take one of these names.
_OTHER_EVENTS = frozenset(
    value for key, value in vars(telemetry_names).items() if key.startswith("EVENT_") and isinstance(value, str)
)


class Catalog:
    """Fault types by name. Registering a name twice is an error, never a silent overwrite."""

    def __init__(self) -> None:
        self._types: dict[str, type[Fault]] = {}

    def register(self, fault_type: type[Fault]) -> None:
        name = fault_type.type_name
        if name in self._types:
            raise ValueError(f"fault type {name!r} is registered twice: {self._types[name]!r} and {fault_type!r}")
        if not callable(getattr(fault_type, "plan", None)):
            raise TypeError(f"fault type {name!r} ({fault_type!r}) has no plan(call, rng, ctx) method")
        event = getattr(fault_type, "event_name", None)
        if not isinstance(event, str) or not fault_type.MODES:
            raise TypeError(f"fault type {name!r} ({fault_type!r}) needs an event_name and at least one of MODES")
        if not event.startswith(EVENT_PREFIX) or event == EVENT_PREFIX or event in _OTHER_EVENTS:
            raise ValueError(
                f"fault type {name!r}: event_name {event!r} must be {EVENT_PREFIX}<what it did>, "
                "and not one of telemetry/names.py's other events"
            )
        if (sharing := self.of_event(event)) is not None:
            raise ValueError(f"fault types {sharing.type_name!r} and {name!r} both name their event {event!r}")
        self._types[name] = fault_type

    def get(self, name: str) -> type[Fault] | None:
        return self._types.get(name)

    def of_event(self, event: str) -> type[Fault] | None:
        """The fault type whose span event is ``event`` (event names are unique: ``register`` checks)."""
        return next((t for t in self._types.values() if t.event_name == event), None)

    def names(self) -> list[str]:
        return sorted(self._types)

    def in_order(self) -> tuple[str, ...]:
        """The type names in the order they were registered: how tables and reports list them."""
        return tuple(self._types)

    def __iter__(self) -> Iterator[type[Fault]]:
        return iter(self._types.values())


CATALOG = Catalog()
for _fault_type in (
    Timeout,
    Latency,
    Error,
    Malformed,
    Stale,
    SchemaDrift,
    HttpStatus,
    Reset,
    HttpStreamCut,
    SessionExpired,
    FirstByteLatency,
    HeaderMismatch,
    Notification,
    Crash,
    Stall,
    CpuStarve,
    OomKill,
    Lie,
):
    CATALOG.register(_fault_type)
