"""The controller contract: what a controller returns (`TamiyoDecision`), what it is (`TamiyoPolicy`), and the check
runners apply so that an invalid decision is an error, never a silent no-op.

It sits below the registry and the controllers, which all depend on it (and never the other way round).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from esper.leyline import ActionSpace, EnvObservation, FactoredAction, LifecycleCommand

__all__ = [
    "BatchTamiyoPolicy",
    "InvalidDecisionError",
    "StatefulPolicy",
    "TamiyoDecision",
    "TamiyoPolicy",
    "check_decision",
]


@dataclass(frozen=True, slots=True)
class TamiyoDecision:
    """One controller decision. `factored` is the head-level action, None when the command is outside the heads."""

    command: LifecycleCommand
    factored: FactoredAction | None
    reason: str
    confidence: float
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.reason:
            raise ValueError("A decision needs a non-empty reason")
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"confidence must be in [0, 1], got {self.confidence}")

    @classmethod
    def from_command(
        cls,
        command: LifecycleCommand,
        *,
        space: ActionSpace,
        reason: str,
        confidence: float,
        info: dict[str, Any] | None = None,
    ) -> TamiyoDecision:
        """Build a decision whose `factored` form is derived from the command (None outside the policy head)."""
        return cls(command, FactoredAction.from_command(command, space), reason, confidence, info or {})


@runtime_checkable
class TamiyoPolicy(Protocol):
    """A controller: built for one episode (its randomness seeded from the episode's seed), then one decision per
    epoch."""

    @property
    def name(self) -> str: ...

    def decide(self, obs: EnvObservation) -> TamiyoDecision: ...


@runtime_checkable
class BatchTamiyoPolicy(TamiyoPolicy, Protocol):
    """A controller that decides for several environments at once (e.g. one batched network forward).

    Runners use `decide_batch` when `isinstance(policy, BatchTamiyoPolicy)`, else call `decide` per observation.
    """

    def decide_batch(self, observations: Sequence[EnvObservation]) -> list[TamiyoDecision]: ...


@runtime_checkable
class StatefulPolicy(TamiyoPolicy, Protocol):
    """A controller whose decisions depend on what it decided before (a rotation, embargoes, a random stream): it
    hands that state over in plain values, so a training run resumed from a checkpoint decides as the uninterrupted
    one. A controller without it decides from each observation alone."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class InvalidDecisionError(RuntimeError):
    """A controller returned a decision that the observation's validity rules forbid."""


def check_decision(decision: TamiyoDecision, obs: EnvObservation) -> None:
    """Raise `InvalidDecisionError` unless the decision is executable under `obs.validity`.

    Checks the command against the validity rules and, when present, that the factored action is valid and names
    the same command, so log-probabilities and the executed action can never disagree.
    """
    cmd = decision.command
    where = f"env {obs.env_id}, epoch {obs.epoch}"
    if not obs.validity.is_valid_command(cmd):
        raise InvalidDecisionError(f"{cmd.describe()} is invalid under the observation's validity ({where})")
    if decision.factored is None:
        if FactoredAction.from_command(cmd, obs.action_space) is not None:
            raise InvalidDecisionError(f"{cmd.describe()} maps to the policy head but has no factored action ({where})")
        return
    if not obs.validity.is_valid(decision.factored):
        raise InvalidDecisionError(f"factored action {decision.factored} is invalid ({where})")
    if decision.factored.to_command(obs.action_space) != cmd:
        raise InvalidDecisionError(f"factored action {decision.factored} does not match {cmd.describe()} ({where})")
