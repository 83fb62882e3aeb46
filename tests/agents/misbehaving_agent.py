"""External agents that break the contract, one way each (tests/test_external_agent.py).

misbehaving_agent.py crash     writes to stderr, exits 3, no answer
misbehaving_agent.py hang      starts a child that sleeps too, writes its pid to PIDFILE, sleeps past any timeout
misbehaving_agent.py silent    exits 0 and writes nothing
misbehaving_agent.py invalid   writes status "done" with an answer that breaks the task's schema
misbehaving_agent.py otel      exports a span under TRACEPARENT to OTEL_EXPORTER_OTLP_ENDPOINT, then gives up
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def answer(document: object) -> None:
    with open(os.environ["MCPFAULT_ANSWER"], "w", encoding="utf-8") as out:
        json.dump(document, out)


def otel() -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.propagate import extract
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "my-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))  # the endpoint from the environment
    context = extract({"traceparent": os.environ["TRACEPARENT"]})
    with provider.get_tracer("my-agent").start_as_current_span("agent.plan", context=context):
        pass
    provider.shutdown()
    answer({"status": "failed", "reason": "exported a span, then gave up"})


def main(mode: str) -> None:
    if mode == "crash":
        print("Traceback (most recent call last):\nRuntimeError: the agent fell over", file=sys.stderr)
        sys.exit(3)
    if mode == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open(sys.argv[2], "w", encoding="utf-8") as out:
            out.write(str(child.pid))
        print("thinking...", file=sys.stderr, flush=True)
        time.sleep(600)
    if mode == "invalid":
        answer({"status": "done", "answer": {"unhealthy_devices": "all of them"}})
    if mode == "otel":
        otel()


if __name__ == "__main__":
    main(sys.argv[1])
