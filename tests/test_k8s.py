"""The Kubernetes manifests under deploy/k8s/: parsed with PyYAML and checked by structure.

No cluster runs here, so what is checked is what the manifests promise: every document is a named
object in the ``mcpfault`` namespace; the proxy wraps the MCP server with its metrics token from a
Secret, scrape annotations that match its metrics port, resources and a non-root, capability-free
securityContext; the benchmark is an Indexed Job whose completions, parallelism and ``--shard I/N``
agree and whose claim exists; the ConfigMap's profile passes ``mcpfault validate``; nothing uses the
host's network.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import PROFILES, ROOT

K8S = ROOT / "deploy" / "k8s"
NAMESPACE = "mcpfault"
MANIFEST_FILES = sorted(K8S.glob("*.yaml"))
CLUSTER_SCOPED = {"Namespace"}

Doc = dict[str, Any]


def _load(path: Path) -> list[Doc]:
    with path.open(encoding="utf-8") as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc is not None]


def _all_docs() -> list[Doc]:
    return [doc for path in MANIFEST_FILES for doc in _load(path)]


def _one(kind: str, path: Path | None = None) -> Doc:
    docs = _load(path) if path is not None else _all_docs()
    found = [doc for doc in docs if doc["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def _pod_spec(workload: Doc) -> Doc:
    spec: Doc = workload["spec"]["template"]["spec"]
    return spec


def _containers(pod_spec: Doc) -> list[Doc]:
    return list(pod_spec.get("containers", [])) + list(pod_spec.get("initContainers", []))


def _argv(container: Doc) -> list[str]:
    return [str(part) for part in container.get("command", []) + container.get("args", [])]


def _assert_locked_down(pod_spec: Doc, container: Doc) -> None:
    pod_sc = pod_spec.get("securityContext", {})
    sc = container.get("securityContext", {})
    assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True
    assert sc.get("runAsUser", pod_sc.get("runAsUser", 0)) != 0
    assert sc.get("allowPrivilegeEscalation") is False
    assert sc.get("privileged", False) is False
    assert sc.get("readOnlyRootFilesystem") is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert not sc["capabilities"].get("add")


def _assert_resources(container: Doc) -> None:
    resources = container["resources"]
    for section in ("requests", "limits"):
        assert resources[section].get("cpu"), section
        assert resources[section].get("memory"), section


def _assert_workload_locked_down_and_sized(workload: Doc) -> None:
    """Every container of ``workload``'s pod (init containers too) is locked down and has resources."""
    pod = _pod_spec(workload)
    for container in _containers(pod):
        _assert_locked_down(pod, container)
        _assert_resources(container)


def test_manifest_files_present() -> None:
    names = {path.name for path in MANIFEST_FILES}
    assert {"proxy-sidecar.yaml", "bench-job.yaml"} <= names
    # `kubectl apply -f deploy/k8s/` goes in name order: the namespace must come first.
    namespace_files = [path.name for path in MANIFEST_FILES if any(d["kind"] == "Namespace" for d in _load(path))]
    assert namespace_files == [MANIFEST_FILES[0].name]


@pytest.mark.parametrize("path", MANIFEST_FILES, ids=lambda path: path.name)
def test_every_document_is_a_named_object_in_the_namespace(path: Path) -> None:
    docs = _load(path)
    assert docs, f"{path.name} has no documents"
    for doc in docs:
        assert isinstance(doc, dict)
        assert isinstance(doc.get("apiVersion"), str) and doc["apiVersion"], doc
        assert isinstance(doc.get("kind"), str) and doc["kind"], doc
        metadata = doc["metadata"]
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", metadata["name"]), metadata["name"]
        if doc["kind"] in CLUSTER_SCOPED:
            assert metadata["name"] == NAMESPACE
        else:
            assert metadata["namespace"] == NAMESPACE, f"{doc['kind']}/{metadata['name']}"


def test_names_are_unique_per_kind() -> None:
    keys = [(doc["kind"], doc["metadata"]["name"]) for doc in _all_docs()]
    assert len(keys) == len(set(keys))


def test_deployment_wraps_the_server_with_the_proxy() -> None:
    deployment = _one("Deployment", K8S / "proxy-sidecar.yaml")
    assert deployment["apiVersion"] == "apps/v1"
    template = deployment["spec"]["template"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    pod = _pod_spec(deployment)
    (container,) = pod["containers"]
    argv = _argv(container)
    joined = " ".join(argv)
    assert "mcpfault proxy" in joined
    assert "--metrics-addr" in argv
    assert "--" in argv and argv[argv.index("--") + 1 :], "no server command after '--'"
    assert container.get("stdin") is True, "the stdio transport needs stdin kept open"

    # The profile comes from the ConfigMap, mounted where --config points.
    config = Path(argv[argv.index("--config") + 1])
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(config.parent))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    configmap = _one("ConfigMap", K8S / "proxy-sidecar.yaml")
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert config.name in configmap["data"]


