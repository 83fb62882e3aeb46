#!/bin/sh
# The compose stack's `demo` service: live faults on the dashboards within a minute.
#
# 1. A proxy with the mixed profile in front of the mock server, fed a steady trickle of tool calls,
#    serving its metrics (OpenMetrics with trace_id exemplars) on :9464 for Prometheus. It binds the
#    container's interface, so it requires MCPFAULT_METRICS_TOKEN (Prometheus sends it as a bearer
#    token); the port is not published outside the compose network.
# 2. A benchmark loop: every iteration runs a bounded bench, sends spans to the collector and pushes
#    the judged outcomes to the Pushgateway. Output directories rotate through 10 names, so the
#    Pushgateway holds the last 10 runs (grouping label run=demo-N) and does not grow without bound.
set -eu

: "${OTLP_ENDPOINT:=http://otel-collector:4318}"
: "${PUSHGATEWAY:=http://pushgateway:9091}"
: "${BENCH_TASKS:=40}"
: "${BENCH_SLEEP_S:=15}"
if [ -z "${MCPFAULT_METRICS_TOKEN:-}" ] && [ -r /run/secrets/metrics_token ]; then
    MCPFAULT_METRICS_TOKEN=$(cat /run/secrets/metrics_token)
fi
export MCPFAULT_METRICS_TOKEN

feed() {
    printf '%s\n' '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcpfault-demo","version":"1"}}}'
    printf '%s\n' '{"jsonrpc":"2.0","method":"notifications/initialized"}'
    i=1
    while :; do
        printf '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"list_sites","arguments":{}}}\n' "$i"
        printf '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"get_site","arguments":{"site_id":"ams2"}}}\n' "$((i + 1))"
        printf '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"get_device_status","arguments":{"device_id":"ams2-core01"}}}\n' "$((i + 2))"
        printf '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"set_maintenance","arguments":{"device_id":"ams2-edge01","enabled":true,"reason":"demo"}}}\n' "$((i + 3))"
        i=$((i + 4))
        sleep 0.5
    done
}

feed | mcpfault proxy --config mixed --metrics-addr 0.0.0.0:9464 \
    --otlp-endpoint "$OTLP_ENDPOINT" --no-summary -- mcpfault mock-server >/dev/null &

n=0
while :; do
    out="/tmp/mcpfault-demo/demo-$((n % 10))"
    rm -rf "$out"
    # Bounded: 3 agents x BENCH_TASKS tasks, half-second call deadline; `timeout` guards a stall.
    timeout 300 mcpfault bench --profiles mixed --agents naive,retry-only,resilient --tasks "$BENCH_TASKS" \
        --out "$out" --otlp-endpoint "$OTLP_ENDPOINT" --pushgateway "$PUSHGATEWAY" || echo "bench iteration $n failed" >&2
    n=$((n + 1))
    sleep "$BENCH_SLEEP_S"
done
