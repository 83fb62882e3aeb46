"""A plain ``pip install`` from a wheel, as a new user gets it: the bundled profiles come along, and
names resolve from any directory. Slow (a wheel build and a fresh virtualenv); pip reuses its cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow
INSTALL_TIMEOUT_S = 420  # wheel build + install with every dependency, on a loaded 2-core machine


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with mcpfault installed from a wheel of this tree; its bin/ directory."""
    where = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(where), str(ROOT)],
        check=True,
        timeout=INSTALL_TIMEOUT_S,
        env=env,
        capture_output=True,
    )
    (wheel,) = where.glob("mcpfault-*.whl")
    target = where / "venv"
    venv.create(target, with_pip=True)
    subprocess.run(
        [str(target / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
        check=True,
        timeout=INSTALL_TIMEOUT_S,
        env=env,
        capture_output=True,
    )
    return target / "bin"


def run(bin_dir: Path, *args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        [str(bin_dir / "mcpfault"), *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=120, env=env
    )


def test_the_installed_package_is_not_the_source_tree(installed: Path, tmp_path: Path) -> None:
    where = subprocess.run(
        [str(installed / "python"), "-c", "import mcpfault; print(mcpfault.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(ROOT / "src") not in where and "site-packages" in where


def test_profiles_lists_the_bundled_ones(installed: Path, tmp_path: Path) -> None:
    listed = run(installed, "profiles", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    names = {line.split()[0] for line in listed.stdout.splitlines()}
    assert {"baseline", "error", "mixed", "timeout", "stale"} <= names


def test_run_with_a_bundled_profile(installed: Path, tmp_path: Path) -> None:
    done = run(installed, "run", "--profile", "error", "--tasks", "4", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "records.jsonl").is_file()


def test_proxy_with_a_bundled_profile_name(installed: Path, tmp_path: Path) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    done = run(
        installed,
        "proxy",
        "--config",
        "error",
        "--events",
        "events.jsonl",
        "--",
        str(installed / "mcpfault"),
        "mock-server",
        cwd=tmp_path,
        stdin=json.dumps(initialize) + "\n",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0])["result"]["protocolVersion"] == "2025-11-25"
    assert "profile 'error'" in done.stderr


def test_audit_without_its_extra_says_how_to_get_it(installed: Path, tmp_path: Path) -> None:
    server = [str(installed / "python"), str(ROOT / "tests" / "servers" / "audit_server.py")]
    done = run(installed, "audit", "--", *server, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "pip install 'mcpfault[audit]'" in done.stderr, done.stderr
