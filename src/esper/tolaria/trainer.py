"""Training mechanics of one environment: train and validation steps, gradient ratios, counterfactuals.

Nothing here synchronizes with the host except the `finish_*` functions: per-step statistics accumulate on device,
so many environments can share a GPU without stalling each other.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from esper.kasmina.model import MorphogeneticModel
from esper.leyline import SeedStage
from esper.leyline.constants import GRADIENT_EPSILON
from esper.runtime.optim import OptimizerSpec

TaskType = Literal["classification", "lm"]
PostBackwardHook = Callable[["TrainState"], None]
_RATIO_STAGES = (SeedStage.TRAINING, SeedStage.BLENDING)


@dataclass
class TrainEpochStats:
    train_loss: float
    train_accuracy: float
    n_samples: int
    gradient_ratios: dict[str, float]
    grad_norm_host: float


@dataclass
class ValStats:
    """One validation pass. Accuracies and contributions in pp; contributions are relative to `val_accuracy`.

    `contribution`: counterfactual of each ablated slot (accuracy with its seed minus without it).
    `probe_contribution`: of each probed slot (accuracy with its TRAINING seed in place of the slot's output minus
    the model as it is).
    """

    val_loss: float
    val_accuracy: float
    n_samples: int
    ablated_accuracy: dict[str, float]
    contribution: dict[str, float]
    probe_accuracy: dict[str, float] = field(default_factory=dict)
    probe_contribution: dict[str, float] = field(default_factory=dict)


@dataclass
class TrainState:
    """One environment's model, optimizers, AMP settings and on-device accumulators."""

    model: MorphogeneticModel
    host_optimizer_spec: OptimizerSpec
    seed_optimizer_spec: OptimizerSpec
    task_type: TaskType
    device: torch.device
    amp: bool = False
    stream: Any = None  # torch.cuda.Stream on CUDA, None on CPU
    post_backward_hooks: list[PostBackwardHook] = field(default_factory=list)
    host_optimizer: torch.optim.Optimizer = field(init=False)
    seed_optimizers: dict[str, tuple[str, torch.optim.Optimizer]] = field(default_factory=dict)
    fossil_order: list[str] = field(default_factory=list)
    scaler: torch.amp.GradScaler | None = field(init=False)
    _acc: dict[str, Any] = field(default_factory=dict)
    _val: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.host_optimizer = self.host_optimizer_spec.build(self.model.host_parameters())
        use_scaler = self.amp and self.device.type == "cuda"
        self.scaler = torch.amp.GradScaler("cuda") if use_scaler else None
        self.sync_optimizers()
        reset_train_accumulators(self)

    @property
    def autocast_dtype(self) -> torch.dtype:
        return torch.float16 if self.device.type == "cuda" else torch.bfloat16

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if not self.amp:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def stream_context(self) -> contextlib.AbstractContextManager[Any]:
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def sync_optimizers(self) -> None:
        """Reconcile optimizers with the model after any lifecycle change.

        Live seeds get their own optimizer; a fossilized seed's parameters join the host optimizer as a new
        parameter group (host hyperparameters) so it keeps training as part of the host; culled seeds lose theirs.
        """
        for s in self.model.slots():
            state = s.state
            entry = self.seed_optimizers.get(s.slot_id)
            if state is None or state.stage == SeedStage.FOSSILIZED or (entry and entry[0] != state.seed_id):
                self.seed_optimizers.pop(s.slot_id, None)
            if state is None:
                if s.slot_id in self.fossil_order:
                    raise RuntimeError(f"Fossilized seed in slot '{s.slot_id}' disappeared")
                continue
            if state.stage == SeedStage.FOSSILIZED:
                if s.slot_id not in self.fossil_order:
                    self.host_optimizer.add_param_group({"params": s.seed_parameters()})
                    self.fossil_order.append(s.slot_id)
            elif s.slot_id not in self.seed_optimizers:
                self.seed_optimizers[s.slot_id] = (state.seed_id, self.seed_optimizer_spec.build(s.seed_parameters()))

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.host_optimizer, *(opt for _, opt in self.seed_optimizers.values())]

    def rebuild_optimizers(self) -> None:
        """Fresh optimizers matching the current model (host group, fossil groups in recorded order, seeds)."""
        order = list(self.fossil_order)
        self.host_optimizer = self.host_optimizer_spec.build(self.model.host_parameters())
        for slot in order:
            self.host_optimizer.add_param_group({"params": self.model.seed_parameters(slot)})
        self.fossil_order = order
        self.seed_optimizers = {}
        self.sync_optimizers()


