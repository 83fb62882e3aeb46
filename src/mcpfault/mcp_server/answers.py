"""What each tool answers: a TypedDict each, from which the SDK derives the outputSchema and sends
structuredContent."""

from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12


class FaultType(TypedDict):
    name: str
    modes: list[str]
    transports: list[str]
    needs_process: bool
    description: str


class FaultTypes(TypedDict):
    fault_types: list[FaultType]


class Validation(TypedDict):
    valid: bool
    name: str | None
    rules: int
    problems: list[str]


class Written(TypedDict):
    path: str
    written: bool
    dry_run: bool
    message: str
    undo: str


class ExperimentRun(TypedDict):
    dry_run: bool
    message: str
    timeline: list[str]
    verdict: str | None
    state: str | None
    exit_code: int | None
    out_dir: str | None
    undo: str


class BenchRun(TypedDict):
    run_dir: str
    tasks: int
    outcomes: dict[str, int]
    wall_s: float


class Report(TypedDict):
    path: str
    text: str
    truncated: bool
    bytes: int


class RunEntry(TypedDict):
    path: str
    kind: str
    modified: str


class Runs(TypedDict):
    runs: list[RunEntry]
    truncated: bool


class ProxyStatus(TypedDict):
    faults_enabled: bool
    rules: int
    requests_total: int
    faults_total: int
    transport: str
    server_pid: int | None
    faults: list[dict[str, Any]]


class AuditRun(TypedDict):
    dry_run: bool
    passed: bool | None
    message: str
    plan: list[str]
    tools: list[dict[str, Any]]
    audit_json: str | None
    undo: str


class FaultChange(TypedDict):
    dry_run: bool
    action: str
    message: str
    result: dict[str, Any] | None
    undo: str
