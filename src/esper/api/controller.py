"""`esper.Controller`: any controller esper knows, deciding once per epoch of the user's own training loop.

Per `step`: the seeds are measured with the user's `evaluate()` (probes and counterfactuals, `measure`), the epoch's
optimizer-hook telemetry is read (`telemetry`), the slot reports, signals and action validity become the very
`EnvObservation` esper's own envs give their controllers (so a learned policy sees what it saw in training), the
controller decides, and the decision and the lifecycle's own step (α ramps, gates, automatic culls) are executed,
with one optimizer group per seed (`groups`). Under torch.distributed, rank 0's measurements and decision are every
rank's, so all ranks grow the same seeds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch
import torch.distributed as dist
from pydantic import Field, StrictFloat, StrictInt
from torch import nn

from esper.api.groups import SeedGroups
from esper.api.measure import Contributions, Evaluate, measure_contributions
from esper.api.slotset import SlotSet
from esper.api.telemetry import EpochTelemetry, GradientTelemetry
from esper.api.wrapping import slot_set_of
from esper.env.masks import build_slot_states
from esper.evaluation.controllers import all_controllers
from esper.kasmina.state import LifecycleConfig
from esper.leyline import (
    EnvObservation,
    LifecycleCommand,
    LifecycleOp,
    TelemetryEvent,
    TelemetryEventType,
    compute_action_validity,
)
from esper.leyline.constants import MAX_EPISODE_LENGTH, MAX_WEIGHT, NUM_SLOTS
from esper.leyline.errors import UserInputError
from esper.leyline.seeding import derive_seed
from esper.leyline.strict_config import StrictConfig
from esper.tamiyo import ControllerContext, SignalTracker, StatefulPolicy, TamiyoPolicy, check_decision

__all__ = ["METRICS", "Controller", "GrowthConfig", "StepResult", "Transition"]

STATE_FORMAT = "esper-controller-v1"
METRICS = ("val_accuracy", "val_loss", "train_accuracy", "train_loss")
"""What `step` takes: the validation accuracy in percent (required) and, if measured, the rest (accuracies in
percent). A missing loss is NaN to the controllers: the heuristic then germinates on accuracy plateaus only."""


class GrowthConfig(StrictConfig):
    """How seeds grow in a user's model: the lifecycle's thresholds, how many seeds at once, where their initial
    weights come from, and the loss of a uniform guess (which scales the loss features learned policies see)."""

    KIND: ClassVar[str] = "growth config"
    FIX: ClassVar[str] = "pass GrowthConfig(KEY=VALUE) as Controller(config=...)"
    lifecycle: LifecycleConfig = Field(default_factory=LifecycleConfig, description="the seed lifecycle's gates")
    max_seeds: StrictInt | None = Field(default=None, ge=1, le=NUM_SLOTS,
                                        description="seeds alive or fossilized at once (None: one per slot)")
    seed: StrictInt = Field(default=0, ge=0, le=2**63 - 1,
                            description="the random stream of seed initializations (every rank draws the same)")
    random_guess_loss: StrictFloat | None = Field(default=None, gt=0.0, le=MAX_WEIGHT,
                                                  description="ln(classes) (None: from the model's output width)")


class Transition(NamedTuple):
    """A seed's change of stage in one step (an emptied slot's seed went to CULLED)."""

    slot: str
    path: str
    old: str
    new: str
    reason: str


@dataclass(frozen=True)
class StepResult:
    """What one `step` changed. `added`/`removed`: slots whose seed's parameters joined or left the optimizer; after
    either, a DDP wrapper must be rebuilt (`structure_changed`)."""

    epoch: int
    command: LifecycleCommand | None  # None after the last epoch: nothing is decided then
    reason: str
    transitions: tuple[Transition, ...]
    added: tuple[str, ...]
    removed: tuple[str, ...]
    contributions: Contributions

    @property
    def structure_changed(self) -> bool:
        return bool(self.added or self.removed)


@dataclass(frozen=True)
class _Measured:
    """One epoch's measurements: rank 0's are every rank's."""

    metrics: dict[str, float]
    contributions: Contributions
    telemetry: EpochTelemetry
    seconds: float


def _from_rank0(value: Any) -> Any:
    if not (dist.is_available() and dist.is_initialized()):
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _epoch_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    unknown = sorted(set(metrics) - set(METRICS))
    if unknown or "val_accuracy" not in metrics:
        raise UserInputError(f"step() takes a mapping of {', '.join(METRICS)} (val_accuracy required, in percent); "
                             f"got {sorted(metrics)}")
    values = {k: float(metrics.get(k, math.nan)) for k in METRICS}
    if not 0.0 <= values["val_accuracy"] <= 100.0:
        raise UserInputError(f"val_accuracy {values['val_accuracy']} is not a percentage: multiply a fraction by 100")
    return values


