"""The compose stack's files: compose.yaml, the collector and Prometheus configs, Grafana provisioning.

No container engine runs here, so what only a container can run (collector, Jaeger, Grafana) is checked
by schema, and the rest for real: promtool checks the Prometheus config, Debian's docker-compose
validates compose.yaml offline, and every PromQL expression of every dashboard panel is evaluated by a
real Prometheus scraping a real ``mcpfault proxy`` (in front of the mock server, with the mixed fault
profile) and a real Pushgateway holding pushed benchmark metrics, using deploy/prometheus.yml itself
with its targets pointed at loopback ports.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PROFILES, ROOT, ProxyProcess, call, request
from tests.http_support import free_port
from tests.prometheus_support import PROMETHEUS, PUSHGATEWAY, api_get, prometheus, pushgateway

COMPOSE = ROOT / "compose.yaml"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus.yml"
COLLECTOR_CONFIG = ROOT / "deploy" / "otel-collector.yaml"
METRICS_TOKEN = ROOT / "deploy" / "metrics-token"
DATASOURCES = ROOT / "grafana" / "provisioning" / "datasources" / "datasources.yaml"
DASHBOARD_PROVIDERS = ROOT / "grafana" / "provisioning" / "dashboards" / "dashboards.yaml"
DASHBOARDS = sorted((ROOT / "grafana" / "dashboards").glob("*.json"))
PROMTOOL = Path("/usr/bin/promtool")
DOCKER_COMPOSE = Path("/usr/bin/docker-compose")
SYSTEM_PYTHON = Path("/usr/bin/python3")

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
# (dashboard file stem, panel id, refId): panels that must show data once the stack has traffic.
KEY_PANELS = {
    ("faults", 1, "A"),  # request rate by method
    ("faults", 2, "A"),  # faults injected by type and mode
    ("recovery", 1, "A"),  # task outcomes
    ("recovery", 2, "A"),  # silent-failure rate
    ("recovery", 5, "B"),  # recovery time p95
    ("overhead", 1, "A"),  # proxy added latency p50
}


def load_yaml(path: Path) -> Any:
    """Parse YAML with PyYAML: the venv's if installed, else the system Python's (Debian python3-yaml)."""
    try:
        yaml: Any = importlib.import_module("yaml")
    except ImportError:
        yaml = None
    if yaml is not None:
        with path.open(encoding="utf-8") as text:
            return yaml.safe_load(text)
    if not SYSTEM_PYTHON.exists():
        pytest.skip("PyYAML is needed: pip install pyyaml, or apt-get install python3-yaml")
    code = "import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)"
    done = subprocess.run([str(SYSTEM_PYTHON), "-c", code, str(path)], capture_output=True, text=True, timeout=30)
    if "No module named 'yaml'" in done.stderr:
        pytest.skip("PyYAML is needed: pip install pyyaml, or apt-get install python3-yaml")
    assert done.returncode == 0, f"{path} is not valid YAML:\n{done.stderr}"
    return json.loads(done.stdout)


# --- Prometheus config, compose file, collector config -------------------------------------------


@pytest.mark.skipif(not PROMTOOL.exists(), reason="needs /usr/bin/promtool (apt-get install prometheus)")
def test_promtool_accepts_the_prometheus_config() -> None:
    done = subprocess.run(
        [str(PROMTOOL), "check", "config", str(PROMETHEUS_CONFIG)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def _tag_version(image: str) -> tuple[int, ...]:
    match = re.fullmatch(r"[^:]+:v?(\d+)\.(\d+)\.(\d+)", image)
    assert match, f"image {image!r} is not pinned to a version tag"
    return tuple(int(part) for part in match.groups())


def test_compose_file_publishes_on_loopback_and_mounts_repo_files() -> None:
    compose = load_yaml(COMPOSE)
    services: dict[str, Any] = compose["services"]
    assert {"otel-collector", "jaeger", "prometheus", "pushgateway", "grafana", "demo"} <= set(services)

    published: list[Any] = []
    for name, service in services.items():
        for port in service.get("ports", []):
            if isinstance(port, dict):  # long syntax
                assert port.get("host_ip") == "127.0.0.1", f"{name}: {port} is not bound to 127.0.0.1"
                published.append(port)
                continue
            assert isinstance(port, str), f"{name}: give ports as quoted strings, not {port!r}"
            assert port.startswith("127.0.0.1:") and port.count(":") == 2, f"{name}: {port} is not on 127.0.0.1"
            published.append(port)
    assert {p.split(":")[1] for p in published} >= {"3000", "4317", "4318", "9090", "9091", "16686"}

    jaeger = services["jaeger"]["image"]
    assert jaeger.startswith("jaegertracing/jaeger:")
    assert _tag_version(jaeger) <= (2, 20, 0), "Jaeger after 2.20.0 drops the /api/traces Grafana uses"
    for name in ("otel-collector", "prometheus", "pushgateway", "grafana"):
        _tag_version(services[name]["image"])
    assert "contrib" in services["otel-collector"]["image"]
    assert "--enable-feature=exemplar-storage" in services["prometheus"]["command"]

    mounts = {}
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source, target = volume.split(":")[:2]
            assert source.startswith("./"), f"{name}: {volume} is not a file of the repository"
            assert (ROOT / source).exists(), f"{name} mounts {source}, which does not exist"
            mounts[target] = ROOT / source
    assert mounts["/etc/prometheus/prometheus.yml"] == PROMETHEUS_CONFIG.resolve()
    assert mounts["/etc/otelcol-contrib/config.yaml"] == COLLECTOR_CONFIG.resolve()
    assert mounts["/var/lib/grafana/dashboards"] == (ROOT / "grafana" / "dashboards").resolve()

    demo = services["demo"]
    assert demo["build"]["dockerfile"] == "Dockerfile" and (ROOT / "Dockerfile").exists()
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in dockerfile and "\nUSER " in dockerfile and "pip install ." in dockerfile
    script = (ROOT / "deploy" / "demo.sh").read_text()
    assert "--otlp-endpoint" in script and "--pushgateway" in script and "timeout " in script

    grafana_env = services["grafana"]["environment"]
    assert grafana_env["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert grafana_env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"


@pytest.mark.skipif(
    not DOCKER_COMPOSE.exists(), reason="needs /usr/bin/docker-compose (apt-get install docker-compose) to validate"
)
def test_docker_compose_validates_the_file_offline() -> None:
    done = subprocess.run(
        [str(DOCKER_COMPOSE), "-f", str(COMPOSE), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_collector_sends_traces_to_jaeger_and_metrics_to_prometheus() -> None:
    config = load_yaml(COLLECTOR_CONFIG)
    protocols = config["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"].endswith(":4317")
    assert protocols["http"]["endpoint"].endswith(":4318")
    jaeger = config["exporters"]["otlp/jaeger"]
    assert jaeger["endpoint"] == "jaeger:4317"
    assert jaeger["tls"]["insecure"] is True
    prometheus = config["exporters"]["prometheus"]
    assert prometheus["enable_open_metrics"] is True
    port = prometheus["endpoint"].rsplit(":", 1)[1]
    scraped = {
        t for job in load_yaml(PROMETHEUS_CONFIG)["scrape_configs"] for s in job["static_configs"] for t in s["targets"]
    }
    assert f"otel-collector:{port}" in scraped

    pipelines = config["service"]["pipelines"]
    assert pipelines["traces"]["receivers"] == ["otlp"] and pipelines["traces"]["exporters"] == ["otlp/jaeger"]
    assert pipelines["metrics"]["receivers"] == ["otlp"] and pipelines["metrics"]["exporters"] == ["prometheus"]
    for pipeline in pipelines.values():
        for processor in pipeline.get("processors", []):
            assert processor in config["processors"]


# --- Grafana provisioning and dashboards --------------------------------------------------------


def provisioned_uids() -> dict[str, dict[str, Any]]:
    sources = load_yaml(DATASOURCES)
    assert sources["apiVersion"] == 1
    return {source["uid"]: source for source in sources["datasources"]}


def test_grafana_provisioning() -> None:
    uids = provisioned_uids()
    prometheus, jaeger = uids["prometheus"], uids["jaeger"]
    assert prometheus["type"] == "prometheus" and prometheus["url"] == "http://prometheus:9090"
    assert prometheus["jsonData"]["exemplarTraceIdDestinations"] == [{"name": "trace_id", "datasourceUid": "jaeger"}]
    assert jaeger["type"] == "jaeger" and jaeger["url"] == "http://jaeger:16686"

    providers = load_yaml(DASHBOARD_PROVIDERS)
    assert providers["apiVersion"] == 1
    (provider,) = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"] == "/var/lib/grafana/dashboards"
    assert {d.stem for d in DASHBOARDS} == {"faults", "recovery", "overhead"}


def template_names(expr: str) -> set[str]:
    return set(re.findall(r"\$\{?(\w+)", expr))


def _uids_in(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = (
            {node["uid"]}
            if isinstance(node.get("uid"), str) and node.get("type") in ("prometheus", "jaeger")
            else set()
        )
        for key, value in node.items():
            if key == "datasource" and isinstance(value, str):
                found.add(value)
            found |= _uids_in(value)
        return found
    if isinstance(node, list):
        return set().union(*(_uids_in(item) for item in node)) if node else set()
    return set()


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_dashboard_is_valid(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["uid"] and dashboard["title"]
    panels = dashboard["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids in {path.name}"
    for panel in panels:
        grid = panel["gridPos"]
        assert set(grid) == {"x", "y", "w", "h"} and grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        assert panel["targets"], f"panel {panel['title']} has no query"
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids))
    assert _uids_in(dashboard) <= set(provisioned_uids())

    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    used = {name for panel in panels for t in panel["targets"] for name in template_names(t["expr"])}
    builtin = {"__rate_interval", "__interval", "__range"}
    assert used - builtin <= set(variables), f"undefined template variables: {used - builtin - set(variables)}"
    assert "job" in variables
    for variable in variables.values():
        assert variable["datasource"]["uid"] == "prometheus"
        assert re.fullmatch(r"label_values\(\w+, \w+\)", variable["query"]["query"])

    # Latency and recovery panels link their exemplars to traces.
    for panel in panels:
        if panel["fieldConfig"]["defaults"].get("unit") == "s":
            assert all(t.get("exemplar") for t in panel["targets"] if "histogram_quantile" in t["expr"]), panel["title"]


# --- every panel's PromQL, evaluated by a real Prometheus ----------------------------------------


def substitute(expr: str) -> str:
    expr = re.sub(r"\$\{?__rate_interval\}?", "30s", expr)
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


def prometheus_config(metrics_port: int, gateway_port: int) -> dict[str, Any]:
    """deploy/prometheus.yml with its targets on loopback; the collector's jobs dropped (no collector here)."""
    config = load_yaml(PROMETHEUS_CONFIG)
    config["global"].update(scrape_interval="1s", scrape_timeout="1s")
    targets = {"demo:9464": f"127.0.0.1:{metrics_port}", "pushgateway:9091": f"127.0.0.1:{gateway_port}"}
    jobs = []
    for job in config["scrape_configs"]:
        if job["job_name"] == "otel-collector":
            continue
        for static in job["static_configs"]:
            static["targets"] = [targets[t] for t in static["targets"]]
        auth = job.get("authorization")
        if auth and "credentials_file" in auth:
            auth["credentials_file"] = str(PROMETHEUS_CONFIG.parent / auth["credentials_file"])
        jobs.append(job)
    assert {j["job_name"] for j in jobs} == {"mcpfault-proxy", "pushgateway"}
    config["scrape_configs"] = jobs
    return config


