"""Every ``OTEL_*`` variable mcpfault reads, read here once: the one place that resolves the OTLP
endpoint, the exporter's protocol, headers, timeout, compression and TLS files, the sampler, and
whether tracing is on at all.

Each ``OTEL_EXPORTER_OTLP_*`` setting comes in the traces form (``OTEL_EXPORTER_OTLP_TRACES_*``),
which wins, and the generic one, as the specification says. A value mcpfault cannot honour (the
grpc protocol, a sampler it does not implement, ``deflate``, a certificate file that is not there)
raises ``OtelConfigError`` at start, naming the variable and what is accepted: silently doing
something else would leave an operator reading traces that are not what they asked for. Variables
that do not concern a proxy's traces (the metrics and logs exporters, the SDK's span limits) are
named in ``ignored`` so the caller can say so, once.

Import-light on purpose: the untraced proxy reads this on every start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal
from urllib.parse import SplitResult, urlunsplit

from mcpfault.errors import MCPFaultError
from mcpfault.loopback import UrlError, check_http_url, hide_credentials

Protocol = Literal["http/protobuf", "http/json"]
SamplerName = Literal[
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
]

SDK_DISABLED: Final = "OTEL_SDK_DISABLED"
SERVICE_NAME: Final = "OTEL_SERVICE_NAME"
RESOURCE_ATTRIBUTES: Final = "OTEL_RESOURCE_ATTRIBUTES"
TRACES_SAMPLER: Final = "OTEL_TRACES_SAMPLER"
TRACES_SAMPLER_ARG: Final = "OTEL_TRACES_SAMPLER_ARG"
TRACES_EXPORTER: Final = "OTEL_TRACES_EXPORTER"
PROPAGATORS: Final = "OTEL_PROPAGATORS"
_OTLP: Final = "OTEL_EXPORTER_OTLP_"
_OTLP_TRACES: Final = "OTEL_EXPORTER_OTLP_TRACES_"
# The OTLP exporter's settings, each read as OTEL_EXPORTER_OTLP_TRACES_<X>, else OTEL_EXPORTER_OTLP_<X>.
OTLP_SETTINGS: Final = (
    "ENDPOINT",
    "PROTOCOL",
    "HEADERS",
    "TIMEOUT",
    "COMPRESSION",
    "CERTIFICATE",
    "CLIENT_CERTIFICATE",
    "CLIENT_KEY",
)
OTLP_ENDPOINT: Final = _OTLP + "ENDPOINT"
OTLP_TRACES_ENDPOINT: Final = _OTLP_TRACES + "ENDPOINT"

PROTOCOLS: Final[tuple[Protocol, ...]] = ("http/protobuf", "http/json")
SAMPLERS: Final[tuple[SamplerName, ...]] = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
DEFAULT_SAMPLER: Final[SamplerName] = "parentbased_always_on"
DEFAULT_TIMEOUT_S: Final = 10.0  # the specification's default, 10000 ms
_TRUE: Final = frozenset({"true"})  # the specification: only "true", case-insensitive, means true
_PROPAGATORS_OK: Final = frozenset({"tracecontext", "baggage"})  # what crosses the proxy in params._meta
TRACES_PATH: Final = "v1/traces"
COLLECTOR_EXAMPLE: Final = "the collector's OTLP/HTTP address, for example http://127.0.0.1:4318"

# Known, and of no concern to a proxy's traces: named once at start as ignored, never an error.
IGNORED: Final[Mapping[str, str]] = {
    "OTEL_METRICS_EXPORTER": "mcpfault's metrics are Prometheus, served at --metrics-addr",
    "OTEL_LOGS_EXPORTER": "mcpfault's logs go to stderr (see --log-format)",
    "OTEL_EXPORTER_OTLP_INSECURE": "a gRPC setting; mcpfault exports over OTLP/HTTP",
    "OTEL_EXPORTER_OTLP_TRACES_INSECURE": "a gRPC setting; mcpfault exports over OTLP/HTTP",
}
_IGNORED_PREFIXES: Final = (
    ("OTEL_EXPORTER_OTLP_METRICS_", "mcpfault's metrics are Prometheus, served at --metrics-addr"),
    ("OTEL_EXPORTER_OTLP_LOGS_", "mcpfault's logs go to stderr"),
    ("OTEL_METRIC_", "mcpfault's metrics are Prometheus"),
    ("OTEL_BLRP_", "mcpfault exports no logs"),
    ("OTEL_BSP_", "the proxy's span writer batches 512 spans or 0.2 s, whichever comes first"),
    ("OTEL_ATTRIBUTE_", "mcpfault's spans carry a fixed, small set of attributes"),
    ("OTEL_SPAN_", "mcpfault's spans carry a fixed, small set of attributes"),
    ("OTEL_EVENT_", "mcpfault's spans carry a fixed, small set of events"),
    ("OTEL_LINK_", "mcpfault's spans have no links"),
    ("OTEL_PYTHON_", "the proxy's spans do not come from the Python SDK"),
    ("OTEL_EXPERIMENTAL_", "experimental SDK settings are not read"),
)


class OtelConfigError(MCPFaultError, ValueError):
    """An ``OTEL_*`` value mcpfault cannot honour: names the variable, the value and what is accepted."""


@dataclass(frozen=True, slots=True)
class Sampler:
    """``OTEL_TRACES_SAMPLER`` and its argument: which new spans are recorded.

    ``parent_based``: a span with a remote parent follows the parent's sampled flag; ``root`` decides
    the others (and every span when not parent-based): ``on``, ``off`` or a trace-id ``ratio``.
    """

    name: SamplerName = DEFAULT_SAMPLER
    ratio: float = 1.0

    @property
    def parent_based(self) -> bool:
        return self.name.startswith("parentbased_")

    @property
    def root(self) -> Literal["on", "off", "ratio"]:
        base = self.name.removeprefix("parentbased_")
        return "on" if base == "always_on" else "off" if base == "always_off" else "ratio"

    @property
    def ratio_bound(self) -> int:
        """Trace ids whose lower 64 bits are below this are sampled (the SDK's ``TraceIdRatioBased`` rule)."""
        return round(self.ratio * (1 << 64))


@dataclass(frozen=True, slots=True)
class OtlpExport:
    """Where and how spans go over OTLP/HTTP."""

    url: str  # the full traces URL
    protocol: Protocol = "http/protobuf"
    headers: Mapping[str, str] = field(default_factory=dict)  # credentials: never logged
    timeout_s: float = DEFAULT_TIMEOUT_S
    compression: Literal["gzip"] | None = None
    certificate: Path | None = None  # a CA bundle to verify the collector with
    client_certificate: Path | None = None
    client_key: Path | None = None

    @property
    def shown(self) -> str:
        """The URL for messages: credentials removed."""
        return redact_userinfo(self.url)

    @property
    def content_type(self) -> str:
        return "application/json" if self.protocol == "http/json" else "application/x-protobuf"


@dataclass(frozen=True, slots=True)
class OtelSettings:
    """What the ``OTEL_*`` environment (and the explicit endpoint) ask of tracing."""

    disabled: bool = False  # OTEL_SDK_DISABLED=true
    export: OtlpExport | None = None  # None: no OTLP endpoint given anywhere, or OTEL_TRACES_EXPORTER=none
    sampler: Sampler = Sampler()
    propagate: bool = True  # False for OTEL_PROPAGATORS=none
    ignored: tuple[tuple[str, str], ...] = ()  # (variable, why) set in the environment but not read


def read(otlp_endpoint: str | None = None, environ: Mapping[str, str] | None = None) -> OtelSettings:
    """The settings from ``environ`` (default ``os.environ``) and an explicit endpoint (``--otlp-endpoint``,
    a collector's base or its full traces URL), which wins over the environment's.

    Raises ``OtelConfigError`` for any value that cannot be honoured.
    """
    env = os.environ if environ is None else environ
    disabled = _get(env, SDK_DISABLED).lower() in _TRUE
    exporter = _get(env, TRACES_EXPORTER).lower()
    if exporter not in ("", "otlp", "none"):
        raise OtelConfigError(
            f"{TRACES_EXPORTER}={exporter!r} is not supported: mcpfault's proxy sends spans over OTLP "
            "(otlp, the default) or not at all (none); files are written with --spans"
        )
    url = traces_url(otlp_endpoint, env)
    # none turns off the environment's endpoint; an endpoint given explicitly (--otlp-endpoint) still counts.
    off = exporter == "none" and not (otlp_endpoint and otlp_endpoint.strip())
    export = None if url is None or off else otlp_export(url, env)
    return OtelSettings(
        disabled=disabled,
        export=export,
        sampler=_sampler(env),
        propagate=_propagators(env),
        ignored=_ignored(env),
    )


def traces_url(otlp_endpoint: str | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """The traces URL: ``otlp_endpoint`` (a base or a full URL) if given, else
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (taken verbatim, as the specification says of the signal's
    own variable), else ``OTEL_EXPORTER_OTLP_ENDPOINT`` with ``/v1/traces`` appended. None when none is set.

    Raises ``OtelConfigError`` for anything but an http(s) URL with a host.
    """
    env = os.environ if environ is None else environ
    if otlp_endpoint and otlp_endpoint.strip():
        return with_traces_path(otlp_endpoint, "--otlp-endpoint")
    signal = _get(env, OTLP_TRACES_ENDPOINT)
    if signal:
        _check_url(signal, OTLP_TRACES_ENDPOINT)
        return signal
    generic = _get(env, OTLP_ENDPOINT)
    return with_traces_path(generic, OTLP_ENDPOINT) if generic else None


def tracing_wanted(
    spans_file: object | None, otlp_endpoint: str | None, environ: Mapping[str, str] | None = None
) -> bool:
    """Whether anything asks for spans: a span file, an explicit endpoint or one in the environment."""
    return spans_file is not None or traces_url(otlp_endpoint, environ) is not None


def with_traces_path(endpoint: str, where: str = "OTLP endpoint") -> str:
    """The full traces URL for an endpoint given as a base (``http://host:4318``) or in full.

    People pass the collector's base URL as they would in ``OTEL_EXPORTER_OTLP_ENDPOINT``; the signal
    path is appended as the specification does there.
    """
    parts = _check_url(endpoint.strip(), where)
    path = parts.path.rstrip("/")
    if not path.endswith("/" + TRACES_PATH):
        path = f"{path}/{TRACES_PATH}"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


redact_userinfo = hide_credentials  # the one helper (loopback.py), by the name telemetry's callers use


def parse_headers(raw: str) -> dict[str, str]:
    """``key=value,key2=value2`` (values URL-encoded), as the specification writes ``OTEL_EXPORTER_OTLP_HEADERS``."""
    from urllib.parse import unquote

    headers: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        name = unquote(name).strip()
        if not sep or not name or any(c.isspace() or c in '()<>@,;:\\"/[]?={}' for c in name):
            # The value may be a credential: never quote it back.
            raise OtelConfigError(
                f"OTEL_EXPORTER_OTLP_[TRACES_]HEADERS has an entry that is not name=value (name {name[:40]!r}); "
                "write it as name1=value1,name2=value2 with URL-encoded values"
            )
        headers[name] = unquote(value).strip()
    return headers


# --- the pieces -------------------------------------------------------------------------------------


def _get(env: Mapping[str, str], name: str) -> str:
    return env.get(name, "").strip()


def _otlp(env: Mapping[str, str], setting: str) -> tuple[str, str]:
    """(variable, value) of an OTLP setting: the traces form when set, else the generic one."""
    for name in (_OTLP_TRACES + setting, _OTLP + setting):
        value = _get(env, name)
        if value:
            return name, value
    return _OTLP + setting, ""


def _check_url(endpoint: str, where: str) -> SplitResult:
    try:
        return check_http_url(endpoint, where, COLLECTOR_EXAMPLE)
    except UrlError as exc:
        raise OtelConfigError(str(exc)) from None


def otlp_export(url: str, environ: Mapping[str, str] | None = None) -> OtlpExport:
    """How to send to the traces ``url``: the ``OTEL_EXPORTER_OTLP_[TRACES_]*`` settings of ``environ``."""
    env = os.environ if environ is None else environ
    name, protocol = _otlp(env, "PROTOCOL")
    if protocol and protocol not in PROTOCOLS:
        hint = " (gRPC is not supported: point it at the collector's OTLP/HTTP port, usually 4318)"
        raise OtelConfigError(
            f"{name}={protocol!r} is not supported; use http/protobuf (the default) or http/json"
            + (hint if protocol == "grpc" else "")
        )
    name, timeout = _otlp(env, "TIMEOUT")
    timeout_s = DEFAULT_TIMEOUT_S
    if timeout:
        try:
            timeout_ms = float(timeout)
        except ValueError:
            timeout_ms = -1.0
        if not 0 < timeout_ms < float("inf"):
            raise OtelConfigError(f"{name}={timeout!r}: give the export timeout in milliseconds, a number above 0")
        timeout_s = timeout_ms / 1000
    name, compression = _otlp(env, "COMPRESSION")
    if compression.lower() not in ("", "none", "gzip"):
        raise OtelConfigError(f"{name}={compression!r} is not supported; use gzip or none")
    files = {}
    for setting in ("CERTIFICATE", "CLIENT_CERTIFICATE", "CLIENT_KEY"):
        name, value = _otlp(env, setting)
        if value:
            path = Path(value).expanduser()
            if not path.is_file():
                raise OtelConfigError(f"{name}={value!r}: no such file; give the path of a PEM file")
            files[setting] = path
    if ("CLIENT_CERTIFICATE" in files) != ("CLIENT_KEY" in files):
        raise OtelConfigError(
            "OTEL_EXPORTER_OTLP_[TRACES_]CLIENT_CERTIFICATE and ..._CLIENT_KEY go together: give both or neither"
        )
    _, raw_headers = _otlp(env, "HEADERS")
    return OtlpExport(
        url=url,
        protocol=protocol or "http/protobuf",  # checked against PROTOCOLS above
        headers=parse_headers(raw_headers),
        timeout_s=timeout_s,
        compression="gzip" if compression.lower() == "gzip" else None,
        certificate=files.get("CERTIFICATE"),
        client_certificate=files.get("CLIENT_CERTIFICATE"),
        client_key=files.get("CLIENT_KEY"),
    )


def _sampler(env: Mapping[str, str]) -> Sampler:
    name = _get(env, TRACES_SAMPLER).lower() or DEFAULT_SAMPLER
    if name not in SAMPLERS:
        raise OtelConfigError(f"{TRACES_SAMPLER}={name!r} is not supported; use one of {', '.join(SAMPLERS)}")
    arg = _get(env, TRACES_SAMPLER_ARG)
    ratio = 1.0
    if name.endswith("traceidratio") and arg:
        try:
            ratio = float(arg)
        except ValueError:
            ratio = -1.0
        if not 0.0 <= ratio <= 1.0:
            raise OtelConfigError(f"{TRACES_SAMPLER_ARG}={arg!r}: {name} takes a sampling ratio from 0 to 1")
    return Sampler(name, ratio)  # checked against SAMPLERS above


def _propagators(env: Mapping[str, str]) -> bool:
    raw = _get(env, PROPAGATORS)
    if not raw:
        return True
    chosen = {p.strip().lower() for p in raw.split(",") if p.strip()}
    if chosen == {"none"}:
        return False
    unsupported = sorted(chosen - _PROPAGATORS_OK)
    if unsupported or "tracecontext" not in chosen:
        raise OtelConfigError(
            f"{PROPAGATORS}={raw!r}: mcpfault propagates W3C tracecontext (and passes baggage through) in "
            "params._meta; use tracecontext, tracecontext,baggage or none"
        )
    return True


_READ: Final = frozenset(
    {
        SDK_DISABLED,
        SERVICE_NAME,
        RESOURCE_ATTRIBUTES,
        TRACES_SAMPLER,
        TRACES_SAMPLER_ARG,
        TRACES_EXPORTER,
        PROPAGATORS,
        *(_OTLP + s for s in OTLP_SETTINGS),
        *(_OTLP_TRACES + s for s in OTLP_SETTINGS),
    }
)


def _ignored(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    found = []
    for name in sorted(env):
        if not name.startswith("OTEL_") or name in _READ or not env[name].strip():
            continue
        why = IGNORED.get(name) or next((w for prefix, w in _IGNORED_PREFIXES if name.startswith(prefix)), None)
        found.append((name, why or "not a variable mcpfault knows"))
    return tuple(found)
