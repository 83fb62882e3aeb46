"""Every telemetry name mcpfault emits, in one place.

Spans, span events and metrics are read by other tools (Jaeger queries, Grafana panels, the analysis
layer, users' alert rules), so a name is an interface. Renaming one here is the only change needed
in this codebase; renaming one at all is a breaking change for those readers.

OpenTelemetry names follow the semantic conventions for MCP (docs/gen-ai/mcp.md, status
Development); ours live under the ``mcpfault.`` namespace so they can never collide with a future
convention. Prometheus names follow Prometheus' own rules: ``mcpfault_`` prefix, base units in the
name, counters ending in ``_total``.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

# --- OpenTelemetry attributes: semantic conventions for MCP ------------------------------------
MCP_METHOD_NAME: Final = "mcp.method.name"  # required on every MCP span
MCP_PROTOCOL_VERSION: Final = "mcp.protocol.version"
MCP_SESSION_ID: Final = "mcp.session.id"
MCP_RESOURCE_URI: Final = "mcp.resource.uri"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_PROMPT_NAME: Final = "gen_ai.prompt.name"
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
JSONRPC_REQUEST_ID: Final = "jsonrpc.request.id"  # always a string, even for numeric ids
RPC_RESPONSE_STATUS_CODE: Final = "rpc.response.status_code"
ERROR_TYPE: Final = "error.type"  # JSON-RPC code as a string, ERROR_TYPE_TOOL_ERROR, or OTHER
NETWORK_TRANSPORT: Final = "network.transport"
NETWORK_PROTOCOL_NAME: Final = "network.protocol.name"  # "http" over Streamable HTTP; unset on stdio
NETWORK_PROTOCOL_VERSION: Final = "network.protocol.version"
SERVER_ADDRESS: Final = "server.address"  # behind a proxy: the real server, not the proxy
SERVER_PORT: Final = "server.port"
CLIENT_ADDRESS: Final = "client.address"

# Well-known attribute values.
GEN_AI_OPERATION_EXECUTE_TOOL: Final = "execute_tool"  # gen_ai.operation.name on tools/call
ERROR_TYPE_TOOL_ERROR: Final = "tool_error"  # a result with isError: true
NETWORK_TRANSPORT_PIPE: Final = "pipe"  # stdio
NETWORK_TRANSPORT_TCP: Final = "tcp"  # Streamable HTTP
NETWORK_PROTOCOL_HTTP: Final = "http"
NETWORK_PROTOCOL_HTTP_VERSION: Final = "1.1"  # what the proxy's HTTP server speaks (proxy/http/server.py)
OTHER: Final = "_OTHER"  # the conventions' catch-all; also our Prometheus label overflow value

# --- OpenTelemetry attributes: mcpfault's own ---------------------------------------------------
FAULT_TYPE: Final = "mcpfault.fault.type"  # fault type name from the profile, absent when no fault fired
FAULT_MODE: Final = "mcpfault.fault.mode"
FAULT_RULE: Final = "mcpfault.fault.rule"  # index of the profile rule that fired
FAULT_FIELDS: Final = "mcpfault.fault.fields"  # the result fields a corruption changed (malformed wrong_type)
UPSTREAM_CONTACTED: Final = "mcpfault.upstream.contacted"  # bool: did the server see this request
DIRECTION: Final = "mcpfault.direction"  # DIRECTION_* below: which peer sent the request
DIRECTION_CLIENT_TO_SERVER: Final = "client_to_server"
DIRECTION_SERVER_TO_CLIENT: Final = "server_to_client"  # sampling, elicitation, roots: never faulted
CLIENT_RECEIVED: Final = "mcpfault.client.received"  # a Received value (below)
# What a client received for a request: the events file's ``client_received``, CLIENT_RECEIVED on its
# span, the summary's counts. An answer (response, tool_error, error, malformed), none (nothing,
# cancelled), the proxy's own error for a server gone (upstream_exited, server_restarted,
# upstream_unreachable, timeout: no server within the hold), an HTTP fault's stand-in (http_error,
# reset, stream_cut, session_expired), or a notification for a notification.
Received = Literal[
    "response",
    "tool_error",
    "error",
    "malformed",
    "nothing",
    "cancelled",
    "upstream_exited",
    "server_restarted",
    "upstream_unreachable",
    "timeout",
    "http_error",
    "reset",
    "stream_cut",
    "session_expired",
    "notification",
]
RECEIVED: Final[frozenset[str]] = frozenset(get_args(Received))
SERVER_GENERATION: Final = "mcpfault.server.generation"  # int: restarts of the server before this request

# What the server's processes did during a tools/call (mcpfault proxy --probe; probe/observer.py).
PROBE_CALL_ID: Final = "mcpfault.probe.call_id"  # the call window's id, as the sidecar saw it
SIDE_EFFECT_COUNT: Final = "mcpfault.side_effect.count"  # side effects in the window (events list at most a few)
FINDING_COUNT: Final = "mcpfault.finding.count"
SERVER_ACTED: Final = "mcpfault.server.acted"  # on a request whose response a fault lost: "true", "false", "unknown"
SIDE_EFFECT_TYPE: Final = "mcpfault.side_effect.type"  # exec, connect, file_open, file_delete, chmod, ...
SIDE_EFFECT_DETAIL: Final = "mcpfault.side_effect.detail"
SIDE_EFFECT_AMBIGUOUS: Final = "mcpfault.side_effect.ambiguous"  # True: calls overlapped; it may be another's
FINDING_CATEGORY: Final = "mcpfault.finding.category"  # runtime.exec, runtime.fs_write, ... (mcpfz_probe.policy)
FINDING_SEVERITY: Final = "mcpfault.finding.severity"  # low, medium, high, critical
FINDING_DETAIL: Final = "mcpfault.finding.detail"
DUPLICATE_ORIGINAL_CALL_ID: Final = "mcpfault.duplicate.original_call_id"  # the lost call this one repeated

# --- events.jsonl: the supervised server's lifecycle (proxy/process/supervisor.py's ServerEvents) -----------
# A death, a new generation started, and the first answer after a restart (with the downtime since the death).
SERVER_EXITED: Final = "server_exited"
SERVER_RESTARTED: Final = "server_restarted"
SERVER_BACK: Final = "server_back"
OWN_EXIT: Final = "none"  # the cause of a death no fault caused (also the fault_type label of crashes_total)

# --- Span events: the proxy's phases within one request span -----------------------------------
EVENT_UPSTREAM_SENT: Final = "upstream.sent"
EVENT_UPSTREAM_RECEIVED: Final = "upstream.received"
# Each fault type names its own event in its module (``event_name``, "mcpfault.<what it did>"): adding a
# fault is its module and a catalog line. The catalog refuses a name outside "mcpfault.", a name two
# types share, and one of the names below.
# A change through the control API (a rule added, removed or changed, faults off or on, a process
# action), on the next span each engine decides after it.
EVENT_CONTROL: Final = "mcpfault.control"
CONTROL_ACTION: Final = "mcpfault.control.action"  # add, remove, patch, off, on, reset, crash, stall, restart
CONTROL_VERSION: Final = "mcpfault.control.version"  # the rule set's version after the change
EVENT_SIDE_EFFECT: Final = "mcpfault.side_effect"
EVENT_FINDING: Final = "mcpfault.finding"
EVENT_DUPLICATE_SIDE_EFFECT: Final = "mcpfault.duplicate_side_effect"  # a retry acted again after a lost response

# --- W3C trace context carried in params._meta (unprefixed keys, per the conventions) ----------
META_TRACEPARENT: Final = "traceparent"
META_TRACESTATE: Final = "tracestate"
META_BAGGAGE: Final = "baggage"

# --- Prometheus: label names -------------------------------------------------------------------
LABEL_METHOD: Final = "method"
LABEL_FAULT_TYPE: Final = "fault_type"
LABEL_MODE: Final = "mode"
LABEL_TRANSPORT: Final = "transport"
LABEL_PROFILE: Final = "profile"
LABEL_AGENT: Final = "agent"
LABEL_OUTCOME: Final = "outcome"
LABEL_TYPE: Final = "type"
LABEL_CATEGORY: Final = "category"
LABEL_SEVERITY: Final = "severity"
EXEMPLAR_TRACE_ID: Final = "trace_id"  # the exemplar label Grafana links to a trace

# Label values.
FAULT_TYPE_NONE: Final = "none"  # fault_type when the request passed untouched
TRANSPORT_STDIO: Final = "stdio"
TRANSPORT_HTTP: Final = "http"
TRANSPORTS: Final = (TRANSPORT_STDIO, TRANSPORT_HTTP)

# --- Prometheus: the proxy's metrics, with their label names -----------------------------------
REQUESTS_TOTAL: Final = "mcpfault_requests_total"
REQUESTS_TOTAL_LABELS: Final = (LABEL_METHOD, LABEL_FAULT_TYPE, LABEL_TRANSPORT)
FAULTS_INJECTED_TOTAL: Final = "mcpfault_faults_injected_total"
FAULTS_INJECTED_TOTAL_LABELS: Final = (LABEL_FAULT_TYPE, LABEL_MODE)
REQUEST_DURATION_SECONDS: Final = "mcpfault_request_duration_seconds"  # end to end, as the client sees it
REQUEST_DURATION_SECONDS_LABELS: Final = (LABEL_METHOD, LABEL_TRANSPORT)
PROXY_ADDED_SECONDS: Final = "mcpfault_proxy_added_seconds"  # the proxy's own work, injected delays excluded
PROXY_ADDED_SECONDS_LABELS: Final = (LABEL_TRANSPORT,)
REQUESTS_IN_FLIGHT: Final = "mcpfault_requests_in_flight"
REQUESTS_IN_FLIGHT_LABELS: Final = (LABEL_TRANSPORT,)
UPSTREAM_EXITS_TOTAL: Final = "mcpfault_upstream_exits_total"
UPSTREAM_EXITS_TOTAL_LABELS: Final = (LABEL_TRANSPORT,)
# The supervised server (proxy/process/supervisor.py): restarts, crashes by the fault that caused them
# (FAULT_TYPE_NONE: it died by itself), and downtime from a crash to the first answer after restart.
SERVER_RESTARTS_TOTAL: Final = "mcpfault_server_restarts_total"
SERVER_CRASHES_TOTAL: Final = "mcpfault_server_crashes_total"
SERVER_CRASHES_TOTAL_LABELS: Final = (LABEL_FAULT_TYPE,)
SERVER_DOWNTIME_SECONDS: Final = "mcpfault_server_downtime_seconds"
SIDE_EFFECTS_TOTAL: Final = "mcpfault_side_effects_total"  # what the server's processes did (--probe)
SIDE_EFFECTS_TOTAL_LABELS: Final = (LABEL_TYPE,)
FINDINGS_TOTAL: Final = "mcpfault_findings_total"
FINDINGS_TOTAL_LABELS: Final = (LABEL_CATEGORY, LABEL_SEVERITY)
DUPLICATE_SIDE_EFFECTS_TOTAL: Final = "mcpfault_duplicate_side_effects_total"
FINDING_SEVERITIES: Final = ("low", "medium", "high", "critical")

# --- Prometheus: the harness's metrics (run/bench), with their label names ---------------------
TASK_OUTCOMES_TOTAL: Final = "mcpfault_task_outcomes_total"
TASK_OUTCOMES_TOTAL_LABELS: Final = (LABEL_PROFILE, LABEL_AGENT, LABEL_OUTCOME)
TASK_RECOVERY_SECONDS: Final = "mcpfault_task_recovery_seconds"
TASK_RECOVERY_SECONDS_LABELS: Final = (LABEL_FAULT_TYPE,)
TASK_RETRIES_TOTAL: Final = "mcpfault_task_retries_total"
TASK_RETRIES_TOTAL_LABELS: Final = (LABEL_PROFILE, LABEL_AGENT)
DUPLICATES_TOTAL: Final = "mcpfault_duplicates_total"
DUPLICATES_TOTAL_LABELS: Final = (LABEL_PROFILE, LABEL_AGENT)
SILENT_FAILURES_TOTAL: Final = "mcpfault_silent_failures_total"
SILENT_FAILURES_TOTAL_LABELS: Final = (LABEL_PROFILE, LABEL_AGENT)

# --- Histogram buckets (seconds) ---------------------------------------------------------------
# The MCP conventions' advice for mcp.*.operation.duration; using it verbatim keeps our panels
# comparable with any MCP client or server instrumented to the conventions.
MCP_DURATION_BUCKETS: Final = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# The proxy's own added time lives four decades below that: a minimal stdio relay adds ~34 us at
# p50 and ~150 us at p99, a stdlib HTTP relay ~540 us (REFERENCE.md). A 1-2.5-5 series from 10 us
# to 100 ms puts those figures in distinct buckets (each bucket edge within 2.5x of the next, so
# histogram_quantile's linear interpolation is off by less than that), and anything beyond 100 ms
# is a stall to investigate, not a latency to resolve finely. 13 buckets keep the series count low.
PROXY_ADDED_BUCKETS: Final = (
    10e-6,
    25e-6,
    50e-6,
    100e-6,
    250e-6,
    500e-6,
    1e-3,
    2.5e-3,
    5e-3,
    10e-3,
    25e-3,
    50e-3,
    100e-3,
)

# --- Prometheus label values for mcp method: the known MCP methods, both protocol eras ----------
# Anything else becomes OTHER: a peer chooses the method string, so passing it through would let a
# client mint unbounded series.
KNOWN_MCP_METHODS: Final = frozenset(
    {
        # lifecycle
        "initialize",
        "server/discover",
        "ping",
        # server features
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        # tasks (2025-11-25)
        "tasks/get",
        "tasks/result",
        "tasks/list",
        "tasks/cancel",
        # server-to-client requests
        "sampling/createMessage",
        "elicitation/create",
        "roots/list",
        # notifications
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/message",
        "notifications/resources/updated",
        "notifications/resources/list_changed",
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/roots/list_changed",
        "notifications/elicitation/complete",
        "notifications/tasks/status",
    }
)


# ===== the harness's and the mock server's own spans (all under the mcpfault. namespace) =====

# --- services (resource service.name; OTEL_SERVICE_NAME overrides them) -------------------------
HARNESS_SERVICE: Final = "mcpfault-harness"
MOCK_SERVICE: Final = "mcpfault-mock"
HARNESS_SCOPE: Final = "mcpfault.harness"
MOCK_SCOPE: Final = "mcpfault.mock"

# --- span names ---------------------------------------------------------------------------------
SESSION_SPAN: Final = "mcpfault.session"
TASK_SPAN: Final = "mcpfault.task"  # "mcpfault.task {workflow}"

# --- session and task spans ---------------------------------------------------------------------
PROFILE: Final = "mcpfault.profile"
AGENT: Final = "mcpfault.agent"
SESSION_INDEX: Final = "mcpfault.session.index"  # within its (profile, agent) cell
TASK_INDEX: Final = "mcpfault.task.index"  # within its (profile, agent) cell; marks a span as a task span
TASK_WORKFLOW: Final = "mcpfault.task.workflow"
TASK_TARGET: Final = "mcpfault.task.target"
TASK_TAG: Final = "mcpfault.task.tag"  # written into what the task creates (incident summaries)
TASK_OUTCOME: Final = "mcpfault.task.outcome"  # success, recovered, failed_detected, failed_silent, unjudged
# Each task is the root of its own trace; span links join it and its session's span both ways, an
# attribute on each link saying what the other end is (as OpenTelemetry links a batch and its items).
LINK_ROLE: Final = "mcpfault.link.role"
LINK_SESSION: Final = "session"  # on a task span's link: the session it ran in
LINK_TASK: Final = "task"  # on the session span's links: one per task it ran
# OpenInference's and OpenTelemetry's (incubating) session attribute, on the session span and each task
# span: the session span's trace id, by which Phoenix, Langfuse and the like group a session's traces.
SESSION_ID: Final = "session.id"

# --- attempt spans (CLIENT, one per request the harness sends) -----------------------------------
ATTEMPT: Final = "mcpfault.attempt"  # 1 for a call's first try, 2 for its first retry, ...
BACKOFF_S: Final = "mcpfault.backoff_s"  # seconds slept before this attempt
FAILURE: Final = "mcpfault.failure"  # the client's failure class (timeout, malformed, ...), absent when ok
RESULT_AS_OF: Final = "mcpfault.result.as_of"  # the revision an answer says it was computed at, when it says

# --- the mock server's writes: one span event per accepted write call ----------------------------
EVENT_STATE_CHANGE: Final = "mcpfault.state_change"
STATE_OP: Final = "mcpfault.state.op"  # set_maintenance, open_incident
STATE_REVISION: Final = "mcpfault.state.revision"  # the world's revision after the write
STATE_CHANGED: Final = "mcpfault.state.changed"  # False: an idempotent repeat or a known idempotency key
STATE_DEVICE_ID: Final = "mcpfault.state.device_id"
STATE_INCIDENT_ID: Final = "mcpfault.state.incident_id"  # open_incident: the incident created or returned
STATE_MAINTENANCE_ENABLED: Final = "mcpfault.state.maintenance_enabled"  # set_maintenance: the device's flag after

# ===== the LLM agent's model calls (GenAI semantic conventions, docs/gen-ai/gen-ai-spans.md) =====
# One CLIENT span per request to the model, named "{gen_ai.operation.name} {gen_ai.request.model}",
# a child of the task span, beside the task's tool attempt spans.
GEN_AI_OPERATION_CHAT: Final = "chat"  # gen_ai.operation.name of a Messages API call
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_SYSTEM: Final = "gen_ai.system"  # the older name of gen_ai.provider.name, still read by many backends
GEN_AI_PROVIDER_ANTHROPIC: Final = "anthropic"
GEN_AI_PROVIDER_OPENAI: Final = "openai"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"  # a list: ["tool_use"]
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
LLM_TURN: Final = "mcpfault.llm.turn"  # 1 for a task's first model call
LLM_RETRY_AFTER_S: Final = "mcpfault.llm.retry_after_s"  # on a failed try: how long the agent waits before the next
LLM_REPLAYED: Final = "mcpfault.llm.replayed"  # True: the answer came from a recording, not a model
LLM_COST_USD: Final = "mcpfault.llm.cost_usd"  # estimated from the price table; absent for an unknown model
LLM_HINTS: Final = "mcpfault.llm.reliability_hints"  # on task spans of the llm agent: was the model told

# ===== experiments (mcpfault experiment run) =====================================================
# The experiment is a root span, each action a child; every state transition is a span event.
EXPERIMENT_SERVICE: Final = "mcpfault-experiment"
EXPERIMENT_SCOPE: Final = "mcpfault.experiment"
EXPERIMENT_SPAN: Final = "mcpfault.experiment"
EXPERIMENT_ACTION_SPAN: Final = "mcpfault.experiment.action"
EXPERIMENT_ID: Final = "mcpfault.experiment.id"
EXPERIMENT_TITLE: Final = "mcpfault.experiment.title"
EXPERIMENT_ACTION_ID: Final = "mcpfault.experiment.action_id"
EVENT_EXPERIMENT_STATE: Final = "mcpfault.experiment.state_change"
EXPERIMENT_STATE_ATTR: Final = "mcpfault.experiment.state"
EXPERIMENT_REASON: Final = "mcpfault.experiment.reason"
# Metrics: the experiment's state (1 for the current one), and action transitions by state.
LABEL_STATE: Final = "state"
EXPERIMENT_STATE: Final = "mcpfault_experiment_state"
EXPERIMENT_STATE_LABELS: Final = (LABEL_STATE,)
EXPERIMENT_ACTIONS_TOTAL: Final = "mcpfault_experiment_actions_total"
EXPERIMENT_ACTIONS_TOTAL_LABELS: Final = (LABEL_STATE,)


def span_name(method: str, target: str | None) -> str:
    """``{mcp.method.name} {target}`` per the MCP conventions, or the bare method without a target.

    ``target`` is the tool name of a tools/call or the prompt name of a prompts/get.
    """
    return f"{method} {target}" if target else method
