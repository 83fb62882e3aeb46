"""``mcpfault probe-sidecar``: the side-effect sidecar, speaking mcpfz-probe's protocol."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mcpfault.cli.common import logging_options


def add_parser(commands: Any) -> None:
    sidecar = commands.add_parser(
        "probe-sidecar",
        help="the side-effect sidecar (mcpfz-probe's NDJSON protocol; eBPF or scripted events)",
        description="Read mcpfz-probe control lines (scope, mark begin/end, shutdown) on stdin and write status\n"
        "and event lines on stdout. --backend ebpf traces the scoped process tree with bpftrace (root, or\n"
        "CAP_BPF and CAP_PERFMON); --backend fake replays --events-file deterministically, anywhere.\n"
        "It stands in for the mcpfz-probe binary: MCPFZ_PROBE_BIN may point at a script running it.",
        epilog="examples:\n"
        "  mcpfault probe-sidecar --backend fake --events-file events.json\n"
        "  sudo mcpfault probe-sidecar --backend ebpf\n"
        "exit status: 0 after shutdown or EOF; 2 bad input, no bpftrace, or not privileged",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sidecar.add_argument("--backend", choices=["ebpf", "fake"], default="ebpf", help="default: ebpf")
    sidecar.add_argument("--events-file", type=Path, metavar="F.json", help="fake backend: the events to replay")
    logging_options(sidecar)
    sidecar.set_defaults(handler=_sidecar)


def _sidecar(args: argparse.Namespace) -> int:
    from mcpfault.probe import sidecar
    from mcpfault.telemetry.logging import configure

    configure(args.log_level, args.log_format)  # stderr: stdout is the protocol's
    return sidecar.main(args.backend, args.events_file)
