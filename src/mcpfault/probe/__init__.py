"""Side effects per tool call: what the server's processes did, from a sidecar speaking mcpfz-probe's protocol.

``sidecar`` and its backends (``ebpf``: bpftrace on syscall tracepoints; the fake in ``sidecar``) run
as ``mcpfault probe-sidecar``; ``observer`` is the proxy's side: a request observer that marks each
tools/call window, through mcpfz_probe's monitor, and turns what happened into findings with its policy.
"""