class Controller:
    """Grows the seeds of a model `esper.wrap` prepared, for `max_epochs` calls of `step` (once per epoch).

    `policy`: any controller spec (`heuristic`, `heuristic:PATH.json`, `grow:BLUEPRINT@SLOT`, `ppo:RUN`, `iql:RUN`).
    `evaluate()`: the validation accuracy in percent, the measure of each seed's worth (see `esper.api.measure`).
    `scheduler`: the optimizer's learning-rate scheduler, if any, so seed groups follow it.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *, policy: str = "heuristic",
                 evaluate: Evaluate, max_epochs: int, scheduler: Any = None, config: GrowthConfig | None = None
                 ) -> None:
        if not 2 <= max_epochs <= MAX_EPISODE_LENGTH:
            raise UserInputError(f"max_epochs must be in [2, {MAX_EPISODE_LENGTH}] (a decision follows every epoch "
                                 f"but the last), got {max_epochs}")
        self.model = model
        self.slot_set: SlotSet = slot_set_of(model)
        self.config = config if config is not None else GrowthConfig()
        self.policy_spec = all_controllers().parse(policy).label
        self.evaluate = evaluate
        self.max_epochs = max_epochs
        self.groups = SeedGroups(optimizer, scheduler)
        self.telemetry = GradientTelemetry(optimizer, self.slot_set)
        self.tracker = SignalTracker()
        self.epoch = 0
        self.seeds_created = 0
        self._transitions: list[Transition] = []
        self._clock = time.perf_counter()
        self.slot_set.bind(self.config.lifecycle, self._on_event)
        self._policy: TamiyoPolicy | None = None
        if not self.slot_set.missing():  # shapes known (example_input): a policy that cannot drive it fails now
            self.policy()

    # ------------------------------------------------------------------ the controller

    def policy(self) -> TamiyoPolicy:
        """The controller, built once the slots' topology is known."""
        if self._policy is None:
            lifecycle = self.config.lifecycle
            context = ControllerContext(
                space=self.slot_set.action_space, slots=tuple(self.slot_set.paths), max_epochs=self.max_epochs,
                seed=self.config.seed, device=str(self.slot_set.device_dtype()[0]),
                seed_training_epochs=max(1, lifecycle.min_training_epochs),
                seed_blending_epochs=max(lifecycle.blending_steps, lifecycle.min_blending_epochs))
            self._policy = all_controllers().build(self.policy_spec, context)
        return self._policy

    def _on_event(self, event: TelemetryEvent) -> None:
        if event.event_type == TelemetryEventType.SEED_STAGE_CHANGED and event.slot_id is not None:
            self._transitions.append(Transition(event.slot_id, self.slot_set.paths[event.slot_id],
                                                str(event.data["from"]), str(event.data["to"]),
                                                str(event.data["reason"])))

    # ------------------------------------------------------------------ one epoch

    def step(self, metrics: Mapping[str, Any]) -> StepResult:
        """Close an epoch: measure the seeds, let the controller decide (every epoch but the last) and execute."""
        values = _epoch_metrics(metrics)
        if self.epoch >= self.max_epochs:
            raise UserInputError(f"step() was called {self.epoch + 1} times for max_epochs={self.max_epochs}: create "
                                 f"the Controller with the number of epochs you train")
        self.epoch += 1
        self._transitions = []
        contributions = measure_contributions(self.model, self.slot_set, self.evaluate)
        now = time.perf_counter()
        measured: _Measured = _from_rank0(_Measured(values, contributions, self.telemetry.read(), now - self._clock))
        self._clock = now
        self._record(measured)
        obs = self._observe(measured)
        command, reason = None, "the last epoch: nothing to decide"
        if self.epoch < self.max_epochs:
            decision = self.policy().decide(obs)
            check_decision(decision, obs)
            command, reason = _from_rank0((decision.command, decision.reason))
            self._execute(command, obs)
            for slot in self.slot_set.slots():
                slot.step_epoch(self.epoch)
        added, removed = self.groups.sync(self.slot_set)
        return StepResult(self.epoch, command, reason, tuple(self._transitions), added, removed,
                          measured.contributions)

    def _record(self, measured: _Measured) -> None:
        """The epoch's measurements into each seed's state, as esper's own envs write them."""
        accuracy = measured.metrics["val_accuracy"]
        for slot in self.slot_set.slots():
            slot.record_accuracy(accuracy)
        for slot_id, value in measured.contributions.counterfactual.items():
            self.slot_set.slot(slot_id).set_counterfactual(value)
        for slot_id, value in measured.contributions.probe.items():
            self.slot_set.slot(slot_id).set_probe_contribution(value)
        for slot_id, ratio in measured.telemetry.ratios.items():
            self.slot_set.slot(slot_id).update_gradient_ratio(ratio)
        for slot_id, (stats, finite) in measured.telemetry.gradients.items():
            self.slot_set.slot(slot_id).sync_telemetry(dict(stats), finite_params=finite, epoch=self.epoch,
                                                       max_epochs=self.max_epochs)

    def _observe(self, measured: _Measured) -> EnvObservation:
        slot_set, m, steps = self.slot_set, measured.metrics, measured.telemetry.steps
        space, enabled = slot_set.action_space, tuple(slot_set.paths)
        reports = {s.slot_id: r for s in slot_set.slots() if (r := s.to_report()) is not None}
        signals = self.tracker.update(self.epoch, self.epoch * steps, m["train_loss"], m["train_accuracy"],
                                      m["val_loss"], m["val_accuracy"], reports,
                                      [s for s in enabled if s not in reports],
                                      grad_norm_host=measured.telemetry.grad_norm_host,
                                      epoch_duration_ms=1000.0 * measured.seconds)
        max_seeds = self.config.max_seeds or len(enabled)
        validity = compute_action_validity(
            build_slot_states(reports, enabled, self.config.lifecycle.min_fossilize_contribution),
            total_seeds=len(reports), max_seeds=max_seeds, space=space)
        seed_params = sum(p.numel() for p in slot_set.seed_parameters())
        host_params = sum(p.numel() for p in self.model.parameters() if p.requires_grad) - seed_params
        return EnvObservation(
            env_id=0, epoch=self.epoch, max_epochs=self.max_epochs, task=type(self.model).__name__,
            topology=space.topology, enabled_slots=enabled, signals=signals, slot_reports=reports,
            validity=validity, host_param_count=host_params, total_param_count=host_params + seed_params,
            seeds_present=len(reports), max_seeds=max_seeds, random_guess_loss=self._random_guess_loss(),
            batches_per_epoch=steps)

    def _random_guess_loss(self) -> float:
        value = self.config.random_guess_loss or self.slot_set.random_guess_loss
        if value is None:
            raise UserInputError("The model's output is not a (..., classes) tensor, so the loss of a uniform guess is "
                                 "unknown: pass config=GrowthConfig(random_guess_loss=math.log(classes))")
        return value

    def _execute(self, command: LifecycleCommand, obs: EnvObservation) -> None:
        slot_id = command.slot_id
        if command.op == LifecycleOp.GERMINATE:
            assert slot_id is not None and command.blueprint_id is not None and command.blend_id is not None
            slot = self.slot_set.slot(slot_id)
            device, dtype = self.slot_set.device_dtype()
            host_params = obs.host_param_count
            # Initial weights from a stream of their own: the global one (dropout, shuffling) is not advanced, and
            # every rank of a distributed run draws the same weights.
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                torch.manual_seed(derive_seed(self.config.seed, "seed", self.seeds_created))
                slot.germinate(command.blueprint_id, f"seed_{self.seeds_created}", blend_id=command.blend_id,
                               device=device, dtype=dtype, baseline_accuracy=obs.signals.metrics.val_accuracy,
                               host_param_count=host_params, epoch=self.epoch)
            self.seeds_created += 1
        elif command.op == LifecycleOp.FOSSILIZE:
            assert slot_id is not None
            self.slot_set.slot(slot_id).fossilize(self.epoch)
        elif command.op == LifecycleOp.CULL:
            assert slot_id is not None
            self.slot_set.slot(slot_id).cull("controller", self.epoch)

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        """The growth so far in plain values and tensors: the manifest (slots, seeds with blueprint, stage, α and
        epochs in stage), the seed parameter groups, the controller's and the tracker's state, the epoch's telemetry."""
        policy = self.policy()
        return {"format": STATE_FORMAT, "policy": self.policy_spec, "epoch": self.epoch,
                "seeds_created": self.seeds_created,
                "manifest": self.slot_set.manifest(), "groups": self.groups.state_dict(),
                "tracker": self.tracker.state_dict(), "telemetry": self.telemetry.state_dict(),
                "policy_state": policy.state_dict() if isinstance(policy, StatefulPolicy) else None}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from `state_dict`: call it before the model's and the optimizer's `load_state_dict`, which then
        find the seed modules and the seed groups they saved."""
        if state.get("format") != STATE_FORMAT:
            raise UserInputError(f"Not an esper Controller state (format {state.get('format')!r}, expected "
                                 f"{STATE_FORMAT!r}): pass what Controller.state_dict() returned")
        if state["policy"] != self.policy_spec:
            raise UserInputError(f"The state was saved under policy {state['policy']!r}, this Controller runs "
                                 f"{self.policy_spec!r}: create it with policy={state['policy']!r}")
        self.slot_set.restore(dict(state["manifest"]))
        self.groups.load_state_dict(self.slot_set, list(state["groups"]))
        self.tracker.load_state_dict(dict(state["tracker"]))
        self.telemetry.load_state_dict(dict(state["telemetry"]))
        self.epoch, self.seeds_created = int(state["epoch"]), int(state["seeds_created"])
        policy = self.policy()
        if isinstance(policy, StatefulPolicy) and state["policy_state"] is not None:
            policy.load_state_dict(dict(state["policy_state"]))
