"""chaostoolkit-mcpfault with the real ``chaos`` CLI (chaostoolkit 1.19.0) against a real proxy in
front of the bundled mock: a completed journal, a deviated hypothesis, a safeguard interrupt,
rollbacks that leave no fault behind, the token kept out of the journal, ``chaos discover``."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chaoslib.exceptions import ActivityFailed

from chaosmcpfault import actions, probes
from mcpfault.api import Proxy

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "chaostoolkit" / "experiment.json"
CHAOS = Path(sys.executable).parent / "chaos"
MOCK = [sys.executable, "-m", "mcpfault", "mock-server"]


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[Proxy]:
    with Proxy(MOCK, profile="baseline", transport="http", workdir=tmp_path / "proxy") as running:
        yield running


def example() -> dict[str, Any]:
    experiment: dict[str, Any] = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    return copy.deepcopy(experiment)


def chaos_run(
    experiment: dict[str, Any], proxy: Proxy, tmp_path: Path, env: dict[str, str] | None = None, *options: str
) -> tuple[dict[str, Any], str]:
    """Run ``chaos run`` on the experiment; (the journal, its text)."""
    path = tmp_path / "experiment.json"
    path.write_text(json.dumps(experiment), encoding="utf-8")
    journal = tmp_path / "journal.json"
    assert proxy.control_url is not None and proxy.url is not None
    environment = {
        **os.environ,
        "MCPFAULT_CONTROL_URL": proxy.control_url,
        "MCPFAULT_MCP_URL": proxy.url,
        **(env or {}),
    }
    done = subprocess.run(
        [
            str(CHAOS),
            "--log-file",
            str(tmp_path / "chaos.log"),
            "run",
            "--journal-path",
            str(journal),
            *options,
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        cwd=tmp_path,
        check=False,
    )
    assert journal.exists(), done.stdout + done.stderr
    text = journal.read_text(encoding="utf-8")
    return json.loads(text), text + (tmp_path / "chaos.log").read_text(encoding="utf-8")


def safeguard(interval_s: float) -> dict[str, Any]:
    """The safeguard control, watching that at most a fifth of the requests fail."""
    probe = {
        "type": "probe",
        "name": "errors-below-a-fifth",
        "tolerance": [0, 0.2],
        "provider": {"type": "python", "module": "chaosmcpfault.probes", "func": "error_rate"},
    }
    arguments = {"interval_s": interval_s, "probes": [probe]}
    return {
        "name": "mcpfault-safeguard",
        "provider": {"type": "python", "module": "chaosmcpfault.controls.safeguard", "arguments": arguments},
    }


def runtime_rules(proxy: Proxy) -> list[str]:
    assert proxy.control is not None
    return [rule["name"] for rule in proxy.control.faults()["faults"] if rule["origin"] != "profile"]


def test_the_example_runs_as_is_to_a_completed_journal(proxy: Proxy, tmp_path: Path) -> None:
    journal, _ = chaos_run(example(), proxy, tmp_path)
    assert journal["status"] == "completed" and journal["deviated"] is False
    runs = {run["activity"]["name"]: run for run in journal["run"]}
    assert runs["agent-load"]["output"]["calls"] == 10
    counts = runs["faults-injected"]["output"]
    assert counts["by_rule"]["sites-down"] == counts["total"] >= 1  # seeded: some of the 10 calls
    assert [r["activity"]["name"] for r in journal["rollbacks"]] == ["remove-sites-down"]
    assert all(r["status"] == "succeeded" for r in journal["rollbacks"])
    assert runtime_rules(proxy) == []
    assert proxy.injected("error") == counts["total"]


def test_a_deviated_hypothesis_and_no_fault_left_behind(proxy: Proxy, tmp_path: Path) -> None:
    experiment = example()
    experiment["method"][0]["provider"]["arguments"]["rule"]["probability"] = 1.0
    journal, _ = chaos_run(experiment, proxy, tmp_path, None, "--rollback-strategy", "always")
    assert journal["deviated"] is True and journal["status"] == "completed"  # chaoslib 1.44 marks it with deviated
    after = journal["steady_states"]["after"]
    assert after["steady_state_met"] is False
    failing = [p for p in after["probes"] if not p["tolerance_met"]]
    assert [p["activity"]["name"] for p in failing] == ["error-rate-at-most-half"]
    assert failing[0]["output"] > 0.5
    assert runtime_rules(proxy) == []


def test_the_safeguard_interrupts_and_the_rollbacks_still_run(proxy: Proxy, tmp_path: Path) -> None:
    experiment = example()
    experiment["method"][0]["provider"]["arguments"]["rule"]["probability"] = 1.0
    second_load = copy.deepcopy(experiment["method"][1])
    second_load["name"] = "more-load"
    experiment["method"].insert(2, second_load)
    experiment["controls"] = [safeguard(interval_s=30)]  # only the checks at activity boundaries
    journal, text = chaos_run(experiment, proxy, tmp_path)
    assert journal["status"] == "interrupted"
    assert "more-load" not in [run["activity"]["name"] for run in journal["run"]]
    assert "errors-below-a-fifth" in text and "crossed its tolerance" in text
    assert [r["status"] for r in journal["rollbacks"]] == ["succeeded"]
    assert runtime_rules(proxy) == []
    assert proxy.injected("error") == 10  # the first load only


def test_the_token_comes_from_secrets_and_stays_out_of_the_journal(tmp_path: Path) -> None:
    token = "s3cret-" + os.urandom(8).hex()
    env = {"MCPFAULT_CONTROL_TOKEN": token}
    with Proxy(MOCK, profile="baseline", transport="http", workdir=tmp_path / "proxy", env=env) as proxy:
        experiment = example()
        experiment["secrets"] = {
            "mcpfault": {"mcpfault_control_token": {"type": "env", "key": "MCPFAULT_CONTROL_TOKEN"}}
        }
        journal, text = chaos_run(experiment, proxy, tmp_path, env)
        assert journal["status"] == "completed", text[-3000:]
        assert token not in text
        assert runtime_rules(proxy) == []
        without = tmp_path / "without-token"
        without.mkdir()
        refused, _ = chaos_run(example(), proxy, without)
    assert refused["status"] == "failed" and refused["run"] == []  # the hypothesis could not even be probed
    before = refused["steady_states"]["before"]["probes"][0]
    assert before["status"] == "failed" and "HTTP 401" in "".join(before["exception"])


def test_chaos_discover_lists_every_activity_with_its_arguments(tmp_path: Path) -> None:
    out = tmp_path / "discovery.json"
    command = [str(CHAOS), "--log-file", str(tmp_path / "chaos.log"), "discover", "chaostoolkit-mcpfault"]
    done = subprocess.run(
        [*command, "--no-install", "--discovery-path", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    discovery = json.loads(out.read_text(encoding="utf-8"))
    assert discovery["extension"]["name"] == "chaostoolkit-mcpfault" and discovery["target"] == "mcpfault"
    found = {(a["type"], a["name"]): a for a in discovery["activities"]}
    assert set(found) == {("action", n) for n in actions.__all__} | {("probe", n) for n in probes.__all__}
    assert [arg["name"] for arg in found[("action", "add_fault")]["arguments"]][:1] == ["rule"]
    stall = {arg["name"]: arg for arg in found[("action", "stall_server")]["arguments"]}
    assert stall["duration_s"]["type"] == "number"
    for activity in found.values():
        assert activity["doc"], activity["name"]
        if activity["type"] == "action":
            assert "Rollback:" in activity["doc"], activity["name"]


def test_the_server_actions_and_probes_on_a_supervised_stdio_proxy(tmp_path: Path) -> None:

    # Restarted on a crash: a SIGKILL then leaves a proxy to talk to (with restart = "never" the proxy
    # would end with its server, and what follows would race that end).
    supervised = {"name": "supervised", "server": {"restart": "on-crash", "restart_delay_s": 0.1}}
    with Proxy(MOCK, profile=supervised, workdir=tmp_path) as proxy:
        assert proxy.command is not None and proxy.control_url is not None
        launch = subprocess.Popen(
            proxy.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        try:
            configuration = {"mcpfault_control_url": proxy.control_url}
            deadline = time.monotonic() + 20
            while True:
                try:
                    assert probes.server_alive(configuration) is True
                    break
                except ActivityFailed:
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
            assert proxy.control is not None
            before = proxy.control.status()["server"]
            assert actions.restart_server(configuration)["restarted"] is True
            # The answer names the next generation (the controller waits, bounded, for it to run).
            first = wait_server(proxy, lambda server: server["generation"] == 1 and server["pid"])
            assert first["pid"] != before["pid"]
            crashed = actions.crash_server("SIGKILL", configuration)
            assert crashed["crashed"] == first["pid"]
            wait_server(proxy, lambda server: server["generation"] >= 2 and server["pid"])  # the supervisor's restart
            assert probes.server_alive(configuration) is True
            assert actions.stall_server(0.2, configuration)["duration_s"] == 0.2
            assert actions.disable_faults(configuration) == {"faults_enabled": False}
            assert probes.request_stats(configuration)["faults_enabled"] is False
            assert actions.enable_faults(configuration) == {"faults_enabled": True}
            actions.add_fault({"name": "slow", "type": "latency", "delay_s": 0.01}, configuration)
            assert probes.fault_counts(configuration)["by_rule"] == {"slow": 0}
            assert actions.reset_faults(configuration)["reset"] is True
            assert probes.fault_counts(configuration)["by_rule"] == {}
            assert probes.error_rate(configuration) == 0.0
            with pytest.raises(ActivityFailed, match=r"duration_s must be seconds in \(0, 600\]"):
                actions.stall_server(0, configuration)
            with pytest.raises(ActivityFailed, match=r"the proxy refused: HTTP 400.*eror"):
                actions.add_fault({"name": "x", "type": "eror"}, configuration)
            with pytest.raises(ActivityFailed, match="HTTP 404"):
                actions.remove_fault("no-such-rule", configuration)
            with pytest.raises(ActivityFailed, match="no control URL"):
                probes.error_rate({})
        finally:
            assert launch.stdin is not None and launch.stdout is not None
            launch.stdin.close()
            launch.wait(15)
            launch.stdout.close()


def wait_server(proxy: Proxy, ready: Any) -> dict[str, Any]:
    assert proxy.control is not None
    deadline = time.monotonic() + 20
    while True:
        server = proxy.control.status()["server"]
        if server is not None and ready(server):
            return dict(server)
        assert time.monotonic() < deadline, server
        time.sleep(0.05)


def test_task_outcome_rate_reads_a_finished_run(tmp_path: Path) -> None:

    run = actions.run_bench(profiles="error", agents="naive", tasks=4, seed=1, out_dir=str(tmp_path / "run"))
    assert sum(run["outcomes"].values()) == 4
    rate = probes.task_outcome_rate(run["run_dir"], "success")
    assert rate == run["outcomes"].get("success", 0) / 4
    with pytest.raises(ActivityFailed, match="does not exist"):
        probes.task_outcome_rate(str(tmp_path / "nothing-here"))
    with pytest.raises(ActivityFailed, match=r"tasks must be an integer in \[1, 1000\]"):
        actions.run_bench(tasks=0)


def test_the_safeguard_thread_interrupts_a_long_action(proxy: Proxy, tmp_path: Path) -> None:
    experiment = example()
    experiment["method"][0]["provider"]["arguments"]["rule"]["probability"] = 1.0
    experiment["method"][1]["provider"]["arguments"]["count"] = 5000  # far longer than the test waits
    experiment["controls"] = [safeguard(interval_s=0.3)]
    journal, _ = chaos_run(experiment, proxy, tmp_path)
    assert journal["status"] == "interrupted"  # 5,000 calls were not waited for
    assert [r["status"] for r in journal["rollbacks"]] == ["succeeded"]
    assert runtime_rules(proxy) == []
    assert 1 <= proxy.injected("error") < 5000
