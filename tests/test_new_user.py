"""What a new user tripped on (issue 32): bad URLs and paths, NaN settings, duplicate names among other
problems, profiles that do nothing, closed pipes, and the proxy's closing line in its events file."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcpfault.control.client import BadUrl, Control, control_url
from mcpfault.errors import ProfileError, UsageError
from mcpfault.experiments.plan import ExperimentError
from mcpfault.experiments.plan import from_mapping as experiment_from_mapping
from mcpfault.faults import profile
from mcpfault.faults.profile_warnings import warnings_of
from mcpfault.protocol.jsonlines import dumps_line, read_jsonl
from mcpfault.proxy.events import JsonlEventSink

MCPFAULT = [sys.executable, "-m", "mcpfault"]
MOCK = [sys.executable, "-m", "mcpfault", "mock-server"]


def cli(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MCPFAULT, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


# Defect 1: a control URL that is none is a usage error, not a traceback.
def test_ctl_with_a_control_url_that_is_none_says_so() -> None:
    done = cli("ctl", "--control", "notaurl", "list")
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2
    assert "'notaurl' is not an http URL" in done.stderr and "http://127.0.0.1:8474" in done.stderr


def test_control_urls_as_the_proxy_prints_them_or_as_it_takes_them() -> None:
    assert control_url("http://127.0.0.1:8474/") == "http://127.0.0.1:8474"
    assert control_url("127.0.0.1:8474") == "http://127.0.0.1:8474"
    assert control_url("[::1]:8474") == "http://[::1]:8474"
    for bad in ("notaurl", "ftp://127.0.0.1:8474", "http://127.0.0.1:99999", "http://"):
        with pytest.raises(BadUrl, match="is not an http URL"):
            Control(bad)


# Defect 2: NaN and Infinity are refused in every float setting, and no record file holds them.
@pytest.mark.parametrize("setting", ["delay_s = nan", "jitter_s = nan", "delay_s = inf", "jitter_s = -inf"])
def test_a_float_setting_that_is_not_finite_is_refused(setting: str) -> None:
    with pytest.raises(ProfileError) as caught:
        profile.loads(f'[[faults]]\ntype = "latency"\n{setting}\n', source="p.toml")
    (problem,) = caught.value.problems
    assert problem.field == setting.split(" ", maxsplit=1)[0] and "expected a finite number" in problem.message


def test_validate_refuses_a_nan_delay(tmp_path: Path) -> None:
    path = tmp_path / "nan.toml"
    path.write_text('[[faults]]\ntype = "latency"\ndelay_s = nan\n')
    done = cli("validate", str(path))
    assert done.returncode == 1 and "delay_s: got nan; expected a finite number" in done.stderr, done.stderr


def test_the_server_table_refuses_nan_by_name() -> None:
    with pytest.raises(ProfileError, match="hold_s: got nan; expected a finite number"):
        profile.loads("[server]\nhold_s = nan\n", source="p.toml")


def test_the_control_api_rule_refuses_nan_as_a_profile_does() -> None:
    rule = json.loads('{"type": "latency", "name": "slow", "delay_s": NaN}')  # what Python's json accepts
    with pytest.raises(ProfileError, match="delay_s: got nan"):
        profile.rule_from_mapping(rule, source="POST /faults")
    live = profile.rule_from_mapping({"type": "error", "name": "e"}, source="POST /faults")
    with pytest.raises(ProfileError, match="probability"):
        profile.changed_rule(live, {"probability": math.nan}, source="PATCH /faults/e")


def _experiment(**changes: object) -> dict[str, object]:
    document: dict[str, object] = {
        "title": "t",
        "load": {"agent": "resilient"},
        "hypothesis": [{"name": "ok", "probe": "metric", "metric": "error_rate", "tolerance": [0, 0.1]}],
        "method": [{"name": "m", "start_after_s": 0, "duration_s": 1, "fault": {"type": "error"}}],
    }
    document.update(changes)
    return document


@pytest.mark.parametrize(
    ("changes", "where"),
    [
        (
            {"hypothesis": [{"name": "h", "probe": "metric", "metric": "error_rate", "tolerance": [math.nan, 1]}]},
            "tolerance",
        ),
        (
            {"hypothesis": [{"name": "h", "probe": "metric", "metric": "error_rate", "tolerance": math.inf}]},
            "tolerance",
        ),
        ({"method": [{"name": "m", "duration_s": 1, "fault": {"type": "latency", "delay_s": math.nan}}]}, "delay_s"),
        ({"method": [{"name": "m", "duration_s": math.nan, "fault": {"type": "error"}}]}, "duration_s"),
        ({"server": {"hold_s": math.nan}}, "hold_s"),
    ],
)
def test_an_experiment_refuses_nan_and_infinity(changes: dict[str, object], where: str) -> None:
    with pytest.raises(ExperimentError) as caught:
        experiment_from_mapping(_experiment(**changes), "e.toml")
    (problem,) = caught.value.problems
    assert "finite" in str(problem) and where in str(problem), problem


def test_no_record_line_holds_nan_or_infinity(tmp_path: Path) -> None:
    assert dumps_line({"a": math.nan, "b": [math.inf, 1.5], "c": {"d": -math.inf}}) == (
        '{"a": null, "b": [null, 1.5], "c": {"d": null}}'
    )
    sink = JsonlEventSink(tmp_path / "events.jsonl", start={"profile": "p"})
    sink.write({"method": "tools/call", "delay_s": math.nan})
    sink.close()
    text = (tmp_path / "events.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text

    def refuse(name: str) -> None:
        pytest.fail(f"a bare {name} in {text}")

    rows = [json.loads(line, parse_constant=refuse) for line in text.splitlines()]
    assert rows[1]["delay_s"] is None


# Defect 3: a directory given as a profile is named a directory.
def test_a_directory_as_a_profile_is_named_a_directory(tmp_path: Path) -> None:
    (tmp_path / "error.toml").write_text('[[faults]]\ntype = "error"\n')
    with pytest.raises(UsageError, match=r"is a directory, not a profile; give one \.toml file \(in it: error\.toml\)"):
        profile.resolve(tmp_path)
    with pytest.raises(ProfileError, match="is a directory"):
        profile.load(tmp_path)
    done = cli("validate", str(tmp_path))
    assert done.returncode == 1 and "is a directory" in done.stderr and "does not exist" not in done.stderr
    done = cli("proxy", "--config", str(tmp_path), "--", "true")
    assert done.returncode == 2 and "is a directory" in done.stderr, done.stderr


# Defect 6: a duplicate name is listed alongside the same rule's other problems.
def test_validate_lists_a_duplicate_name_beside_other_problems() -> None:
    text = '[[faults]]\ntype = "error"\nname = "x"\n[[faults]]\ntype = "latency"\nname = "x"\ndelay_s = -1\n'
    with pytest.raises(ProfileError) as caught:
        profile.loads(text, source="p.toml")
    fields = sorted(problem.field for problem in caught.value.problems)
    assert fields == ["delay_s", "name"], caught.value.problems


def test_a_duplicate_of_a_broken_rule_is_listed_too() -> None:
    text = '[[faults]]\ntype = "nope"\nname = "x"\n[[faults]]\ntype = "error"\nname = "x"\n'
    with pytest.raises(ProfileError) as caught:
        profile.loads(text, source="p.toml")
    assert sorted((p.rule, p.field) for p in caught.value.problems) == [(0, "type"), (1, "name")]


# Friction 2: a profile that does nothing is warned of, in validate and at proxy start.
def test_an_empty_profile_is_warned_of_and_baseline_is_not(tmp_path: Path) -> None:
    empty = tmp_path / "empty.toml"
    empty.write_text('name = "empty"\n')
    (warning,) = warnings_of(profile.load(empty))
    assert "has no [[faults]] rules" in str(warning)
    assert warnings_of(profile.load(profile.resolve("baseline"))) == []
    done = cli("validate", str(empty), "baseline")
    assert done.returncode == 0, done.stderr
    assert "empty.toml: warning: has no [[faults]] rules" in done.stderr
    assert "1 warning(s)" in done.stdout and "baseline.toml: warning" not in done.stderr


def test_rules_that_can_never_fire_are_warned_of() -> None:
    text = (
        '[[faults]]\ntype = "error"\nname = "never"\nprobability = 0\n'
        '[[faults]]\ntype = "error"\nname = "none-left"\nlimit = 0\n[[faults]]\ntype = "error"\nname = "fine"\n'
    )
    found = warnings_of(profile.loads(text, source="p.toml"))
    assert [(w.rule_name, w.message.split(":")[0]) for w in found] == [
        ("never", "probability = 0"),
        ("none-left", "limit = 0"),
    ]


def test_the_proxy_warns_at_start_of_a_profile_that_does_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty.toml"
    empty.write_text('name = "empty"\n')
    done = subprocess.run(
        [*MCPFAULT, "proxy", "--config", str(empty), "--no-summary", "--", sys.executable, "-c", "pass"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert "mcpfault proxy: " in done.stderr and "warning: has no [[faults]] rules" in done.stderr, done.stderr


def test_the_mcp_server_refuses_a_nan_rule_even_in_a_dry_run(tmp_path: Path) -> None:
    """Raw lines, as a client that writes NaN would send them (the SDK's own client writes null)."""
    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]
    call = (
        '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"set_faults","arguments":'
        '{"control_url":"http://127.0.0.1:8474","action":"add","rule":{"type":"latency","name":"slow","delay_s":NaN}}}}'
    )
    server = subprocess.Popen(
        [*MCPFAULT, "mcp-server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "MCPFAULT_WORKDIR": str(tmp_path)},
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        server.stdin.write("".join(json.dumps(line) + "\n" for line in lines) + call + "\n")
        server.stdin.flush()
        answer: dict[str, object] = {}
        for line in server.stdout:  # the initialize answer, then the call's
            answer = json.loads(line)
            if answer.get("id") == 2:
                break
    finally:
        server.stdin.close()
        server.wait(timeout=60)
    result = answer["result"]
    assert isinstance(result, dict)
    text = " ".join(block.get("text", "") for block in result["content"])
    assert result["isError"] is True and "delay_s: got nan; expected a finite number" in text, text


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}


def _event_lines(path: Path) -> list[dict[str, object]]:
    return read_jsonl(path, strict=True)


# Defect 4 and friction 5: an answer the client could not take is not "received"; the proxy exits
# non-zero, and the events file's last line says how the proxy ended.
def test_an_answer_the_client_did_not_take_is_not_received(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the client stopped reading: the answer's write fails with EPIPE
    try:
        proxy = subprocess.Popen(
            [*MCPFAULT, "proxy", "-c", "baseline", "--events", str(events), "--no-summary", "--", *MOCK],
            stdin=subprocess.PIPE,
            stdout=write_end,
            stderr=subprocess.PIPE,
        )
    finally:
        os.close(write_end)
    assert proxy.stdin is not None
    proxy.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
    proxy.stdin.flush()
    proxy.wait(timeout=60)  # stdin still open: the failed write alone ends the proxy
    _, stderr = proxy.communicate(timeout=60)
    assert proxy.returncode == 141, stderr.decode()
    rows = _event_lines(events)
    (answer,) = [row for row in rows if row.get("method") == "initialize"]
    assert answer["client_received"] == "nothing", answer
    assert "the client stopped reading" in str(answer["undelivered"]), answer
    assert rows[-1]["event"] == "proxy_stopped" and rows[-1]["exit_code"] == 141
    assert rows[-1]["client_write_failed"] is True and "stopped reading" in str(rows[-1]["ended_by"])


def test_a_clean_stop_writes_the_closing_line_and_a_kill_does_not(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    command = [*MCPFAULT, "proxy", "-c", "error", "--events", str(events), "--no-summary", "--", *MOCK]
    done = subprocess.run(command, input=json.dumps(INITIALIZE) + "\n", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    first, *middle, last = _event_lines(events)
    assert first["event"] == "proxy_started" and [row["method"] for row in middle] == ["initialize"]
    assert middle[0]["client_received"] == "response"
    assert last == {
        **last,
        "event": "proxy_stopped",
        "exit_code": 0,
        "ended_by": "the client closed stdin",
        "requests": 1,
        "faults_injected": 0,
        "client_write_failed": False,
    }
    killed = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert killed.stdin is not None and killed.stdout is not None
    killed.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
    killed.stdin.flush()
    killed.stdout.readline()  # answered, so its event is written
    killed.kill()
    killed.wait(timeout=60)
    killed.stdin.close()
    killed.stdout.close()
    launches = [row.get("event") for row in _event_lines(events) if "event" in row]
    assert launches == ["proxy_started", "proxy_stopped", "proxy_started"]  # the killed launch has no closing line


def test_a_profile_keeps_its_name_beside_its_rules_names() -> None:
    loaded = profile.loads('name = "mine"\n[[faults]]\ntype = "error"\nname = "down"\n', source="p.toml")
    assert loaded.name == "mine" and [rule.name for rule in loaded.rules] == ["down"]


def _with_stdout_closed(*args: str) -> subprocess.CompletedProcess[str]:
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `| head -1` after its line: every write now fails with EPIPE
    try:
        return subprocess.run([*MCPFAULT, *args], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)


# Defect 5: one closed-pipe convention (141) for every command, rich's tables included.
@pytest.mark.parametrize(
    "args",
    [
        ("faults",),
        ("validate", "mixed"),
        ("proxy", "--dry-run", "-c", "error", "--", *MOCK),
        ("experiment", "run", "server-killed", "--dry-run"),
    ],
)
def test_a_reader_that_leaves_gets_141_from_every_command(args: tuple[str, ...]) -> None:
    done = _with_stdout_closed(*args)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_traces_show_with_its_reader_gone_exits_141(tmp_path: Path) -> None:
    ran = cli("run", "--profile", "error", "--tasks", "2", "--out", str(tmp_path / "run"))
    assert ran.returncode == 0, ran.stderr
    done = _with_stdout_closed("traces", "show", str(tmp_path / "run"))
    assert done.returncode == 141, done.stderr


# Friction 1: ctl add takes a bundled profile's name, as proxy --config does.
def test_ctl_add_takes_a_bundled_name(tmp_path: Path) -> None:
    from tests.conftest import PROFILES, SCRIPTED_SERVER
    from tests.control_support import ControlledHttpProxy

    proxy = ControlledHttpProxy(PROFILES / "baseline.toml", tmp_path, [sys.executable, str(SCRIPTED_SERVER)])
    try:
        added = cli("ctl", "--control", proxy.control, "add", "error", cwd=tmp_path)  # no profiles/ here
        assert added.returncode == 0, added.stderr
        assert "added rule 'internal-error'" in added.stdout
        unknown = cli("ctl", "--control", proxy.control, "add", "eror", cwd=tmp_path)
        assert unknown.returncode == 2 and "unknown profile 'eror' (did you mean 'error'?)" in unknown.stderr
    finally:
        proxy.close()
    assert "mcpfault ctl add error" in cli("ctl", "--help").stdout


# Friction 6: exact interval bounds, and percentages clear of the whiskers.
def test_intervals_read_as_their_exact_bounds_to_one_decimal() -> None:
    from mcpfault.analysis.summary import wilson
    from mcpfault.harness.formatting import interval

    assert interval(wilson(98, 100)) == "93.0-99.4%"  # rounded outward this read 92-100%
    assert interval(wilson(0, 10)) == "0.0-27.8%" and interval(wilson(100, 100)) == "96.3-100.0%"
    assert interval((0.15, 0.25)) == "15.0-25.0%"  # half up, not float noise


def test_outcome_percentages_do_not_overlap_the_whiskers() -> None:
    import re

    from mcpfault.analysis.records import TaskRecord
    from mcpfault.harness.charts import BAR_H
    from mcpfault.harness.report import render_charts, summarize

    outcomes = ["success"] * 6 + ["recovered"] * 2 + ["failed_detected", "failed_silent"]
    records = [
        TaskRecord("mixed", "naive", 0, task, "site_triage", outcome)  # type: ignore[arg-type]
        for task, outcome in enumerate(outcomes)
    ]
    svg = render_charts(summarize(records))["outcomes.svg"]
    bar_tops = [float(y) for y in re.findall(r'<rect class="bar bar-success"[^>]* y="([\d.]+)"', svg)]
    labels = [float(y) for y in re.findall(r'<text [^>]*y="([\d.]+)"[^>]*font-size="11"[^>]*>\d+%<', svg)]
    whisker = re.search(r'<path class="interval" d="M[\d.]+ ([\d.]+)H[\d.]+M[\d.]+ ([\d.]+)V([\d.]+)', svg)
    assert bar_tops and labels and whisker is not None, svg
    (top,) = bar_tops
    line_y, cap_top, cap_bottom = (float(whisker.group(i)) for i in (1, 2, 3))
    inside = [label for label in labels if top <= label <= top + BAR_H]  # the bar's own percentages
    assert len(inside) == 4 and all(label <= cap_top for label in inside), (inside, cap_top)  # digits end there
    assert line_y == top + BAR_H and cap_bottom > line_y


# Friction 8: progress shows as plain lines when stdout is not a terminal.
def test_plain_progress_prints_a_line_every_interval_and_at_the_end() -> None:
    import io

    from mcpfault.cli.progress import PlainProgress

    now = [0.0]
    out = io.StringIO()
    plain = PlainProgress("bench", 4, out=out, every_s=5.0, clock=lambda: now[0])
    for at in (1.0, 6.0, 7.0, 12.5):
        now[0] = at
        plain.advance()
    plain.finish()
    assert out.getvalue().splitlines() == ["bench: 2/4 tasks, 6.0 s", "bench: 4/4 tasks, 12.5 s"]


def test_run_shows_progress_in_a_log(tmp_path: Path) -> None:
    done = cli("run", "--profile", "error", "--agent", "naive", "--tasks", "3", "--out", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr
    assert "error / naive: 3 tasks to run" in done.stderr and "error / naive: 3/3 tasks, " in done.stderr


# Friction 7: experiment list, as profiles lists the profiles.
def test_experiment_list_names_every_bundled_experiment() -> None:
    from mcpfault.experiments.plan import bundled

    done = cli("experiment", "list", "--path")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(bundled()) and "server-killed" in bundled()
    assert all(line.endswith(f"[{path}]") for line, path in zip(lines, bundled().values(), strict=True))
    assert "The server is killed mid-session" in done.stdout


# Friction 4: a server's own exit reads as one in the summary.
def test_a_crash_no_fault_caused_reads_as_the_servers_own_exit() -> None:
    from mcpfault.faults.profile import ServerSettings
    from mcpfault.proxy.process.supervisor import Supervisor, crash_causes, describe_status

    supervisor = Supervisor(["true"], ServerSettings())
    supervisor.died(3, shutting_down=False)
    assert crash_causes(supervisor) == "exited by itself (status 3) 1"
    assert describe_status(137) == "status 137 (SIGKILL)" and describe_status(1) == "status 1"
    assert warnings_of(profile.loads('[server]\nrestart = "on-crash"\n', source="p.toml")) == []


# Friction 6: the experiment timeline's axis ends with the run, and its method line is labelled.
def test_the_experiment_timeline_ends_with_the_run_and_names_the_method_line() -> None:
    import re
    from pathlib import Path as _Path

    from mcpfault.experiments.report import timeline_svg
    from mcpfault.experiments.runner import Outcome

    plan = experiment_from_mapping(_experiment(load={"agent": "resilient", "warmup_s": 2, "cooldown_s": 2}), "e.toml")
    outcome = Outcome("id", "completed", "held", 0, _Path("."), t0=100.0, method_start=102.0, method_end=106.5)
    rows = [(float(t), 3, 0, 0) for t in range(10)]  # buckets to 10 s, as write() asks for one more second
    svg = timeline_svg(plan, outcome, rows)
    ticks = re.findall(r'font-size="10" text-anchor="middle">([\d.]+)</text>', svg)
    assert ticks[-1] == "8.5" and "10" not in ticks and "9" not in ticks, ticks
    assert "method starts (2.0 s)" in svg


def test_the_report_keeps_the_order_profiles_were_given_in(tmp_path: Path) -> None:
    from mcpfault.analysis.records import TaskRecord
    from mcpfault.harness.report import ReportMeta, summarize, write_report

    records = [TaskRecord(name, "naive", 0, 0, "site_triage", "success") for name in ("error", "timeout")]
    assert summarize(records).profiles == ("timeout", "error")  # the usual order, when none is given
    assert summarize(records, ("error", "timeout")).profiles == ("error", "timeout")
    meta = ReportMeta(
        "mcpfault bench --profiles error,timeout", 0, 1, 1.0, 1, "t", "m", profile_order=("error", "timeout")
    )
    text = write_report(records, tmp_path, meta).read_text()
    assert text.index("| error ") < text.index("| timeout ")


# Friction 3: a missing launcher is named, with what to install.
def test_a_missing_uvx_says_what_to_install(tmp_path: Path) -> None:
    done = subprocess.run(
        [*MCPFAULT, "proxy", "-c", "error", "--", str(tmp_path / "uvx"), "mcp-server-time"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 127
    assert "uvx comes with uv: 'pip install uv'" in done.stderr
    assert "pip install mcp-server-time, then '-- mcp-server-time'" in done.stderr


# Friction 9: a bench's span files are gzipped once judged, and every reader takes them.
@pytest.mark.usefixtures("clean_otel_env")
def test_compressed_span_files_read_as_written(tmp_path: Path, receiver: object) -> None:
    from mcpfault.analysis.trace_tree import read_run
    from mcpfault.telemetry.export import export_run
    from mcpfault.telemetry.span_files import compress_span_files, find_span_files, read_spans
    from tests.test_export import write_run

    def span_key(view: object) -> tuple[str, str]:
        return (view.trace_id, view.span_id)  # type: ignore[attr-defined]

    run_dir = tmp_path / "run"
    write_run(run_dir)
    before = {path.relative_to(run_dir): read_spans(path) for path in find_span_files(run_dir)}
    sizes = sum(path.stat().st_size for path in find_span_files(run_dir))
    for session in ("s0", "s1"):
        compress_span_files(run_dir / session, ("client-spans.jsonl", "proxy-spans.jsonl", "server-spans.jsonl"))
    files = find_span_files(run_dir)
    assert files and all(path.name.endswith(".jsonl.gz") for path in files)
    assert sum(path.stat().st_size for path in files) < sizes
    for relative, spans in before.items():
        assert read_spans(run_dir / relative) == spans  # the plain name still reads: its .gz stands in
    assert sorted(map(span_key, read_run(run_dir))) == sorted(
        span_key(view) for spans in before.values() for view in spans
    )
    summary = export_run(run_dir, receiver.base_url)  # type: ignore[attr-defined]
    assert summary.ok and summary.spans == sum(map(len, before.values())), summary.describe()


def test_a_cut_compressed_span_file_gives_what_it_holds(tmp_path: Path) -> None:
    import gzip

    from mcpfault.telemetry.span_files import span_file_bytes

    text = b"".join(b'{"resourceSpans": []}\n' for _ in range(2000))
    packed = gzip.compress(text)
    (tmp_path / "x-spans.jsonl.gz").write_bytes(packed[: len(packed) // 2])
    kept = span_file_bytes(tmp_path / "x-spans.jsonl")
    assert kept and text.startswith(kept)


# Friction 10: server-killed exercises writes, and its recovery says what it measured.
def test_the_server_killed_experiment_writes_and_says_when_no_recovery_was_needed() -> None:
    from mcpfault.experiments.plan import load
    from mcpfault.experiments.report import recovery_s, saw_errors

    plan = load("server-killed")
    assert plan.load is not None
    assert {"maintenance_roundtrip", "open_incident"} <= set(plan.load.workflows)  # the workflows that write
    untroubled = [(float(t), 10, 0, 0) for t in range(8)]  # the kill at 2 s, and not one request failed
    assert recovery_s(untroubled, 2.0) == 0.0 and not saw_errors(untroubled, 2.0)
    troubled = [*untroubled[:3], (3.0, 10, 4, 0), *untroubled[4:]]
    assert recovery_s(troubled, 2.0) == 2.0 and saw_errors(troubled, 2.0)


def test_an_http_proxy_stopped_by_a_signal_says_so_in_its_closing_line(tmp_path: Path) -> None:
    import signal

    events = tmp_path / "events.jsonl"
    proxy = subprocess.Popen(
        [*MCPFAULT, "proxy", "-c", "baseline", "--events", str(events), "--listen", "127.0.0.1:0", "--", *MOCK],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proxy.stderr is not None
    try:
        for line in proxy.stderr:
            if "mcpfault: serving" in line:
                break
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(timeout=60)
    finally:
        proxy.kill()
        proxy.stderr.close()
    last = _event_lines(events)[-1]
    assert last["event"] == "proxy_stopped" and last["ended_by"] == "signal SIGTERM", last
    assert last["exit_code"] == proxy.returncode
