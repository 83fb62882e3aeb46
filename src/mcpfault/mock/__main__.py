"""`python -m mcpfault.mock [--seed N] [--state FILE]`: run the mock MCP server on stdio."""

from __future__ import annotations

import argparse
import pathlib


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mcpfault.mock",
        description="Serve a deterministic simulated network-operations world as an MCP server on stdio.",
    )
    parser.add_argument("--seed", type=int, default=0, help="world seed; the same seed gives the same world")
    parser.add_argument(
        "--state",
        type=pathlib.Path,
        metavar="FILE",
        help="on exit (stdin closed, SIGTERM, SIGINT) write the final world state here as JSON",
    )
    args = parser.parse_args(argv)
    # Imported late so --help answers without building the tool schemas.
    from mcpfault.mock.server import serve

    serve(seed=args.seed, state_path=args.state)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
