"""The timing warnings (faults.profile_warnings): validate and the bench warn where a valid profile's
outcome would depend on timing (a time window shorter than a session, or opening after it; delays near
the call deadline), and the report repeats the warnings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mcpfault.faults import profile
from mcpfault.faults.profile_warnings import Timing, expected_session_s
from mcpfault.faults.profile_warnings import warnings_of as profile_warnings
from tests.conftest import write_profile

SHORT_WINDOW = '[[faults]]\nname = "blip"\ntype = "error"\ncode = -32000\nstart_after_s = 0.0\nduration_s = 0.06\n'
LATE_WINDOW = '[[faults]]\nname = "late"\ntype = "error"\ncode = -32000\nstart_after_s = 1.0\nduration_s = 5.0\n'
NEAR_DEADLINE = '[[faults]]\nname = "racing"\ntype = "latency"\ndelay_s = 0.49\njitter_s = 0.02\nprobability = 0.5\n'
CLEAR_OF_DEADLINE = '[[faults]]\nname = "slow"\ntype = "latency"\ndelay_s = 0.8\njitter_s = 0.2\nprobability = 0.5\n'


def warnings_of(tmp_path: Path, text: str, **options: float) -> list[str]:
    loaded = profile.load(write_profile(tmp_path, text))
    timing = Timing(int(options.get("session_tasks", 20)), options.get("call_deadline_s", 0.5))
    return [str(warning) for warning in profile_warnings(loaded, timing)]


def test_a_window_shorter_than_a_session_is_named_with_its_rule_and_what_to_do(tmp_path: Path) -> None:
    (warning,) = warnings_of(tmp_path, SHORT_WINDOW)
    assert "faults[0] ('blip')" in warning and "duration_s = 0.06 s" in warning
    assert "shorter than a session" in warning and "after and limit" in warning
    assert str(tmp_path / "profile.toml") in warning


def test_a_window_that_opens_after_the_session_ends_may_never_fire(tmp_path: Path) -> None:
    (warning,) = warnings_of(tmp_path, LATE_WINDOW)
    assert "start_after_s = 1 s" in warning and "may never fire" in warning
    # Long sessions reach it: no warning then.
    assert expected_session_s(400) > 1.0
    assert warnings_of(tmp_path, LATE_WINDOW, session_tasks=400) == []


def test_delays_within_noise_of_the_deadline_warn_and_delays_clear_of_it_do_not(tmp_path: Path) -> None:
    (warning,) = warnings_of(tmp_path, NEAR_DEADLINE)
    assert "0.49 s to 0.51 s" in warning and "call deadline (0.5 s)" in warning
    assert warnings_of(tmp_path, CLEAR_OF_DEADLINE) == []
    assert len(warnings_of(tmp_path, CLEAR_OF_DEADLINE, call_deadline_s=0.9)) == 1  # the deadline is what counts


def test_the_bundled_timed_outages_are_clear_of_the_hazards() -> None:
    for name in ("outage_1s", "outage_10s", "storm", "latency", "mixed"):
        assert profile_warnings(profile.load(profile.resolve(name)), Timing(20, 0.5)) == []


def test_validate_warns_on_stderr_and_still_exits_0(tmp_path: Path) -> None:
    path = write_profile(tmp_path, SHORT_WINDOW + NEAR_DEADLINE)
    done = subprocess.run(
        [sys.executable, "-m", "mcpfault", "validate", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert ": ok (" in done.stdout
    lines = [line for line in done.stderr.splitlines() if ": warning: " in line]
    assert len(lines) == 2 and "shorter than a session" in lines[0] and "call deadline" in lines[1]


@pytest.mark.slow
def test_the_bench_prints_the_warnings_and_its_report_repeats_them(tmp_path: Path) -> None:
    path = write_profile(tmp_path, SHORT_WINDOW, name="blip.toml")
    out = tmp_path / "bench"
    command = [sys.executable, "-m", "mcpfault", "bench", "--profiles", str(path), "--agents", "naive"]
    done = subprocess.run(
        [*command, "--tasks", "2", "--session-tasks", "2", "--jobs", "1", "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "mcpfault bench: warning: " in done.stderr and "shorter than a session" in done.stderr
    report = (out / "report.md").read_text()
    assert "warning(s) about the profiles" in report and "faults\\[0\\] ('blip')" in report  # markdown-escaped
