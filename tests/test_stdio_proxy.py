"""The real proxy process in front of a real (scripted) server process: transparency and lifecycle."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pytest

from mcpfault.protocol.jsonlines import parse_jsonl, read_jsonl
from tests.conftest import PROFILES, call, request, write_profile

INIT = request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}})
pytestmark = pytest.mark.slow


def test_untouched_lines_cross_byte_for_byte_in_order(proxy_factory):
    proxy = proxy_factory()
    # Odd but valid spacing, key order and unicode (with U+2028 inside a string) must survive as is.
    lines = [
        INIT,
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n',
        b'{ "id" : 7 , "jsonrpc":"2.0", "method":"tools/call", "params":{"name":"echo","arguments":{"text":"\xe2\x80\xa8 caf\xc3\xa9"}}}\n',
        b'{"jsonrpc":"2.0","id":"s-1","method":"tools/call","params":{"name":"echo","arguments":{"text":"b"}}}\n',
    ]
    for line in lines:
        proxy.send(line)
    answers = [proxy.read_json() for _ in range(3)]
    assert [a["id"] for a in answers] == [0, 7, "s-1"]
    assert answers[1]["result"]["structuredContent"]["text"] == "\u2028 café"
    proxy.close_stdin()
    assert proxy.wait() == 0
    assert proxy.received() == b"".join(lines)


def test_sixteen_mib_lines_both_ways(proxy_factory):
    proxy = proxy_factory()
    big_text = "y" * (16 * 1024 * 1024)
    line = call(1, "echo", text=big_text)
    proxy.send(line)
    answer = proxy.read_json(timeout=30)
    assert answer["result"]["structuredContent"]["text"] == big_text
    proxy.send(call(2, "big", size=16 * 1024 * 1024))
    assert len(proxy.read_json(timeout=30)["result"]["content"][0]["text"]) == 16 * 1024 * 1024
    proxy.close_stdin()
    assert proxy.wait() == 0
    assert proxy.received() == line + call(2, "big", size=16 * 1024 * 1024)


def test_invalid_utf8_and_non_json_are_relayed_and_logged_once(proxy_factory):
    proxy = proxy_factory()
    junk = [b"\xff\xfe not utf-8\n", b"plain text\n", b"[1, 2]\n", b'{"jsonrpc":"2.0","id":true,"method":"x"}\n']
    for line in junk:
        proxy.send(line)
    proxy.send(call(1, "echo", text="after junk"))
    # The scripted server answers the boolean-id request; the proxy relays that answer untouched.
    assert proxy.read_json()["id"] is True
    assert proxy.read_json()["result"]["structuredContent"]["text"] == "after junk"
    # The server writes junk too: it reaches the client as is.
    proxy.send(call(2, "raw", hex=b"\xc3\x28 bad utf8 from server\n".hex()))
    assert proxy.read_line() == b"\xc3\x28 bad utf8 from server\n"
    assert proxy.read_json()["id"] == 2
    proxy.close_stdin()
    assert proxy.wait() == 0
    assert proxy.received() == b"".join(junk) + call(1, "echo", text="after junk") + call(
        2, "raw", hex=b"\xc3\x28 bad utf8 from server\n".hex()
    )
    stderr = proxy.stderr()
    assert stderr.count("cannot parse") == 2, stderr  # once per direction
    assert "client->server 4" in stderr


def test_partial_line_at_eof_is_forwarded(proxy_factory):
    proxy = proxy_factory()
    proxy.send(call(1, "echo", text="x") + b'{"partial":')
    proxy.read_json()
    proxy.close_stdin()
    assert proxy.wait() == 0
    assert proxy.received().endswith(b'{"partial":')


def test_server_exit_mid_request_answers_in_flight_then_eof(proxy_factory):
    proxy = proxy_factory()
    # Both are in flight when the server exits on the first: neither will ever be answered by it.
    proxy.send(call(1, "exit", code=3) + call(2, "echo", text="queued behind the exit"))
    rest = proxy.read_until_eof(timeout=5)
    answers = parse_jsonl(rest)
    assert [a["id"] for a in answers] == [1, 2]
    for answer in answers:
        assert answer["error"]["code"] == -32000
        assert "exited with code 3" in answer["error"]["message"]
        assert answer["error"]["data"]["mcpfault"] == {"reason": "upstream_exited", "exit_code": 3}
    assert proxy.wait() == 3
    assert [e["client_received"] for e in proxy.events()] == ["upstream_exited", "upstream_exited"]


def test_answers_behind_a_long_line_to_a_slow_client_still_arrive_after_the_server_exits(proxy_factory):
    # The server answers and exits at once; the proxy is still writing a long line to a client that
    # is not reading yet. Its answer, queued behind that line, must arrive as the server wrote it: not
    # be replaced by "exited before answering" when some fixed drain time after the exit ran out.
    script = (
        "import sys; sys.stdin.buffer.readline(); out = sys.stdout.buffer; "
        'out.write(b\'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"\''
        " + b'z' * (8 << 20) + b'\"}}\\n'); "
        'out.write(b\'{"jsonrpc":"2.0","id":1,"result":{"ok":true}}\\n\'); out.flush()'
    )
    proxy = proxy_factory(PROFILES / "baseline.toml", server=[sys.executable, "-c", script])
    proxy.send(call(1, "echo", text="answered, then the server exits"))
    time.sleep(2.0)  # the client reads nothing for a while: the proxy's write of the long line waits
    lines = proxy.read_until_eof(timeout=20).splitlines()
    assert [len(line) > 8 << 20 for line in lines] == [True, False]
    assert json.loads(lines[1]) == {"jsonrpc": "2.0", "id": 1, "result": {"ok": True}}
    assert proxy.wait() == 0
    assert [e["client_received"] for e in proxy.events()] == ["response"]


def test_server_killed_mid_request_gets_error_within_a_second(proxy_factory, tmp_path):
    pid_file = tmp_path / "pid"
    server = ["/bin/sh", "-c", f"echo $$ > {pid_file}; exec sleep 30"]
    proxy = proxy_factory(PROFILES / "baseline.toml", server=server)
    proxy.send(call(1, "echo", text="never answered"))
    deadline = time.monotonic() + 5
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.1)
    import os

    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    answer = proxy.read_json(timeout=3)
    assert answer["id"] == 1 and answer["error"]["code"] == -32000
    assert proxy.read_until_eof(timeout=3) == b""
    assert proxy.wait() == 128 + signal.SIGKILL


def test_client_closing_stdin_closes_server_stdin_and_exit_code_propagates(proxy_factory):
    proxy = proxy_factory(PROFILES / "baseline.toml", "--exit-code", "7")
    proxy.send(INIT)
    proxy.read_json()
    proxy.close_stdin()
    assert proxy.read_until_eof() == b""
    assert proxy.wait() == 7


def test_server_that_ignores_eof_is_ended_after_the_grace(proxy_factory):
    proxy = proxy_factory(
        PROFILES / "baseline.toml",
        "--linger-after-eof",
        "30",
        "--ignore-sigterm",
        extra=("--shutdown-timeout", "0.3"),
    )
    proxy.send(INIT)
    proxy.read_json()
    started = time.monotonic()
    proxy.close_stdin()
    status = proxy.wait(timeout=10)
    assert time.monotonic() - started < 5  # 0.3 s grace, then SIGTERM (ignored), then SIGKILL after 2 s
    assert status == 128 + signal.SIGKILL


def test_sigterm_is_forwarded_and_the_proxy_exits_with_the_servers_status(proxy_factory):
    proxy = proxy_factory(PROFILES / "baseline.toml", extra=("--log-level", "info"))
    proxy.send(INIT)
    proxy.read_json()
    proxy.send(call(1, "sleep", seconds=30))
    time.sleep(0.2)
    proxy.signal(signal.SIGTERM)
    answer = proxy.read_json(timeout=5)
    assert answer["id"] == 1 and "exited with code 143" in answer["error"]["message"]
    # The proxy was signalled, not the server dying on its own: the client is told so.
    assert "the proxy is stopping (signal SIGTERM, passed on to the MCP server" in answer["error"]["message"]
    assert answer["error"]["data"]["mcpfault"]["proxy_stopping"] == "signal SIGTERM"
    assert proxy.wait() == 143
    assert "forwarding signal" in proxy.stderr()


def test_server_writing_before_it_is_asked_reaches_the_client(proxy_factory):
    hello = '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"hi"}}'
    proxy = proxy_factory(PROFILES / "baseline.toml", "--hello", hello)
    assert proxy.read_line() == hello.encode() + b"\n"


def test_events_and_summary_report_faults(proxy_factory, tmp_path):
    profile = write_profile(
        tmp_path,
        """
