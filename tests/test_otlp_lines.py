"""telemetry/otlp_lines.py: the SDK-free pieces behind the fast span recorder give what the SDK gives."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource

from mcpfault.telemetry.otlp_lines import service_resource

INSTANCE_ID = "service.instance.id"


def sdk_resource(service_name: str, explicit: dict[str, str] | None) -> list[tuple[str, Any]]:
    """What ``tracing.service_resource`` built with the SDK before: the reference."""
    attributes: dict[str, str] = {}
    if not OTELResourceDetector().detect().attributes.get(SERVICE_NAME):
        attributes[SERVICE_NAME] = service_name
    attributes.update(explicit or {})
    return list(Resource.create(attributes).attributes.items())


ENVIRONMENTS = [
    {},
    {"OTEL_SERVICE_NAME": "renamed"},
    {"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attributes,deployment.environment=a%20b, k = v ,bad,=empty"},
    {"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attributes,team=x", "OTEL_SERVICE_NAME": "renamed"},
    {"OTEL_SERVICE_NAME": ""},
]


@pytest.mark.parametrize("environment", ENVIRONMENTS)
@pytest.mark.parametrize("explicit", [None, {"service.name": "explicit", "extra": "y"}, {"extra": "y"}])
def test_the_resource_is_the_sdks_in_content_and_order(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], explicit: dict[str, str] | None
) -> None:
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    ours = service_resource("mcpfault-test", explicit)
    expected = sdk_resource("mcpfault-test", explicit)
    assert ours.schema_url == ""
    # The instance id is random per process (the SDK's and ours differ); its place and shape do not.
    assert [k for k, _ in ours.attributes.items()] == [k for k, _ in expected]
    assert [(k, v) for k, v in ours.attributes.items() if k != INSTANCE_ID] == [
        (k, v) for k, v in expected if k != INSTANCE_ID
    ]
    assert len(ours.attributes[INSTANCE_ID]) == 36
    assert service_resource("other")[0][INSTANCE_ID] == ours.attributes[INSTANCE_ID]  # one per process


def test_other_detectors_are_left_to_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPERIMENTAL_RESOURCE_DETECTORS", "process")
    ours = service_resource("mcpfault-test")
    assert "process.pid" in ours.attributes and ours.attributes[SERVICE_NAME] == "mcpfault-test"


def test_the_fast_recorder_imports_neither_the_sdk_nor_the_logging_set_up() -> None:
    code = (
        "import sys, tempfile, pathlib\n"
        "from mcpfault.telemetry.fastspans import SpanRecorder\n"
        "with tempfile.TemporaryDirectory() as d:\n"
        "    r = SpanRecorder('svc', spans_file=pathlib.Path(d) / 's.jsonl')\n"
        "    r.end(r.start('x', 2, None, {}, 1), {}, [], None, 2)\n"
        "    r.shutdown()\n"
        "    assert (pathlib.Path(d) / 's.jsonl').read_bytes().count(b'spanId') == 1\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in {'structlog', 'rich'}\n"
        "               or (m.startswith('opentelemetry') and m not in {'opentelemetry', 'opentelemetry.sdk',\n"
        "                                                            'opentelemetry.sdk.version'}))\n"
        "assert heavy == [], heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
