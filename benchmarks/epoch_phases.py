"""The phases of an env-epoch, as the benchmark scripts attribute work to them (shared by `count_syncs.py`, which
counts host reads per phase, and `epoch_costs.py`, which times them).

* train: the training batches and the BatchNorm recalibration;
* validation: the validation batches' full forward;
* counterfactuals: the validation forwards with a blended seed removed;
* probes: the validation forwards with a TRAINING seed in place of its slot;
* telemetry: closing the epoch (the one host read of every env's measurements, the governor, the seeds'
  bookkeeping, the observation, the rewards of the decisions it completes);
* decision: the controllers deciding (in the caller's process) and the envs executing the decisions with their
  lifecycle step;
* other: the rest (the shared batches, the final test pass).

`attributed(enter, current)` patches the methods that make up each phase so that everything they do runs inside
`enter(phase)`; `current()` names the phase now entered (counterfactuals and probes are validation forwards, so they
are told apart only inside validation). Run as a script, it prints the methods charged to each phase.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

from esper.env import driver, lockstep
from esper.env.env import MorphoEnv
from esper.env.groups import EnvHost
from esper.env.lockstep import Lockstep
from esper.kasmina.model import MorphogeneticModel

PHASES = ("train", "validation", "counterfactuals", "probes", "telemetry", "decision", "other")

Enter = Callable[[str], contextlib.AbstractContextManager[Any]]


def _in_phase(enter: Enter, current: Callable[[], str], name: str, method: Callable[..., Any],
              within: str | None = None) -> Callable[..., Any]:
    """`method` run in phase `name` (only while the current phase is `within`, when given)."""

    @functools.wraps(method)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if within is not None and current() != within:
            return method(*args, **kwargs)
        with enter(name):
            return method(*args, **kwargs)

    return wrapped


def _run_from(enter: Enter, current: Callable[[], str], method: Callable[..., Any]) -> Callable[..., Any]:
    """A validation forward restarted at a slot (a counterfactual) runs in `counterfactuals`."""
    counterfactual = _in_phase(enter, current, "counterfactuals", method, within="validation")

    @functools.wraps(method)
    def wrapped(self: MorphogeneticModel, slot: str | None, *args: Any, **kwargs: Any) -> Any:
        return (method if slot is None else counterfactual)(self, slot, *args, **kwargs)

    return wrapped


TARGETS: tuple[tuple[str, Any, str, str | None], ...] = (
    *(("train", MorphoEnv, m, None) for m in ("begin_epoch", "train_batch", "finish_train_pass")),
    ("validation", MorphoEnv, "validate_batch", None),
    ("probes", MorphogeneticModel, "forward_probe", "validation"),
    ("counterfactuals", MorphogeneticModel, "_run_from", "validation"),  # only a forward restarted at a slot
    *(("telemetry", MorphoEnv, m, None) for m in ("wait_for_passes", "finish_measurements", "observe")),
    ("telemetry", lockstep, "_read", None),
    ("telemetry", Lockstep, "_credit", None),
    ("decision", driver, "decide_all", None),
    ("decision", EnvHost, "conclude", None),
)
"""(phase, owner, method, the phase it must be called within or None): what `attributed` patches."""


@contextlib.contextmanager
def attributed(enter: Enter, current: Callable[[], str]) -> Iterator[None]:
    """Inside the block, each phase's methods run inside `enter(phase)`."""
    with contextlib.ExitStack() as stack:
        for phase, owner, name, within in TARGETS:
            method = getattr(owner, name)
            wrapped = (_run_from(enter, current, method) if phase == "counterfactuals"
                       else _in_phase(enter, current, phase, method, within))
            stack.enter_context(mock.patch.object(owner, name, wrapped))
        yield


def main() -> None:
    """Print the methods each phase is charged with; entering `attributed` checks that every one still exists."""
    with attributed(lambda phase: contextlib.nullcontext(), lambda: "other"):
        for phase in PHASES:
            methods = [f"{owner.__name__.rsplit('.', 1)[-1]}.{name}" + (f" (within {within})" if within else "")
                       for p, owner, name, within in TARGETS if p == phase]
            print(f"{phase}: {', '.join(methods) or 'everything the other phases leave'}")


if __name__ == "__main__":
    main()
