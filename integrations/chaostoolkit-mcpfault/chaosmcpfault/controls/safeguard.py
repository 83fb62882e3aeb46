"""Stop an experiment when a probe crosses its tolerance (chaostoolkit-addons' safeguards idiom).

Declare it with probes that carry a ``tolerance``, as in a steady-state hypothesis::

    "controls": [{"name": "mcpfault-safeguard", "provider": {"type": "python",
        "module": "chaosmcpfault.controls.safeguard",
        "arguments": {"interval_s": 0.5, "probes": [{"name": "errors-below-half", "type": "probe",
            "tolerance": [0, 0.5],
            "provider": {"type": "python", "module": "chaosmcpfault.probes", "func": "error_rate"}}]}}}]

Each probe runs before and after every activity, and every ``interval_s`` seconds in a background
thread while the experiment runs. The first that falls outside its tolerance interrupts: at the next
activity boundary ``InterruptExecution`` (the journal's status is "interrupted"), or at once from the
thread through ``chaoslib.exit.exit_gracefully`` (a SIGUSR1 to this process).

Chaos Toolkit's default rollback strategy skips the rollbacks of an interrupted run, which would leave
the faults the experiment added in the proxy. When this safeguard interrupted the run and no rollback
was played, it plays the experiment's rollbacks itself at the end (``rollback_on_interrupt``, true
unless set false) and records them in the journal's ``rollbacks`` as Chaos Toolkit would.
"""

import threading
from typing import Any

from chaoslib.activity import execute_activity, run_activity
from chaoslib.exceptions import InterruptExecution, InvalidActivity
from chaoslib.exit import exit_gracefully
from chaoslib.hypothesis import ensure_hypothesis_tolerance_is_valid, within_tolerance
from chaoslib.types import Configuration, Experiment, Secrets

__all__ = [
    "configure_control",
    "before_activity_control",
    "after_activity_control",
    "before_method_control",
    "after_method_control",
    "after_experiment_control",
    "cleanup_control",
]

MIN_INTERVAL_S = 0.1


class _Guard:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.probes: list[dict[str, Any]] = []
        self.configuration: Configuration = None
        self.secrets: Secrets = None
        self.crossed: str | None = None
        self.in_method = False  # only the method is interrupted: hypotheses and rollbacks run whole
        self.interrupted = False
        self.rollback_on_interrupt = True
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def check(self) -> str | None:
        """Run every probe once; the first crossing (kept for good), or None."""
        for probe in self.probes:
            if self.crossed is not None:
                break
            name = probe.get("name", "?")
            try:
                value = run_activity(probe, self.configuration, self.secrets)
            except Exception as exc:  # a probe that cannot run guards nothing: that is a crossing too
                self._cross(f"safeguard probe {name!r} failed: {exc}")
                break
            if not within_tolerance(probe["tolerance"], value, self.configuration, self.secrets):
                self._cross(f"safeguard probe {name!r} crossed its tolerance {probe['tolerance']!r}: got {value!r}")
        return self.crossed

    def _cross(self, why: str) -> None:
        with self.lock:
            if self.crossed is None:
                self.crossed = why

    def watch(self, interval_s: float) -> None:
        while not self.stop.wait(interval_s):
            if self.in_method and self.crossed is None and self.check() is not None:
                with self.lock:
                    if not self.in_method or self.interrupted:
                        return
                    self.interrupted = True
                exit_gracefully()  # interrupts the main thread where it is; rollbacks still run
                return


_guard = _Guard()


def configure_control(
    probes: list[dict[str, Any]] | None = None,
    interval_s: float = 1.0,
    *,
    rollback_on_interrupt: bool = True,
    configuration: Configuration = None,
    secrets: Secrets = None,
    experiment: Experiment = None,
) -> None:
    """Validate the probes (each needs a ``tolerance``) and start watching every ``interval_s`` s."""
    cleanup_control()
    if not probes:
        raise InvalidActivity("the mcpfault safeguard needs 'probes': probes with a 'tolerance' each")
    for probe in probes:
        if "tolerance" not in probe:
            raise InvalidActivity(f"safeguard probe {probe.get('name', '?')!r} has no 'tolerance'")
        ensure_hypothesis_tolerance_is_valid(probe["tolerance"])
    _guard.reset()
    _guard.probes, _guard.configuration, _guard.secrets = list(probes), configuration, secrets
    _guard.rollback_on_interrupt = bool(rollback_on_interrupt)
    thread = threading.Thread(
        target=_guard.watch, args=(max(MIN_INTERVAL_S, float(interval_s)),), name="mcpfault-safeguard", daemon=True
    )
    _guard.thread = thread
    thread.start()


def _interrupt_if_crossed() -> None:
    if not _guard.in_method or _guard.interrupted:
        return
    why = _guard.crossed or (_guard.check() if _guard.probes else None)
    if why is not None:
        with _guard.lock:
            if _guard.interrupted:
                return
            _guard.interrupted = True
        raise InterruptExecution(why)


def before_method_control(context: Experiment, **_kwargs: Any) -> None:
    """Check before the method starts (a proxy already past the threshold runs nothing)."""
    _guard.in_method = True
    _interrupt_if_crossed()


def after_method_control(context: Experiment, **_kwargs: Any) -> None:
    _guard.in_method = False


def before_activity_control(context: dict[str, Any], **_kwargs: Any) -> None:
    if context.get("name") not in {probe.get("name") for probe in _guard.probes}:
        _interrupt_if_crossed()


def after_activity_control(context: dict[str, Any], state: Any = None, **_kwargs: Any) -> None:
    if context.get("name") not in {probe.get("name") for probe in _guard.probes}:
        _interrupt_if_crossed()


def after_experiment_control(
    context: Experiment, state: Any = None, configuration: Configuration = None, secrets: Secrets = None, **_kwargs: Any
) -> None:
    """Play the rollbacks of a run this safeguard interrupted, when Chaos Toolkit did not."""
    _guard.stop.set()
    if not (_guard.interrupted and _guard.rollback_on_interrupt and isinstance(state, dict)):
        return
    if state.get("status") != "interrupted" or state.get("rollbacks"):
        return
    runs: list[Any] = []
    for rollback in context.get("rollbacks", []):
        runs.append(execute_activity(context, rollback, configuration or {}, secrets or {}, None))
    state["rollbacks"] = runs


def cleanup_control() -> None:
    """Stop the watching thread (at the end of the run)."""
    _guard.stop.set()
    thread = _guard.thread
    if thread is not None and thread is not threading.current_thread():
        thread.join(5)
    _guard.thread = None
