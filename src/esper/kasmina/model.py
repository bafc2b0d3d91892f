"""MorphogeneticModel: a host plus one SeedSlot per enabled injection point."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NamedTuple, cast

import torch
from torch import nn

from esper.kasmina.blueprints import DEFAULT_REGISTRY, BlueprintRegistry
from esper.kasmina.hosts import HostProtocol
from esper.kasmina.slot import EventCallback, SeedSlot, StageChange
from esper.kasmina.state import LifecycleConfig
from esper.leyline import ActionSpace, GateResult, SeedStage, SeedStateReport, ordered_slots
from esper.leyline.errors import UserInputError


class CounterfactualLogits(NamedTuple):
    """Logits of one batch: the model as it is, and per requested slot with that slot ablated or probed."""

    full: torch.Tensor
    ablated: dict[str, torch.Tensor]
    probed: dict[str, torch.Tensor]


@contextlib.contextmanager
def batch_statistics(module: nn.Module) -> Iterator[None]:
    """Inside the block, every BatchNorm layer of `module` normalizes with the statistics of the batch at hand and
    leaves its running estimates (and batch counter) untouched; the layers' own settings are restored on exit."""
    norms = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = [(m.training, m.track_running_stats) for m in norms]
    for m in norms:
        m.training, m.track_running_stats = True, False
    try:
        yield
    finally:
        for m, (training, tracking) in zip(norms, saved, strict=True):
            m.training, m.track_running_stats = training, tracking