def test_metrics_token_comes_from_the_secret() -> None:
    deployment = _one("Deployment", K8S / "proxy-sidecar.yaml")
    (container,) = _pod_spec(deployment)["containers"]
    env = {item["name"]: item for item in container["env"]}
    ref = env["MCPFAULT_METRICS_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert "value" not in env["MCPFAULT_METRICS_TOKEN"]
    secret = _one("Secret", K8S / "proxy-sidecar.yaml")
    assert ref["name"] == secret["metadata"]["name"]
    assert ref["key"] in {**secret.get("data", {}), **secret.get("stringData", {})}
    assert "placeholder" in str(secret["stringData"][ref["key"]]).lower()


def test_scrape_annotations_match_the_metrics_port() -> None:
    deployment = _one("Deployment", K8S / "proxy-sidecar.yaml")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    (container,) = _pod_spec(deployment)["containers"]
    argv = _argv(container)
    metrics_port = int(argv[argv.index("--metrics-addr") + 1].rsplit(":", 1)[1])
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(metrics_port)
    assert annotations["prometheus.io/path"] == "/metrics"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["metrics"] == metrics_port

    service = _one("Service", K8S / "proxy-sidecar.yaml")
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    (service_port,) = service["spec"]["ports"]
    assert service_port["port"] == metrics_port
    assert service_port["targetPort"] in ("metrics", metrics_port)


def test_deployment_is_locked_down_and_sized() -> None:
    _assert_workload_locked_down_and_sized(_one("Deployment", K8S / "proxy-sidecar.yaml"))


def test_bench_job_is_indexed_over_its_shards() -> None:
    job = _one("Job", K8S / "bench-job.yaml")
    assert job["apiVersion"] == "batch/v1"
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    for key in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        assert isinstance(spec[key], int) and spec[key] >= 0, key
    pod = _pod_spec(job)
    assert pod["restartPolicy"] in ("Never", "OnFailure")
    (container,) = pod["containers"]
    argv = _argv(container)
    assert argv[:2] == ["mcpfault", "bench"]
    shard = argv[argv.index("--shard") + 1]
    match = re.fullmatch(r"\$\(JOB_COMPLETION_INDEX\)/(\d+)", shard)
    assert match, shard
    shards = int(match.group(1))
    assert spec["completions"] == spec["parallelism"] == shards
    out = argv[argv.index("--out") + 1]
    assert "$(JOB_COMPLETION_INDEX)" in out, "shards must not share an output directory"
    # $(VAR) in args expands only from the container's env: JOB_COMPLETION_INDEX is declared there.
    env = {item["name"]: item for item in container.get("env", [])}
    field = env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert field == "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def test_bench_job_writes_to_the_claim_in_the_manifests() -> None:
    job = _one("Job", K8S / "bench-job.yaml")
    pod = _pod_spec(job)
    (container,) = pod["containers"]
    argv = _argv(container)
    out = Path(argv[argv.index("--out") + 1])
    claims = {doc["metadata"]["name"] for doc in _all_docs() if doc["kind"] == "PersistentVolumeClaim"}
    claim_volumes = {
        v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v
    }
    assert claim_volumes and set(claim_volumes.values()) <= claims
    assert "mcpfault-results" in claims
    mount = next(m for m in container["volumeMounts"] if m["name"] in claim_volumes)
    assert claim_volumes[mount["name"]] == "mcpfault-results"
    assert out.is_relative_to(mount["mountPath"])
    assert not mount.get("readOnly", False)


def test_bench_job_is_locked_down_and_sized() -> None:
    _assert_workload_locked_down_and_sized(_one("Job", K8S / "bench-job.yaml"))


def test_merge_is_documented() -> None:
    assert "mcpfault report --merge /results/shard-*" in (K8S / "bench-job.yaml").read_text(encoding="utf-8")


def test_configmap_profile_is_valid_and_matches_mixed(tmp_path: Path) -> None:
    configmap = _one("ConfigMap", K8S / "proxy-sidecar.yaml")
    profile = configmap["data"]["profile.toml"]
    assert profile == (PROFILES / "mixed.toml").read_text(encoding="utf-8")
    path = tmp_path / "profile.toml"
    path.write_text(profile, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "mcpfault", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_host_network_or_host_ports() -> None:
    workloads = [doc for doc in _all_docs() if doc["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet")]
    assert workloads
    for workload in workloads:
        pod = _pod_spec(workload)
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            assert not pod.get(key, False), f"{workload['metadata']['name']}: {key}"
        for container in _containers(pod):
            for port in container.get("ports", []):
                assert "hostPort" not in port, f"{workload['metadata']['name']}/{container['name']}"
        for volume in pod.get("volumes", []):
            assert "hostPath" not in volume
