"""Validation of one environment: the model's loss and accuracy, and from the same pass the counterfactual of each
blended seed and the probe of each TRAINING seed.

Like training, nothing here reads a device value on the host: `queue_validation` hands the pass's sums to a
`Readout` (`finish_validation` reads one env's on its own).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

from esper.execution.readout import Deferred, Readout, read_alone
from esper.kasmina.model import MorphogeneticModel
from esper.leyline import SeedStage
from esper.tolaria.trainer import TrainState, compute_task_loss, correct_count


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


def validate_batch(ts: TrainState, x: torch.Tensor, y: torch.Tensor, ablate: tuple[str, ...] = (),
                   probe: tuple[str, ...] = ()) -> None:
    """Evaluate one batch with the full model, each slot in `ablate` removed and each slot in `probe` replaced by
    its TRAINING seed (cached prefixes)."""
    model = ts.model
    val = ts.val_sums
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
    val["correct"] += correct_count(logits.full, y)
    for s, out in logits.ablated.items():
        val["ablated"][s] += correct_count(out, y)
    for s, out in logits.probed.items():
        val["probed"][s] += correct_count(out, y)
    val["n"] += n


def _empty_val_stats(ablate: Iterable[str], probe: Iterable[str]) -> ValStats:
    zeros, probe_zeros = dict.fromkeys(ablate, 0.0), dict.fromkeys(probe, 0.0)
    return ValStats(0.0, 0.0, 0, zeros, dict(zeros), probe_zeros, dict(probe_zeros))


def queue_validation(ts: TrainState, readout: Readout) -> Deferred[ValStats]:
    """Sample-weighted validation metrics, counterfactual and probe contributions (pp), once `readout` is read;
    restores the train/eval mode and clears the pass now (no pass: empty statistics)."""
    val = ts.val_sums
    if not val:
        return readout.queue([], lambda _: _empty_val_stats((), ()))
    ts.model.train(val["was_training"])
    ablated_slots, probed_slots = list(val["ablated"]), list(val["probed"])
    tensors = [val["loss"], val["correct"], *(val["ablated"][s] for s in ablated_slots),
               *(val["probed"][s] for s in probed_slots)]
    n = val["n"]
    ts.val_sums = {}

    def stats(values: list[float]) -> ValStats:
        if n == 0:
            return _empty_val_stats(ablated_slots, probed_slots)
        acc = 100.0 * values[1] / n
        counts = iter(values[2:])
        ablated = {s: 100.0 * next(counts) / n for s in ablated_slots}
        probed = {s: 100.0 * next(counts) / n for s in probed_slots}
        return ValStats(values[0] / n, acc, n, ablated, {s: acc - a for s, a in ablated.items()},
                        probed, {s: p - acc for s, p in probed.items()})

    return readout.queue(tensors, stats)


def finish_validation(ts: TrainState) -> ValStats:
    """`queue_validation` for one env on its own: one host read."""
    return read_alone(queue_validation, ts)


def counterfactual_slots(model: MorphogeneticModel) -> tuple[str, ...]:
    """Slots whose seed blends into the forward (alpha > 0): the ones with a measurable contribution."""
    return tuple(s.slot_id for s in model.slots() if s.state is not None and s.state.alpha > 0)


def probe_slots(model: MorphogeneticModel) -> tuple[str, ...]:
    """Slots whose seed is in TRAINING: isolated from the forward, so only a probe can measure it."""
    return tuple(s.slot_id for s in model.slots() if s.state is not None and s.state.stage == SeedStage.TRAINING)


def validate(ts: TrainState, batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
             ablate: tuple[str, ...] | None = None, probe: tuple[str, ...] | None = None) -> ValStats:
    """Full validation pass; by default ablates every blended-in seed and probes every TRAINING seed."""
    ablate = counterfactual_slots(ts.model) if ablate is None else ablate
    probe = probe_slots(ts.model) if probe is None else probe
    for x, y in batches:
        validate_batch(ts, x, y, ablate, probe)
    if not ts.val_sums:  # empty loader: nothing accumulated
        return _empty_val_stats(ablate, probe)
    return finish_validation(ts)