name = "all-errors"
seed = 3
[[faults]]
name = "boom"
type = "error"
tools = ["echo"]
""",
    )
    proxy = proxy_factory(profile)
    proxy.send(INIT)
    proxy.read_json()
    proxy.send(call(1, "echo", text="a"))
    proxy.send(call(2, "counter"))
    assert proxy.read_json()["error"]["code"] == -32603
    assert proxy.read_json()["result"]["structuredContent"] == {"count": 1}
    proxy.close_stdin()
    assert proxy.wait() == 0
    events = proxy.events()
    assert [e["method"] for e in events] == ["initialize", "tools/call", "tools/call"]
    boom = events[1]
    assert boom["rule"] == "boom" and boom["fault_type"] == "error" and boom["fault_mode"] == "protocol"
    assert boom["upstream_contacted"] is False and boom["client_received"] == "error"
    assert events[2]["rule"] is None and events[2]["client_received"] == "response"
    assert all(e["era"] == "legacy" and e["protocol_version"] == "2025-11-25" for e in events[1:])
    # The server never saw the faulted call.
    assert b'"echo"' not in proxy.received()
    stderr = proxy.stderr()
    assert "boom" in stderr and "injected" in stderr


def test_timeout_drop_lets_the_server_act(proxy_factory, tmp_path):
    profile = write_profile(tmp_path, '[[faults]]\ntype = "timeout"\ntools = ["counter"]\nlimit = 1\n')
    proxy = proxy_factory(profile)
    proxy.send(call(1, "counter"))
    proxy.send(call(2, "counter"))
    answer = proxy.read_json()
    assert answer["id"] == 2 and answer["result"]["structuredContent"] == {"count": 2}  # the server acted twice
    proxy.close_stdin()
    assert proxy.wait() == 0
    first = proxy.events()[0]
    assert first["client_received"] == "nothing" and first["upstream_contacted"] is True


def test_late_reply_arrives_after_its_delay(proxy_factory, tmp_path):
    profile = write_profile(tmp_path, '[[faults]]\ntype = "timeout"\nmode = "late"\ndelay_s = 0.5\nlimit = 1\n')
    proxy = proxy_factory(profile)
    started = time.monotonic()
    proxy.send(call(1, "echo", text="late"))
    proxy.send(call(2, "echo", text="on time"))
    assert proxy.read_json()["id"] == 2
    assert proxy.read_json()["id"] == 1
    assert time.monotonic() - started >= 0.5


def test_invalid_profile_is_refused_with_every_problem(tmp_path):
    import subprocess
    import sys

    bad = write_profile(tmp_path, '[[faults]]\ntype = "nope"\n[[faults]]\ntype = "latency"\nprobability = 2\n')
    result = subprocess.run(
        [sys.executable, "-m", "mcpfault", "proxy", "--config", str(bad), "--", "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "faults[0].type: unknown fault type 'nope'" in result.stderr
    assert "faults[1].probability: 2 is outside [0, 1]" in result.stderr


def test_missing_server_command_is_a_clear_error(tmp_path):
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "mcpfault", "proxy", "--config", str(PROFILES / "baseline.toml"), "--", "no-such-cmd"],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 127
    assert "'no-such-cmd' was not found" in result.stderr


def test_regular_file_as_stdin(tmp_path: Path):
    import subprocess
    import sys

    from tests.conftest import SCRIPTED_SERVER

    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(INIT + call(1, "echo", text="from a file"))
    with requests.open("rb") as stdin:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "mcpfault",
                "proxy",
                "--config",
                str(PROFILES / "baseline.toml"),
                "--no-summary",
                "--",
                sys.executable,
                str(SCRIPTED_SERVER),
            ],
            stdin=stdin,
            capture_output=True,
            timeout=30,
        )
    assert result.returncode == 0, result.stderr
    answers = parse_jsonl(result.stdout)
    assert answers[1]["result"]["structuredContent"]["text"] == "from a file"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_client_that_stops_reading_gets_backpressure_not_buffering(proxy_factory):
    proxy = proxy_factory()
    proxy.send(INIT)
    proxy.read_json()
    before = rss_kib(proxy.proc.pid)
    count, size = 800, 32 * 1024  # 25 MiB of answers the client does not read for a while
    import threading

    writer = threading.Thread(
        target=lambda: proxy.send(b"".join(call(i, "big", size=size) for i in range(1, count + 1))), daemon=True
    )
    writer.start()
    time.sleep(1.5)
    grown_mib = (rss_kib(proxy.proc.pid) - before) / 1024
    assert grown_mib < 8, f"the proxy buffered {grown_mib:.1f} MiB instead of pushing back"
    ids = [proxy.read_json(timeout=30)["id"] for _ in range(count)]
    assert ids == list(range(1, count + 1))  # nothing lost, nothing reordered
    writer.join(10)
    proxy.close_stdin()
    assert proxy.wait() == 0


def test_events_record_what_the_client_got_and_when(proxy_factory, tmp_path):
    profile = write_profile(tmp_path, '[[faults]]\ntype = "latency"\ndelay_s = 2.0\ntools = ["echo"]\n')
    proxy = proxy_factory(profile)
    proxy.send(call(1, "echo", text="slow"))
    assert proxy.read_json()["id"] == 1
    proxy.send(call(2, "echo", text="given up"))
    time.sleep(0.2)
    proxy.send(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}\n')
    proxy.send(call(3, "counter"))  # untouched, sent after the cancel
    assert proxy.read_json()["id"] == 3
    deadline = time.monotonic() + 10
    while len(proxy.events()) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    events = {e["request_id"]: e for e in proxy.events()}
    assert events[2]["client_received"] == "cancelled"
    # Written when the client gave up, not when the delay ended: before the call sent after the cancel.
    assert [e["request_id"] for e in proxy.events()][1:] == [2, 3]
    assert events[2]["duration_s"] >= 0.15
    proxy.close_stdin()
    assert proxy.wait() == 0
    events = {e["request_id"]: e for e in proxy.events()}
    assert events[1]["client_received"] == "response" and events[1]["delay_s"] == 2.0
    assert events[1]["duration_s"] >= 2.0  # the injected delay is part of what the client waited
    assert events[2]["client_received"] == "cancelled"


def test_events_are_appended_with_a_line_per_start(proxy_factory, tmp_path):

    events_file = None
    for _ in range(2):
        proxy = proxy_factory(PROFILES / "error.toml", events=False, extra=("--events", str(tmp_path / "ev.jsonl")))
        proxy.send(call(1, "echo", text="x"))
        proxy.read_json()
        proxy.close_stdin()
        assert proxy.wait() == 0
        events_file = tmp_path / "ev.jsonl"
    assert events_file is not None
    rows = read_jsonl(events_file)
    starts = [r for r in rows if r.get("event") == "proxy_started"]
    assert len(starts) == 2 and all(s["profile"] == "error" and s["transport"] == "stdio" for s in starts)
    assert [r.get("event", r.get("method")) for r in rows] == ["proxy_started", "tools/call", "proxy_stopped"] * 2


def test_lines_a_lane_passes_around_a_process_fault_in_one_chunk_all_arrive(proxy_factory, tmp_path):
    # One write of three requests: the first and last take the core's lane (no rule acts on their
    # methods), the middle one stops the server first (a stall), which sends what came before it alone.
    profile = write_profile(tmp_path, '[[faults]]\ntype = "stall"\nduration_s = 0.3\ntools = ["slow"]\nlimit = 1\n')
    proxy = proxy_factory(profile, events=False)
    proxy.send(INIT)
    assert proxy.read_json()["id"] == 0
    proxy.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    proxy.send(request(1, "tools/list") + call(2, "slow", text="b") + request(3, "tools/list"))
    assert sorted(proxy.read_json()["id"] for _ in range(3)) == [1, 2, 3]
    proxy.close_stdin()
    assert proxy.wait() == 0
