"""``mcpfault fake-llm``: the scripted fake model as an OpenAI-compatible (and Messages API) server."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from mcpfault.cli.common import EXIT_OK
from mcpfault.errors import UsageError


def add_parser(commands: Any) -> None:
    from mcpfault.harness.agents.llm.fakemodel import BEHAVIOURS

    fake = commands.add_parser(
        "fake-llm",
        help="a scripted model on loopback speaking OpenAI Chat Completions (and the Messages API): no key needed",
        description="Serve the fake model's policy at http://HOST:PORT/v1/chat/completions (OpenAI Chat Completions: "
        "tools, tool_calls, finish_reason, usage) and /v1/messages (Anthropic Messages), for any model name. Offer "
        "the task's MCP tools plus submit_answer (parameters: the task's answer schema) and report_failure "
        "(parameters: reason), put the task's instruction in the first user message, and send each tool result "
        "as its JSON (a failed call as text, 'ERROR: ...'). A model named fake-BEHAVIOUR picks that behaviour. "
        "Prints the base URL (ending /v1) on stdout, then serves until interrupted.",
    )
    fake.add_argument("--listen", default="127.0.0.1:0", metavar="HOST:PORT", help="loopback only (127.0.0.1:0)")
    fake.add_argument(
        "--behaviour",
        choices=BEHAVIOURS,
        default="careful",
        help="what the model does when a call fails, for model names that do not pick one (careful)",
    )
    fake.set_defaults(handler=_fake_llm)


def _fake_llm(args: argparse.Namespace) -> int:
    from mcpfault.harness.agents.llm.fakemodel import FakeMessagesServer
    from mcpfault.loopback import is_loopback
    from mcpfault.proxy.http.serve import parse_listen

    address = parse_listen(args.listen)
    if not is_loopback(address.host):
        raise UsageError(f"--listen {args.listen}: the fake model serves loopback only; bind 127.0.0.1")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        server = FakeMessagesServer(args.behaviour, port=address.port).start()
    except OSError as exc:
        raise UsageError(f"--listen {args.listen}: cannot listen there ({exc})") from None
    try:
        print(f"{server.base_url}/v1", flush=True)
        print(
            f"mcpfault fake-llm: serving {server.base_url}/v1/chat/completions and /v1/messages "
            f"(behaviour {args.behaviour}); any API key is accepted",
            file=sys.stderr,
            flush=True,
        )
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return EXIT_OK