class MorphogeneticModel(nn.Module):
    """Host network whose forward is chained through its enabled slots, segment by segment."""

    def __init__(
        self,
        host: nn.Module,
        *,
        slots: list[str] | tuple[str, ...],
        lifecycle: LifecycleConfig,
        registry: BlueprintRegistry | None = None,
        on_event: EventCallback | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(host, HostProtocol):
            raise TypeError(f"{type(host).__name__} does not implement HostProtocol (segmented forward)")
        available = list(host.segment_channels)
        for name in slots:
            if name not in available:
                raise UserInputError(f"Unknown slot: {name}. Available: {available}")
        self.slot_ids: tuple[str, ...] = ordered_slots(slots)
        if not self.slot_ids:
            raise UserInputError(f"At least one slot must be enabled. Available: {available}")
        self.host = host
        self.topology: str = host.topology
        self.lifecycle = lifecycle
        self.registry = registry if registry is not None else DEFAULT_REGISTRY
        self.seed_slots = nn.ModuleDict({
            s: SeedSlot(s, host.segment_channels[s], host.topology, lifecycle=lifecycle, registry=self.registry,
                        on_event=on_event)
            for s in self.slot_ids
        })

    @property
    def action_space(self) -> ActionSpace:
        """What a controller may do to this model: its topology's blueprint head, from the registry it grows from."""
        return self.registry.action_space(self.topology)

    @property
    def segments(self) -> HostProtocol:
        """The host seen through its segmented-forward protocol (checked at construction)."""
        return cast(HostProtocol, self.host)

    # ------------------------------------------------------------------ forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._run_from(None, x)

    def forward_with_activations(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The model's logits and the host activation arriving at each enabled slot: the points a counterfactual
        (or the incubator) restarts from, so that only the suffix after a slot has to be recomputed."""
        cached: dict[str, torch.Tensor] = {}
        return self._run_from(None, x, cached), cached

    def forward_probe(self, slot: str, h: torch.Tensor) -> torch.Tensor:
        """Logits with `slot`'s TRAINING seed output on `h` (the slot's host activation) in place of the slot's output,
        every other slot as it is (see `SeedSlot.probe`).

        The host's BatchNorm layers use the statistics of the batch and leave their running estimates alone (see
        `batch_statistics`): those estimates describe the activations of the model as it is, not of this
        counterfactual. Differentiable, so the incubator can train the seed on the loss of this very forward.
        """
        with batch_statistics(self.host):
            return self._run_from(slot, self._slot(slot).probe(h))

    def forward_with_counterfactuals(
        self,
        x: torch.Tensor,
        ablate: list[str] | tuple[str, ...] = (),
        probe: list[str] | tuple[str, ...] = (),
    ) -> CounterfactualLogits:
        """Full logits plus one counterfactual forward per requested slot, every other slot as it is.

        `ablate`: the slot's seed removed (the slot outputs its host activation). `probe`: a TRAINING seed put in
        place of the slot's output (see `forward_probe`). In both, the host's BatchNorm layers after the slot use
        the statistics of the batch (see `batch_statistics`): their running estimates describe the activations of
        the model as it is, so a counterfactual that shifts the activation distribution would otherwise be judged
        through a normalization the model would re-estimate at once — removing a blended seed then looked like
        losing 20–60 pp on small CNN hosts, a normalization artefact rather than the seed's worth. One chain pass
        caches every slot's host activation; each counterfactual restarts from its slot's cached activation and
        recomputes only the suffix. Pure: no state is mutated.
        """
        full, cached = self.forward_with_activations(x)
        ablated: dict[str, torch.Tensor] = {}
        with batch_statistics(self.host):
            for k in self._requested(ablate):
                ablated[k] = self._run_from(k, cached[k])
        probed = {k: self.forward_probe(k, cached[k]) for k in self._requested(probe)}
        return CounterfactualLogits(full, ablated, probed)

    def _requested(self, slots: list[str] | tuple[str, ...]) -> tuple[str, ...]:
        ordered = ordered_slots(slots)
        for k in ordered:
            self._slot(k)  # an existing but disabled slot is an error too
        return ordered

    def _run_from(self, slot: str | None, out: torch.Tensor, cache: dict[str, torch.Tensor] | None = None
                  ) -> torch.Tensor:
        """Logits when `slot` outputs `out` (None: `out` is the model input): the later segments and slots, then the
        head. `cache`, when given, receives the host activation arriving at each slot passed."""
        start = 0 if slot is None else self.slot_ids.index(slot) + 1
        prev, prev_slot = out, slot
        for s in self.slot_ids[start:]:
            h = self.segments.forward_to_segment(s, prev, from_segment=prev_slot)
            if cache is not None:
                cache[s] = h
            prev, prev_slot = self.seed_slots[s](h), s
        return self.segments.forward_from_segment(self.slot_ids[-1], prev)

    # ------------------------------------------------------------------ slots

    def _slot(self, slot: str) -> SeedSlot:
        if slot not in self.seed_slots:
            raise UserInputError(f"Unknown slot: {slot}. Available: {list(self.slot_ids)}")
        module = self.seed_slots[slot]
        assert isinstance(module, SeedSlot)
        return module

    def slots(self) -> list[SeedSlot]:
        """Enabled slots in canonical order."""
        return [self._slot(s) for s in self.slot_ids]

    def slot(self, slot: str) -> SeedSlot:
        return self._slot(slot)

    def _host_device_dtype(self) -> tuple[torch.device, torch.dtype]:
        p = next(self.host.parameters())
        return p.device, p.dtype

    # ------------------------------------------------------------------ lifecycle

    def germinate_seed(
        self,
        blueprint_id: str,
        seed_id: str,
        *,
        slot: str,
        blend_id: str = "sigmoid",
        baseline_accuracy: float,
        epoch: int,
    ) -> None:
        device, dtype = self._host_device_dtype()
        self._slot(slot).germinate(
            blueprint_id, seed_id, blend_id=blend_id, device=device, dtype=dtype,
            baseline_accuracy=baseline_accuracy, host_param_count=self.host_param_count, epoch=epoch,
        )

    def cull_seed(self, *, slot: str, reason: str, epoch: int) -> bool:
        return self._slot(slot).cull(reason, epoch)

    def fossilize_seed(self, *, slot: str, epoch: int) -> GateResult:
        return self._slot(slot).fossilize(epoch)

    def step_epoch(self, epoch: int) -> list[StageChange]:
        changes: list[StageChange] = []
        for s in self.slots():
            changes.extend(s.step_epoch(epoch))
        return changes

    def record_accuracy(self, acc: float) -> None:
        for s in self.slots():
            s.record_accuracy(acc)

    def get_slot_reports(self) -> dict[str, SeedStateReport]:
        reports: dict[str, SeedStateReport] = {}
        for s in self.slots():
            report = s.to_report()
            if report is not None:
                reports[s.slot_id] = report
        return reports

    def lifecycle_snapshot(self) -> tuple[tuple[str, int, int], ...]:
        """(slot, stage, epochs in stage) for every enabled slot; (slot, 0, 0) when empty."""
        return tuple(
            (s.slot_id, 0, 0) if s.state is None
            else (s.slot_id, int(s.state.stage), s.state.metrics.epochs_in_current_stage)
            for s in self.slots()
        )

    # ------------------------------------------------------------------ parameters

    def host_parameters(self) -> list[nn.Parameter]:
        return list(self.host.parameters())

    def seed_parameters(self, slot: str | None = None) -> list[nn.Parameter]:
        """Seed module + gate parameters of one slot, or of every non-fossilized seed."""
        if slot is not None:
            return self._slot(slot).seed_parameters()
        params: list[nn.Parameter] = []
        for s in self.slots():
            if s.state is not None and s.state.stage != SeedStage.FOSSILIZED:
                params.extend(s.seed_parameters())
        return params

    @property
    def host_param_count(self) -> int:
        return sum(p.numel() for p in self.host.parameters() if p.requires_grad)

    @property
    def seed_param_count_total(self) -> int:
        return sum(s.seed_param_count for s in self.slots() if s.state is not None)

    @property
    def total_params(self) -> int:
        return self.host_param_count + self.seed_param_count_total

    def seeds_present(self) -> int:
        return sum(1 for s in self.slots() if s.state is not None)

    # ------------------------------------------------------------------ persistence

    def export_state(self) -> dict[str, Any]:
        """Host weights and every present seed as plain values (tensors are references)."""
        return {
            "slots": list(self.slot_ids),
            "host": self.host.state_dict(),
            "seeds": {s.slot_id: s.export_state() for s in self.slots() if s.state is not None},
        }

    def load_state(self, d: dict[str, Any]) -> None:
        """Restore exactly: slots present in `d` are re-instantiated, all other slots become empty."""
        if tuple(d["slots"]) != self.slot_ids:
            raise UserInputError(f"State has slots {d['slots']}, model has {list(self.slot_ids)}")
        unknown = set(d["seeds"]) - set(self.slot_ids)
        if unknown:
            raise UserInputError(f"State holds seeds for unknown slots: {sorted(unknown)}")
        self.host.load_state_dict(d["host"], strict=True)
        device, dtype = self._host_device_dtype()
        for s in self.slots():
            s.load_state(d["seeds"].get(s.slot_id), device=device, dtype=dtype)
