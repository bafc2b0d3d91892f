"""SeedSlot: one injection point holding at most one seed, with every lifecycle side effect.

All lifecycle changes go through these methods so that alpha, modules, events and state never disagree. The slot
stores no device: it follows the tensors and host parameters it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

from esper.kasmina.blending import BLEND_IDS, GatedBlend, schedule_alpha
from esper.kasmina.blueprints import DEFAULT_REGISTRY, BlueprintRegistry
from esper.kasmina.isolation import blend_lerp
from esper.kasmina.state import LifecycleConfig, QualityGates, SeedState
from esper.leyline import (
    GateLevel,
    GateResult,
    SeedStage,
    SeedStateReport,
    TelemetryEvent,
    TelemetryEventType,
    is_active_stage,
)
from esper.leyline.errors import UserInputError, did_you_mean

EventCallback = Callable[[TelemetryEvent], None]


class StageChange(NamedTuple):
    slot: str
    old_stage: SeedStage
    new_stage: SeedStage
    reason: str


def _count_params(module: nn.Module | None) -> int:
    return 0 if module is None else sum(p.numel() for p in module.parameters() if p.requires_grad)


class SeedSlot(nn.Module):
    """An injection point. Empty, or holding one seed module (+ optional gate) and its `SeedState`."""

    def __init__(
        self,
        slot_id: str,
        channels: int,
        topology: str,
        *,
        lifecycle: LifecycleConfig,
        registry: BlueprintRegistry | None = None,
        on_event: EventCallback | None = None,
    ) -> None:
        super().__init__()
        self.slot_id = slot_id
        self.channels = channels
        self.topology = topology
        self.lifecycle = lifecycle
        self.gates = QualityGates(lifecycle)
        self.registry = registry if registry is not None else DEFAULT_REGISTRY
        self.on_event = on_event
        self.seed: nn.Module | None = None
        self.gate: GatedBlend | None = None
        self.state: SeedState | None = None

    # ------------------------------------------------------------------ forward

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """The slot's output. A TRAINING seed is isolated: the output is the host activation `h` itself, so the
        model's function and the host's gradients are exactly the host's. The seed learns in the incubator instead
        (Tolaria's train step trains it on the loss of a second forward with its output in place, see
        `MorphogeneticModel.forward_probe`); it joins this forward only from BLENDING on, through alpha."""
        state, seed = self.state, self.seed
        if state is None or seed is None or not is_active_stage(state.stage) or state.stage == SeedStage.TRAINING:
            return h
        weight: float | torch.Tensor = state.alpha
        if self.gate is not None:
            weight = state.alpha * self.gate(h)
        return blend_lerp(h, seed(h), weight)

    def probe(self, h: torch.Tensor) -> torch.Tensor:
        """What a TRAINING seed proposes in place of the slot's output: the seed module's output on `h`.

        The model with this in place (every other slot as it is) measures the seed itself, which the global accuracy
        cannot while the seed is isolated from the forward, and is what the incubator trains the seed on. A gated
        blend's gate is not applied: nothing trains it before BLENDING, and it only decides later how much of the
        seed to keep.
        """
        state, seed = self.state, self.seed
        if state is None or seed is None or state.stage != SeedStage.TRAINING:
            stage = "empty" if state is None else state.stage.name
            raise ValueError(f"Slot '{self.slot_id}' has no TRAINING seed to probe ({stage}); "
                             "probe only slots whose seed is in TRAINING")
        return seed(h)

    # ------------------------------------------------------------------ queries

    @property
    def alpha(self) -> float:
        return 0.0 if self.state is None else self.state.alpha

    @property
    def seed_param_count(self) -> int:
        return _count_params(self.seed) + _count_params(self.gate)

    def seed_parameters(self) -> list[nn.Parameter]:
        params: list[nn.Parameter] = []
        for module in (self.seed, self.gate):
            if module is not None:
                params.extend(p for p in module.parameters() if p.requires_grad)
        return params

    def to_report(self) -> SeedStateReport | None:
        return None if self.state is None else self.state.to_report()

    # ------------------------------------------------------------------ events

    def _emit(self, event_type: TelemetryEventType, epoch: int, message: str, data: dict[str, Any],
              severity: str = "info") -> None:
        if self.on_event is None:
            return
        seed_id = self.state.seed_id if self.state is not None else None
        self.on_event(TelemetryEvent(
            event_type=event_type, seed_id=seed_id, slot_id=self.slot_id, epoch=epoch,
            message=message, data=data, severity=severity,  # type: ignore[arg-type]
        ))

    def _transition(self, stage: SeedStage, epoch: int, reason: str) -> StageChange:
        assert self.state is not None
        old = self.state.stage
        if not self.state.transition(stage, epoch):
            raise RuntimeError(f"Invalid transition {old.name} -> {stage.name} in slot '{self.slot_id}'")
        self._emit(TelemetryEventType.SEED_STAGE_CHANGED, epoch, f"{self.slot_id} {old.name} -> {stage.name}",
                   {"from": old.name, "to": stage.name, "reason": reason})
        return StageChange(self.slot_id, old, stage, reason)

    def _gate(self, target: SeedStage, epoch: int) -> GateResult:
        assert self.state is not None
        result = self.gates.check_gate(self.state, target)
        self._emit(TelemetryEventType.SEED_GATE_EVALUATED, epoch, result.message, {
            "gate": result.gate.name, "passed": result.passed, "target_stage": target.name,
            "checks_passed": list(result.checks_passed), "checks_failed": list(result.checks_failed),
        }, severity="debug")
        return result

    # ------------------------------------------------------------------ lifecycle

    def germinate(
        self,
        blueprint_id: str,
        seed_id: str,
        *,
        blend_id: str = "sigmoid",
        device: torch.device | str,
        dtype: torch.dtype | None = None,
        baseline_accuracy: float,
        host_param_count: int,
        epoch: int,
    ) -> SeedState:
        """Create a seed. Everything is validated before anything is stored, so a failure leaves the slot as it was."""
        if self.state is not None:
            raise RuntimeError(f"Slot '{self.slot_id}' already holds seed '{self.state.seed_id}'")
        if blend_id not in BLEND_IDS:
            raise UserInputError(f"Unknown blend '{blend_id}'. Available: {list(BLEND_IDS)}")
        names = self.registry.names(self.topology)
        if blueprint_id not in names:
            raise UserInputError(f"Blueprint '{blueprint_id}'{did_you_mean(blueprint_id, names)} not available for "
                                 f"topology '{self.topology}'. Available: {names}")
        seed = self.registry.create(self.topology, blueprint_id, self.channels).to(device=device, dtype=dtype)
        gate = GatedBlend(self.channels, self.topology).to(device=device, dtype=dtype) if blend_id == "gated" else None
        self._probe_shape(seed, seed_id, device, dtype)

        state = SeedState(seed_id=seed_id, blueprint_id=blueprint_id, slot_id=self.slot_id, blend_id=blend_id)
        if not self.gates.check_gate(state, SeedStage.GERMINATED).passed:
            raise UserInputError(f"Seed '{seed_id}' failed G0 (seed and blueprint ids must be non-empty)")
        baseline, params = float(baseline_accuracy), _count_params(seed) + _count_params(gate)
        state.update_metrics(initial_val_accuracy=baseline, accuracy_at_stage_start=baseline,
                             current_val_accuracy=baseline, best_val_accuracy=baseline,
                             host_param_count=host_param_count, seed_param_count=params)

        self.seed, self.gate, self.state = seed, gate, state
        self._gate(SeedStage.GERMINATED, epoch)  # observable like every other gate (passes: checked above)
        self._transition(SeedStage.GERMINATED, epoch, "g0")
        self._emit(TelemetryEventType.SEED_GERMINATED, epoch, f"germinated {blueprint_id} in {self.slot_id}", {
            "blueprint_id": blueprint_id, "blend_id": blend_id, "seed_id": seed_id, "params": params,
        })
        return state

    def _probe_shape(self, seed: nn.Module, seed_id: str, device: torch.device | str,
                     dtype: torch.dtype | None) -> None:
        """Check the seed preserves shape, with a local generator so the global RNG is untouched."""
        gen = torch.Generator().manual_seed(0)
        shape = (2, self.channels, 8, 8) if self.topology == "cnn" else (2, 8, self.channels)
        probe = torch.randn(shape, generator=gen).to(device=device, dtype=dtype or torch.get_default_dtype())
        was_training = seed.training
        seed.eval()
        try:
            with torch.no_grad():
                out = seed(probe)
        finally:
            seed.train(was_training)
        if out.shape != probe.shape:
            raise ValueError(f"Seed '{seed_id}' changed shape: {tuple(probe.shape)} -> {tuple(out.shape)}")

    def step_epoch(self, epoch: int) -> list[StageChange]:
        """Mechanical lifecycle advance, once per epoch after the controller acted."""
        state = self.state
        if state is None:
            return []
        if state.stage == SeedStage.GERMINATED:
            if self._gate(SeedStage.TRAINING, epoch).passed:
                return [self._transition(SeedStage.TRAINING, epoch, "g1")]
        elif state.stage == SeedStage.TRAINING:
            if self._gate(SeedStage.BLENDING, epoch).passed:
                change = self._transition(SeedStage.BLENDING, epoch, "g2")
                state.update_metrics(accuracy_at_blending_start=state.metrics.current_val_accuracy)
                state.blending_steps_total = self.lifecycle.blending_steps
                state.blending_steps_done = 1
                state.alpha = schedule_alpha(state.blend_id, 1 / state.blending_steps_total)
                return [change]
        elif state.stage == SeedStage.BLENDING:
            if state.blending_steps_done < state.blending_steps_total:
                state.blending_steps_done += 1
                state.alpha = schedule_alpha(state.blend_id, state.blending_steps_done / state.blending_steps_total)
            elif self._gate(SeedStage.PROBATIONARY, epoch).passed:
                return [self._transition(SeedStage.PROBATIONARY, epoch, "g3")]
        elif state.stage == SeedStage.PROBATIONARY:
            c = state.metrics.counterfactual_contribution
            if c is not None and c <= 0:
                return self._cull("negative_counterfactual", epoch)
            if state.metrics.epochs_in_current_stage >= self.lifecycle.max_probation_epochs:
                return self._cull("probation_timeout", epoch)
        return []

    def fossilize(self, epoch: int) -> GateResult:
        """Keep a PROBATIONARY seed permanently if G5 passes."""
        state = self.state
        if state is None or state.stage != SeedStage.PROBATIONARY:
            stage = "empty" if state is None else state.stage.name
            return GateResult(gate=GateLevel.G5, passed=False, checks_failed=(f"not_probationary_{stage.lower()}",),
                              message=f"Slot '{self.slot_id}' cannot fossilize from {stage}")
        result = self._gate(SeedStage.FOSSILIZED, epoch)
        if not result.passed:
            return result
        self._transition(SeedStage.FOSSILIZED, epoch, "g5")
        state.alpha = 1.0
        state.update_metrics(contribution_at_fossilization=state.metrics.counterfactual_contribution)
        m = state.metrics
        self._emit(TelemetryEventType.SEED_FOSSILIZED, epoch, f"fossilized {state.blueprint_id} in {self.slot_id}", {
            "blueprint_id": state.blueprint_id, "improvement": m.total_improvement,
            "blending_delta": m.blending_delta, "counterfactual": m.counterfactual_contribution,
            "params_added": self.seed_param_count, "epochs_total": m.epochs_total,
        })
        return result

    def cull(self, reason: str, epoch: int) -> bool:
        """Remove a live seed (never a fossilized one). The slot is immediately empty."""
        return bool(self._cull(reason, epoch))

    def _cull(self, reason: str, epoch: int) -> list[StageChange]:
        state = self.state
        if state is None or state.stage == SeedStage.FOSSILIZED:
            return []
        change = self._transition(SeedStage.CULLED, epoch, reason)
        m = state.metrics
        self._emit(TelemetryEventType.SEED_CULLED, epoch, f"culled {state.blueprint_id} in {self.slot_id}: {reason}", {
            "reason": reason, "blueprint_id": state.blueprint_id, "improvement": m.total_improvement,
            "counterfactual": m.counterfactual_contribution, "epochs_total": m.epochs_total,
        })
        self.clear()
        return [change]

    def clear(self) -> None:
        """Empty the slot without lifecycle bookkeeping (rollback and checkpoint restore)."""
        self.seed = None
        self.gate = None
        self.state = None

    # ------------------------------------------------------------------ measurements

    def record_accuracy(self, acc: float) -> None:
        if self.state is not None:
            self.state.record_accuracy(acc)

    def set_counterfactual(self, contribution: float | None) -> None:
        if self.state is not None:
            self.state.update_metrics(counterfactual_contribution=contribution)

    def set_probe_contribution(self, contribution: float | None) -> None:
        if self.state is not None:
            self.state.update_metrics(probe_contribution=contribution)

    def update_gradient_ratio(self, ratio: float) -> None:
        if self.state is not None:
            self.state.update_gradient_ratio(ratio)

    def finite_parameters(self) -> torch.Tensor | None:
        """Whether every seed parameter is finite, as a device bool (None without parameters): a tensor, so the
        caller reads it on the host together with the epoch's other values instead of waiting for it alone."""
        params = self.seed_parameters()
        return torch.stack([p.detach().isfinite().all() for p in params]).all() if params else None

    def sync_telemetry(self, grad_stats: dict[str, Any], *, finite_params: bool, epoch: int, max_epochs: int) -> None:
        """Refresh the seed's telemetry and health from one epoch's gradient statistics and whether its parameters
        are finite (`finite_parameters`, read)."""
        state = self.state
        if state is None:
            return
        state.update_gradient_norm(float(grad_stats["gradient_norm"]))
        state.sync_telemetry(
            gradient_norm=float(grad_stats["gradient_norm"]),
            gradient_health=float(grad_stats["gradient_health"]),
            has_vanishing=bool(grad_stats["has_vanishing"]),
            has_exploding=bool(grad_stats["has_exploding"]),
            epoch=epoch,
            max_epochs=max_epochs,
        )
        state.is_healthy = (
            finite_params and not grad_stats.get("has_nonfinite", False) and float(grad_stats["gradient_health"]) >= 0.5
        )

    # ------------------------------------------------------------------ persistence

    def export_state(self) -> dict[str, Any] | None:
        """Plain-dict seed state (None when empty); tensors are references, callers clone if needed."""
        if self.state is None or self.seed is None:
            return None
        return {
            "seed_id": self.state.seed_id,
            "blueprint_id": self.state.blueprint_id,
            "blend_id": self.state.blend_id,
            "channels": self.channels,
            "topology": self.topology,
            "lifecycle": self.state.to_dict(),
            "module": self.seed.state_dict(),
            "gate": None if self.gate is None else self.gate.state_dict(),
        }

    def load_state(self, d: dict[str, Any] | None, *, device: torch.device | str,
                   dtype: torch.dtype | None = None) -> None:
        """Replace the slot's content with an exported seed (re-instantiated from the registry) or empty it."""
        if d is None:
            self.clear()
            return
        if d["topology"] != self.topology or int(d["channels"]) != self.channels:
            raise UserInputError(
                f"Seed for {d['topology']}/{d['channels']} cannot load into slot '{self.slot_id}' "
                f"({self.topology}/{self.channels})"
            )
        seed = self.registry.create(self.topology, d["blueprint_id"], self.channels).to(device=device, dtype=dtype)
        seed.load_state_dict(d["module"], strict=True)
        gate = None
        if d["gate"] is not None:
            gate = GatedBlend(self.channels, self.topology).to(device=device, dtype=dtype)
            gate.load_state_dict(d["gate"], strict=True)
        state = SeedState.from_dict(d["lifecycle"])
        self.seed, self.gate, self.state = seed, gate, state
