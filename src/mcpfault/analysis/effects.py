"""Touched or affected: did a fault change what the client received?

A fault *touches* a request when the proxy applied it; it *affects* the request when the client
received something other than what it would have without the fault:

- a lost response (timeout) or a delay past the client's deadline (latency): the client got nothing
  in time, which its attempt records as a failure; a delay within the deadline changed nothing;
- an error (error): when the client's attempt failed, which an error answer always makes it;
- a stale answer: when it differs from the fresh one in something the task reads, i.e. the server's
  state changed since the replayed answer was computed (the mock stamps every answer with the
  revision it was computed at, ``as_of``, and every write's span event carries the revision after it
  and its op) and a write since then changed a field the task's code reads of that tool (the fields
  each write op changes are the server's to say: ``TaskReads.changed_by``);
- a changed answer (malformed, lie, schema_drift): when the client's attempt failed (a corrupted
  answer, a call rejected for its old argument names), or a result field the fault changed (its event
  names them: corrupted, made wrong, renamed) is one the task reads. A change that names no field
  counts, unless the fault type names every change it makes (``names_every_change``: a rename, where
  naming none means a call translated to the server's names or an answer without the old ones).

Anything else the proxy did (HTTP faults, a fault type this module does not know) counts as affecting:
when in doubt a fault is said to have had an effect, so "touched, no effect" is never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mcpfault.faults.base import Effect
from mcpfault.faults.catalog import CATALOG


@dataclass(frozen=True, slots=True)
class AttemptView:
    """What the judge knows of one request, from the client's side and the server's."""

    tool: str | None = None
    failed: bool = False  # the client got no usable answer (its attempt has a failure class)
    as_of: int | None = None  # the revision the answer was computed at, when it carried one
    revision: int | None = None  # the server's revision when the request was sent; None: no write yet
    server_seen: bool = False  # whether the server's spans are known (None above then means "no write yet")
    # The ops of the server's writes after ``as_of`` up to ``revision`` (None: not known).
    changed_ops: frozenset[str] | None = None
    # The result fields the faults changed (their events name them; None: none named).
    changed_fields: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class TaskReads:
    """What a task's code reads, and what the server's writes change: what decides a changed answer's effect."""

    fields: Mapping[str, frozenset[str]] = field(default_factory=dict)  # tool -> result fields the code reads
    changed_by: Mapping[str, frozenset[str]] = field(default_factory=dict)  # write op -> result fields it changes


def affects(fault_type: str, attempt: AttemptView, reads: TaskReads | None) -> bool:
    """Whether one fault the proxy applied to a request changed what the client received."""
    known = CATALOG.get(fault_type)
    effect: Effect = known.effect if known is not None else "always"
    if effect == "failure":
        return attempt.failed
    if effect == "outdated":
        if attempt.failed:
            return True
        if attempt.as_of is None or not attempt.server_seen:
            return True  # no revision to compare: cannot show the replay was the fresh answer
        if attempt.revision is None:
            return False  # no write before it: the world is as generated, the old answer is the fresh one
        if attempt.as_of == attempt.revision:
            return False
        return _reads_any(attempt, reads, _changed_fields(attempt.changed_ops, reads))
    if effect == "changed_fields":
        if attempt.failed:
            return True
        if attempt.changed_fields is None and known is not None and known.names_every_change:
            return False
        return _reads_any(attempt, reads, attempt.changed_fields)
    return True


def _changed_fields(ops: frozenset[str] | None, reads: TaskReads | None) -> frozenset[str] | None:
    """The result fields the writes ``ops`` changed; None when some op's fields are not known."""
    if ops is None or reads is None or not ops:
        return None
    changed: set[str] = set()
    for op in ops:
        fields = reads.changed_by.get(op)
        if fields is None:
            return None
        changed |= fields
    return frozenset(changed)


def _reads_any(attempt: AttemptView, reads: TaskReads | None, fields: frozenset[str] | None) -> bool:
    """Whether the task's code reads one of ``fields`` of the attempt's tool; True when in doubt."""
    if fields is None or reads is None or attempt.tool is None or attempt.tool not in reads.fields:
        return True
    return bool(fields & reads.fields[attempt.tool])
