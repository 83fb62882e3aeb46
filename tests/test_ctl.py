"""`mcpfault ctl` against a real HTTP proxy with --control: tables, and exit codes that mean something."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROFILES, SCRIPTED_SERVER, write_profile
from tests.control_support import ControlledHttpProxy

pytestmark = pytest.mark.slow


def ctl(url: str, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MCPFAULT_CONTROL_TOKEN"}
    env["COLUMNS"] = "200"
    if token is not None:
        env["MCPFAULT_CONTROL_TOKEN"] = token
    command = [sys.executable, "-m", "mcpfault", "ctl", "--control", url, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, env=env, check=False)


def test_ctl_drives_a_live_proxy(tmp_path: Path) -> None:
    proxy = ControlledHttpProxy(PROFILES / "latency.toml", tmp_path, [sys.executable, str(SCRIPTED_SERVER)])
    try:
        url = proxy.control
        status = ctl(url, "status")
        assert status.returncode == 0, status.stderr
        assert "faults" in status.stdout and "generation 0" in status.stdout and "http" in status.stdout
        listed = ctl(url, "list")
        assert listed.returncode == 0 and "profile" in listed.stdout and "always" in listed.stdout
        added = ctl(url, "add", str(PROFILES / "error.toml"))
        assert added.returncode == 0, added.stderr
        assert "added rule 'internal-error'" in added.stdout and "added rule 'backend-unavailable'" in added.stdout
        again = ctl(url, "add", str(PROFILES / "error.toml"))
        assert again.returncode == 1 and "exists" in again.stderr
        windowed = write_profile(tmp_path, '[[faults]]\ntype = "error"\nstart_after_s = 30\nduration_s = 10\n')
        assert ctl(url, "add", str(windowed)).returncode == 0
        rows = ctl(url, "list").stdout
        assert "runtime" in rows and "30-40 s" in rows and "error-0" in rows
        invalid = write_profile(tmp_path, '[[faults]]\ntype = "error"\nprobability = 7\nlimit = -1\n', "bad.toml")
        refused = ctl(url, "add", str(invalid))
        assert refused.returncode == 2
        assert "bad.toml: faults[0].probability" in refused.stderr and "faults[0].limit" in refused.stderr
        assert ctl(url, "remove", "nothing-by-this-name").returncode == 1
        assert ctl(url, "remove", "internal-error").returncode == 0
        off = ctl(url, "off")
        assert off.returncode == 0 and "OFF" in ctl(url, "list").stdout
        assert ctl(url, "on").returncode == 0
        assert ctl(url, "reset").returncode == 0
        assert "runtime" not in ctl(url, "list").stdout
        restart = ctl(url, "restart")  # the bridge supervises its servers: the answer is the next generation
        assert restart.returncode == 0 and "server restarted: generation 1" in restart.stdout, restart.stdout
        assert ctl(url, "stall", "0").returncode == 2
        stall = ctl(url, "stall", "0.2")
        assert stall.returncode == 0 and "frozen for 0.2 s" in stall.stdout
    finally:
        proxy.close()
    assert ctl(url, "status").returncode == 3  # nothing answers once the proxy is gone


def test_ctl_without_the_token_is_denied(tmp_path: Path) -> None:
    env = {"MCPFAULT_CONTROL_TOKEN": "tok-123"}
    proxy = ControlledHttpProxy(PROFILES / "baseline.toml", tmp_path, [sys.executable, str(SCRIPTED_SERVER)], env=env)
    try:
        denied = ctl(proxy.control, "off")
        assert denied.returncode == 4 and "token" in denied.stderr
        assert ctl(proxy.control, "off", token="tok-123").returncode == 0
    finally:
        proxy.close()
