"""Training mechanics of one environment: the train step, the incubator, gradient ratios, BatchNorm recalibration.

Nothing here reads a device value on the host: per-step statistics accumulate on the device and `queue_train_epoch`
hands them to a `Readout`, which reads the epoch of every env at once, so many environments can share a GPU without
stalling each other (`finish_train_epoch` is the same for one env on its own).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from esper.data.optim import OptimizerSpec
from esper.data.task_spec import TaskType
from esper.execution.readout import Deferred, Readout, read_alone
from esper.kasmina.model import MorphogeneticModel
from esper.leyline import SeedStage
from esper.leyline.constants import GRADIENT_EPSILON
from esper.leyline.seeding import derive_seed

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
    steps_taken: int = 0  # train steps so far: with the seed id, keys the incubator's private random stream
    scaler: torch.amp.GradScaler | None = field(init=False)
    train_sums: dict[str, Any] = field(default_factory=dict)  # the epoch's training sums, on the device
    val_sums: dict[str, Any] = field(default_factory=dict)  # the epoch's validation sums, on the device

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

        Live seeds with parameters get their own optimizer; a fossilized seed's parameters join the host optimizer as
        a new parameter group (host hyperparameters) so it keeps training as part of the host; culled seeds lose
        theirs.
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
            elif s.slot_id not in self.seed_optimizers and s.seed_parameters():  # noop seeds have nothing to train
                self.seed_optimizers[s.slot_id] = (state.seed_id, self.seed_optimizer_spec.build(s.seed_parameters()))

    def set_lr_factor(self, factor: float) -> None:
        """Scale every optimizer's learning rate to `factor` × its own base rate (the schedule's step for an epoch);
        a parameter group added later (a seed, a fossil) starts from its base rate and is scaled from the next call."""
        for optimizer in self.optimizers():
            for group in optimizer.param_groups:
                group["lr"] = group.setdefault("initial_lr", group["lr"]) * factor

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


def correct_count(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return (outputs.argmax(dim=-1) == targets).sum()


def _grad_norm(params: Iterable[nn.Parameter]) -> tuple[torch.Tensor | None, int]:
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return None, 0
    norms = torch._foreach_norm(grads, 2.0)
    return torch.linalg.vector_norm(torch.stack(norms)), sum(g.numel() for g in grads)


def reset_train_accumulators(ts: TrainState) -> None:
    zero = torch.zeros((), device=ts.device)
    ts.train_sums = {"loss": zero.clone(), "correct": zero.clone(), "n": 0, "host_norm": zero.clone(), "steps": 0,
               "ratio_sum": {}, "ratio_count": {}}


@contextlib.contextmanager
def _private_rng(device: torch.device, seed: int) -> Iterator[None]:
    """A random stream of its own for the block, seeded with `seed`; the caller's stream is neither read nor advanced.

    The incubator's forward runs the host's dropout layers. Drawing their masks from the env's stream would shift
    every later host draw, and an env whose seeds never blended would stop being bit-identical to its static twin.
    """
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.random.default_generator.manual_seed(seed)
        if device.type == "cuda":
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        yield


def _incubate(ts: TrainState, activations: dict[str, torch.Tensor], y: torch.Tensor) -> None:
    """Give every TRAINING seed the gradient of the task loss of the model with the seed's output in place of its
    slot's (`MorphogeneticModel.forward_probe` from the slot's detached host activation, every other slot as it is).

    The seed is isolated from the model's forward, so the main backward cannot train it. A straight-through gradient
    (the host's dL/dh applied to the seed's output) does not either: the loss is never evaluated with the seed's
    output in place, so that output drifts wherever the linearization points, and frozen-host probes measured −24 to
    −59 pp after six epochs whatever the seed was worth. Here the seed learns exactly what its probe (and the G2
    gate) measures. Gradients are taken for the seed's parameters only, so the host's stay those of the host alone;
    the host's BatchNorm layers use batch statistics without updating their running estimates, and dropout draws
    from a stream keyed by (seed id, step). With a GradScaler the loss is scaled like the main loss: the seed's
    optimizer is unscaled and stepped with the others.
    """
    model = ts.model
    for s in model.slots():
        if s.state is None or s.state.stage != SeedStage.TRAINING:
            continue
        params = s.seed_parameters()
        if not params:
            continue
        with _private_rng(ts.device, derive_seed("incubator", s.state.seed_id, ts.steps_taken)), ts.autocast():
            loss = compute_task_loss(model.forward_probe(s.slot_id, activations[s.slot_id].detach()), y,
                                     ts.task_type)
        if ts.scaler is not None:
            loss = ts.scaler.scale(loss)
        # A gated blend's gate has no part in TRAINING: its gradient stays None, as the optimizer expects.
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        for p, g in zip(params, grads, strict=True):
            p.grad = g


def train_step(ts: TrainState, x: torch.Tensor, y: torch.Tensor) -> None:
    """One optimization step of the host and every live seed, with the always-on gradient-ratio measurement.

    Order: forward and backward of the model (host, blended seeds), then the incubator for TRAINING seeds, then the
    ratio and the post-backward hooks (every gradient exists by then), then the optimizer steps.
    """
    model = ts.model
    if not model.training:
        model.train()
    optimizers = ts.optimizers()
    for opt in optimizers:
        opt.zero_grad(set_to_none=True)
    with ts.autocast():
        outputs, activations = model.forward_with_activations(x)
        loss = compute_task_loss(outputs, y, ts.task_type)
    if ts.scaler is not None:
        ts.scaler.scale(loss).backward()
    else:
        loss.backward()
    _incubate(ts, activations, y)
    if ts.scaler is not None:
        for opt in optimizers:
            ts.scaler.unscale_(opt)

    host_norm, host_n = _grad_norm(model.host_parameters())
    acc = ts.train_sums
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
    acc["correct"] += correct_count(outputs.detach(), y)
    acc["n"] += n
    acc["steps"] += 1
    ts.steps_taken += 1


BN_RECALIBRATION_BATCHES = 8


def recalibrate_batchnorm(ts: TrainState, inputs: Iterable[torch.Tensor]) -> None:
    """Re-estimate BatchNorm running statistics with the epoch's final weights ("precise BN").

    The running averages mix statistics of many recent weight versions; on small hosts that lag makes eval-mode
    accuracy swing by several pp from epoch to epoch, which would turn plateau detection, the governor and every
    counterfactual into noise. A cumulative average over a few training batches at the final weights removes it.
    Each layer's k-th batch gets the momentum 1/k, the factor BatchNorm's own cumulative mode (momentum None)
    computes, without that mode's read of its batch counter on the host at every call.
    """
    norms = [m for m in ts.model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    momenta = [m.momentum for m in norms]
    calls = dict.fromkeys(norms, 0)

    def cumulative(module: nn.modules.batchnorm._BatchNorm, _: Any) -> None:
        calls[module] += 1
        module.momentum = 1.0 / calls[module]

    hooks = [m.register_forward_pre_hook(cumulative) for m in norms]
    for m in norms:
        m.reset_running_stats()
    was_training = ts.model.training
    ts.model.train()
    with torch.no_grad(), ts.autocast():
        for x in inputs:
            ts.model(x)
    ts.model.train(was_training)
    for m, momentum, hook in zip(norms, momenta, hooks, strict=True):
        hook.remove()
        m.momentum = momentum


def queue_train_epoch(ts: TrainState, readout: Readout) -> Deferred[TrainEpochStats]:
    """Sample-weighted epoch metrics and per-slot mean gradient ratios, once `readout` is read; resets the
    accumulators now."""
    acc = ts.train_sums
    slots = list(acc["ratio_sum"])
    n, steps = acc["n"], acc["steps"]
    tensors = [acc["loss"], acc["correct"], acc["host_norm"], *(acc["ratio_sum"][s] for s in slots),
               *(acc["ratio_count"][s] for s in slots)]
    reset_train_accumulators(ts)

    def stats(values: list[float]) -> TrainEpochStats:
        return TrainEpochStats(
            train_loss=values[0] / n if n else 0.0,
            train_accuracy=100.0 * values[1] / n if n else 0.0,
            n_samples=n,
            gradient_ratios={s: values[3 + i] / values[3 + len(slots) + i] for i, s in enumerate(slots)
                             if values[3 + len(slots) + i] > 0},
            grad_norm_host=values[2] / steps if steps else 0.0,
        )

    return readout.queue(tensors, stats)


def finish_train_epoch(ts: TrainState) -> TrainEpochStats:
    """`queue_train_epoch` for one env on its own: one host read."""
    return read_alone(queue_train_epoch, ts)


def train_epoch(ts: TrainState, batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> TrainEpochStats:
    recent: deque[torch.Tensor] = deque(maxlen=BN_RECALIBRATION_BATCHES)
    for x, y in batches:
        train_step(ts, x, y)
        recent.append(x)
    recalibrate_batchnorm(ts, recent)
    return finish_train_epoch(ts)