def compute_task_loss(outputs: torch.Tensor, targets: torch.Tensor, task_type: TaskType) -> torch.Tensor:
    """Mean cross-entropy; LM logits (B, T, V) are flattened to tokens."""
    if task_type == "lm":
        return F.cross_entropy(outputs.reshape(-1, outputs.size(-1)), targets.reshape(-1))
    return F.cross_entropy(outputs, targets)


def _correct(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return (outputs.argmax(dim=-1) == targets).sum()


def _grad_norm(params: Iterable[nn.Parameter]) -> tuple[torch.Tensor | None, int]:
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return None, 0
    norms = torch._foreach_norm(grads, 2.0)
    return torch.linalg.vector_norm(torch.stack(norms)), sum(g.numel() for g in grads)


def reset_train_accumulators(ts: TrainState) -> None:
    zero = torch.zeros((), device=ts.device)
    ts._acc = {"loss": zero.clone(), "correct": zero.clone(), "n": 0, "host_norm": zero.clone(), "steps": 0,
               "ratio_sum": {}, "ratio_count": {}}


def train_step(ts: TrainState, x: torch.Tensor, y: torch.Tensor) -> None:
    """One optimization step of host and live seeds, with the always-on gradient-ratio measurement."""
    model = ts.model
    if not model.training:
        model.train()
    optimizers = ts.optimizers()
    for opt in optimizers:
        opt.zero_grad(set_to_none=True)
    with ts.autocast():
        outputs = model(x)
        loss = compute_task_loss(outputs, y, ts.task_type)
    if ts.scaler is not None:
        ts.scaler.scale(loss).backward()
        for opt in optimizers:
            ts.scaler.unscale_(opt)
    else:
        loss.backward()

    host_norm, host_n = _grad_norm(model.host_parameters())
    acc = ts._acc
    if host_norm is not None:
        acc["host_norm"] += host_norm.detach()
        for s in model.slots():
            if s.state is None or s.state.stage not in _RATIO_STAGES:
                continue
            seed_norm, seed_n = _grad_norm(s.seed_parameters())
            ratio = torch.zeros((), device=ts.device)
            counted = torch.ones((), device=ts.device)
            if seed_norm is not None:
                raw = (seed_norm / seed_n**0.5) / (host_norm / host_n**0.5 + GRADIENT_EPSILON)
                usable = (seed_norm >= GRADIENT_EPSILON) & (host_norm >= GRADIENT_EPSILON)
                # A non-finite step (an fp16 overflow the scaler will skip) says nothing: leave it out entirely.
                counted = (torch.isfinite(seed_norm) & torch.isfinite(host_norm)).float()
                ratio = torch.where(usable & (counted > 0), raw, ratio)
            acc["ratio_sum"][s.slot_id] = acc["ratio_sum"].get(s.slot_id, 0) + ratio.detach()
            acc["ratio_count"][s.slot_id] = acc["ratio_count"].get(s.slot_id, 0) + counted

    for hook in ts.post_backward_hooks:
        hook(ts)

    if ts.scaler is not None:
        for opt in optimizers:
            ts.scaler.step(opt)
        ts.scaler.update()
    else:
        for opt in optimizers:
            opt.step()

    n = y.numel()
    acc["loss"] += loss.detach().float() * n
    acc["correct"] += _correct(outputs.detach(), y)
    acc["n"] += n
    acc["steps"] += 1


BN_RECALIBRATION_BATCHES = 8


def recalibrate_batchnorm(ts: TrainState, inputs: Iterable[torch.Tensor]) -> None:
    """Re-estimate BatchNorm running statistics with the epoch's final weights ("precise BN").

    The running averages mix statistics of many recent weight versions; on small hosts that lag makes eval-mode
    accuracy swing by several pp from epoch to epoch, which would turn plateau detection, the governor and every
    counterfactual into noise. A cumulative average over a few training batches at the final weights removes it.
    """
    norms = [m for m in ts.model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average
    was_training = ts.model.training
    ts.model.train()
    with torch.no_grad(), ts.autocast():
        for x in inputs:
            ts.model(x)
    ts.model.train(was_training)
    for m, momentum in zip(norms, momenta, strict=True):
        m.momentum = momentum


def finish_train_epoch(ts: TrainState) -> TrainEpochStats:
    """Sample-weighted epoch metrics and per-slot mean gradient ratios (one host sync), then reset."""
    acc = ts._acc
    slots = list(acc["ratio_sum"])
    values = torch.stack([acc["loss"], acc["correct"].float(), acc["host_norm"],
                          *(acc["ratio_sum"][s].float() for s in slots),
                          *(acc["ratio_count"][s].float() for s in slots)]).tolist()
    n, steps = acc["n"], acc["steps"]
    stats = TrainEpochStats(
        train_loss=values[0] / n if n else 0.0,
        train_accuracy=100.0 * values[1] / n if n else 0.0,
        n_samples=n,
        gradient_ratios={s: values[3 + i] / values[3 + len(slots) + i] for i, s in enumerate(slots)
                         if values[3 + len(slots) + i] > 0},
        grad_norm_host=values[2] / steps if steps else 0.0,
    )
    reset_train_accumulators(ts)
    return stats


def validate_batch(ts: TrainState, x: torch.Tensor, y: torch.Tensor, ablate: tuple[str, ...] = (),
                   probe: tuple[str, ...] = ()) -> None:
    """Evaluate one batch with the full model, each slot in `ablate` removed and each slot in `probe` replaced by
    its TRAINING seed (cached prefixes)."""
    model = ts.model
    val = ts._val
    if not val:
        zero = torch.zeros((), device=ts.device)
        val.update({"was_training": model.training, "loss": zero.clone(), "correct": zero.clone(), "n": 0,
                    "ablated": {s: zero.clone() for s in ablate}, "probed": {s: zero.clone() for s in probe},
                    "ablate": tuple(ablate), "probe": tuple(probe)})
    elif tuple(ablate) != val["ablate"] or tuple(probe) != val["probe"]:
        raise ValueError("The ablated and probed slots must be the same for every batch of a validation pass")
    model.eval()
    with torch.no_grad(), ts.autocast():
        logits = model.forward_with_counterfactuals(x, ablate, probe)
        loss = compute_task_loss(logits.full, y, ts.task_type)
    n = y.numel()
    val["loss"] += loss.float() * n
    val["correct"] += _correct(logits.full, y)
    for s, out in logits.ablated.items():
        val["ablated"][s] += _correct(out, y)
    for s, out in logits.probed.items():
        val["probed"][s] += _correct(out, y)
    val["n"] += n


def _empty_val_stats(ablate: Iterable[str], probe: Iterable[str]) -> ValStats:
    zeros, probe_zeros = dict.fromkeys(ablate, 0.0), dict.fromkeys(probe, 0.0)
    return ValStats(0.0, 0.0, 0, zeros, dict(zeros), probe_zeros, dict(probe_zeros))


def finish_validation(ts: TrainState) -> ValStats:
    """Sample-weighted validation metrics, counterfactual and probe contributions (pp), with one host sync;
    restores the train/eval mode."""
    val = ts._val
    if not val:
        return _empty_val_stats((), ())
    ts.model.train(val["was_training"])
    ablated_slots, probed_slots = list(val["ablated"]), list(val["probed"])
    values = torch.stack([val["loss"], val["correct"].float(), *(val["ablated"][s].float() for s in ablated_slots),
                          *(val["probed"][s].float() for s in probed_slots)]).tolist()
    n = val["n"]
    ts._val = {}
    if n == 0:
        return _empty_val_stats(ablated_slots, probed_slots)
    acc = 100.0 * values[1] / n
    counts = iter(values[2:])
    ablated = {s: 100.0 * next(counts) / n for s in ablated_slots}
    probed = {s: 100.0 * next(counts) / n for s in probed_slots}
    return ValStats(values[0] / n, acc, n, ablated, {s: acc - a for s, a in ablated.items()},
                    probed, {s: p - acc for s, p in probed.items()})


def counterfactual_slots(model: MorphogeneticModel) -> tuple[str, ...]:
    """Slots whose seed blends into the forward (alpha > 0): the ones with a measurable contribution."""
    return tuple(s.slot_id for s in model.slots() if s.state is not None and s.state.alpha > 0)


def probe_slots(model: MorphogeneticModel) -> tuple[str, ...]:
    """Slots whose seed is in TRAINING: isolated from the forward, so only a probe can measure it."""
    return tuple(s.slot_id for s in model.slots() if s.state is not None and s.state.stage == SeedStage.TRAINING)


def train_epoch(ts: TrainState, batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> TrainEpochStats:
    recent: deque[torch.Tensor] = deque(maxlen=BN_RECALIBRATION_BATCHES)
    for x, y in batches:
        train_step(ts, x, y)
        recent.append(x)
    recalibrate_batchnorm(ts, recent)
    return finish_train_epoch(ts)


def validate(ts: TrainState, batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
             ablate: tuple[str, ...] | None = None, probe: tuple[str, ...] | None = None) -> ValStats:
    """Full validation pass; by default ablates every blended-in seed and probes every TRAINING seed."""
    ablate = counterfactual_slots(ts.model) if ablate is None else ablate
    probe = probe_slots(ts.model) if probe is None else probe
    for x, y in batches:
        validate_batch(ts, x, y, ablate, probe)
    if not ts._val:  # empty loader: nothing accumulated
        return _empty_val_stats(ablate, probe)
    return finish_validation(ts)