@pytest.mark.slow
@pytest.mark.skipif(
    not (PROMETHEUS.exists() and PUSHGATEWAY.exists()),
    reason="needs /usr/bin/prometheus and /usr/bin/prometheus-pushgateway (apt-get install prometheus prometheus-pushgateway)",
)
def test_every_panel_query_runs_on_a_real_prometheus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    metrics_port, gateway_port = free_port(), free_port()
    # The demo's token, as in the stack: the proxy demands it and Prometheus sends it from the config.
    monkeypatch.setenv("MCPFAULT_METRICS_TOKEN", METRICS_TOKEN.read_text().strip())
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps(prometheus_config(metrics_port, gateway_port)))

    (tmp_path / "proxy").mkdir()
    # The side-effect panel's counters: the fake probe says every list_sites call ran a shell.
    side_effects = tmp_path / "side-effects.json"
    shell = {"type": "exec", "pid": 1, "argv": ["/bin/sh", "-c", "true"]}
    side_effects.write_text(json.dumps([{"trigger": "begin", "tool": "list_sites", "event": shell}]))
    proxy = ProxyProcess(
        PROFILES / "mixed.toml",
        tmp_path / "proxy",
        events=False,
        extra=("--metrics-addr", f"127.0.0.1:{metrics_port}", "--no-summary", "--probe", f"fake:{side_effects}"),
        server=[sys.executable, "-m", "mcpfault", "mock-server"],
    )
    try:
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}
        proxy.send(request(0, "initialize", init))
        traceparent = {"traceparent": f"00-{CLIENT_TRACE}-b7ad6b7169203331-01"}
        for i in range(1, 41):
            tool, args = [("list_sites", {}), ("get_site", {"site_id": "ams2"})][i % 2]
            body = json.loads(call(i, tool, **args))
            body["params"]["_meta"] = traceparent
            proxy.send(json.dumps(body).encode() + b"\n")

        with (
            pushgateway(gateway_port, tmp_path / "pushgateway.log") as gateway,
            prometheus(
                free_port(), config, tmp_path / "tsdb", tmp_path / "prometheus.log", exemplars=True
            ) as prometheus_url,
        ):
            # A real bench run pushes its metrics, as the demo does.
            bench = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "mcpfault",
                    "bench",
                    "--profiles",
                    "mixed,timeout",
                    "--agents",
                    "naive,retry-only",
                    "--tasks",
                    "8",
                    "--session-tasks",
                    "4",
                    "--out",
                    str(tmp_path / "bench"),
                    "--pushgateway",
                    gateway,
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert bench.returncode == 0, bench.stderr

            api = prometheus_url + "/api/v1"
            queries = []
            for path in DASHBOARDS:
                for panel in json.loads(path.read_text())["panels"]:
                    for target in panel["targets"]:
                        queries.append(((path.stem, panel["id"], target["refId"]), substitute(target["expr"])))
            assert {key for key, _ in queries} >= KEY_PANELS

            empty: set[tuple[str, int, str]] = set()
            deadline = time.monotonic() + 30
            while True:
                empty = set()
                for key, expr in queries:
                    result = api_get(api, "query", query=expr)["data"]["result"]  # asserts status success
                    if not result:
                        empty.add(key)
                if not empty or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            log = (tmp_path / "prometheus.log").read_text(errors="replace")[-2000:]
            # A panel that can never show data is a failure, not a warning.
            assert not empty, f"panels without data: {sorted(empty)}; log:\n{log}"

            # Both jobs of deploy/prometheus.yml are up (the proxy's with its bearer token).
            up = {r["metric"]["job"]: r["value"][1] for r in api_get(api, "query", query="up")["data"]["result"]}
            assert up == {"mcpfault-proxy": "1", "pushgateway": "1"}, up

            # Every template variable has values to offer.
            for path in DASHBOARDS:
                for variable in json.loads(path.read_text())["templating"]["list"]:
                    metric, label = re.findall(r"\w+", variable["query"]["query"])[1:3]
                    values = api_get(api, f"label/{label}/values", **{"match[]": metric})["data"]
                    assert values, f"{path.stem}: variable {variable['name']} has no values"

            # Exemplars of the latency panels link to the client's trace.
            now = time.time()
            exemplars = api_get(
                api,
                "query_exemplars",
                query="mcpfault_request_duration_seconds_bucket",
                start=str(now - 300),
                end=str(now + 60),
            )["data"]
            assert CLIENT_TRACE in {e["labels"].get("trace_id") for group in exemplars for e in group["exemplars"]}
    finally:
        proxy.close()
