"""G2 measures the seed, not the host: real training, a frozen host, and the probe measured on validation.

The host trains one short epoch (it is left far from what the data allows), then its learning rate is 0 and its
normalization statistics are re-estimated on the same batches every epoch, so its validation accuracy is exactly
flat: the old global-improvement gate could never pass here. A seed in any slot, trained by the real incubator on
the labels, must still reach BLENDING; one trained against them (on shifted labels) must stay in TRAINING.
"""

from __future__ import annotations

import pytest
import torch

from esper.data.optim import OptimizerSpec
from esper.kasmina.hosts import CNNHost
from esper.kasmina.model import MorphogeneticModel
from esper.kasmina.state import LifecycleConfig
from esper.leyline import CANONICAL_SLOTS, SeedStage
from esper.tolaria import TrainState, train_epoch, validate

CLASSES = 5
EPOCHS = 6


def _data(seed: int, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Class templates plus noise, in batches of 32: easy enough that a seed learns much of it in a few epochs."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.randn(CLASSES, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, CLASSES, (n,), generator=g)
    x = templates[y] + 1.5 * torch.randn(n, 3, 16, 16, generator=g)
    return list(zip(x.split(32), y.split(32), strict=True))


def _run(slot_id: str, label_shift: int) -> tuple[MorphogeneticModel, list[float], list[float]]:
    """Train a conv_light seed in `slot_id` on labels shifted by `label_shift` (0: the true labels) for up to EPOCHS
    epochs, measuring and stepping the lifecycle like the episode loop. Returns the model, validation accuracies and
    probes."""
    torch.manual_seed(0)
    host = CNNHost(in_channels=3, num_classes=CLASSES, channels=(8, 16, 32))
    model = MorphogeneticModel(host, slots=[slot_id], lifecycle=LifecycleConfig())
    spec = OptimizerSpec(name="sgd", lr=0.003, momentum=0.9)
    seed_spec = OptimizerSpec(name="sgd", lr=0.01, momentum=0.9)
    ts = TrainState(model, spec, seed_spec, "classification", torch.device("cpu"))
    train, val = _data(1, 512), _data(2, 256)
    train_epoch(ts, train)
    for group in ts.host_optimizer.param_groups:
        group["lr"] = 0.0  # a frozen host: OptimizerSpec itself forbids lr 0
    slot = model.slot(slot_id)
    model.germinate_seed("conv_light", "s", slot=slot_id, baseline_accuracy=0.0, epoch=0)
    model.step_epoch(0)  # G1: TRAINING
    ts.sync_optimizers()
    train = [(x, (y + label_shift) % CLASSES) for x, y in train]
    accuracies, probes = [], []
    for epoch in range(1, EPOCHS + 1):
        train_stats = train_epoch(ts, train)
        val_stats = validate(ts, val)  # probes every TRAINING seed by default
        model.record_accuracy(val_stats.val_accuracy)
        for s, ratio in train_stats.gradient_ratios.items():
            model.slot(s).update_gradient_ratio(ratio)
        for s, c in val_stats.probe_contribution.items():
            model.slot(s).set_probe_contribution(c)
        accuracies.append(val_stats.val_accuracy)
        if slot_id in val_stats.probe_contribution:
            probes.append(val_stats.probe_contribution[slot_id])
        model.step_epoch(epoch)
        assert slot.state is not None
        if slot.state.stage != SeedStage.TRAINING:
            break
    return model, accuracies, probes


@pytest.mark.parametrize("slot_id", CANONICAL_SLOTS)
def test_a_seed_that_helps_blends_on_a_flat_host(slot_id: str) -> None:
    model, accuracies, probes = _run(slot_id, label_shift=0)
    state = model.slot(slot_id).state
    assert state is not None
    assert len(set(accuracies)) == 1  # the host is exactly flat
    assert state.stage == SeedStage.BLENDING, (accuracies, probes)
    assert len(probes) == LifecycleConfig().min_training_epochs  # blended as early as G2 allows
    assert probes[-1] > 5.0  # the seed's own worth, measured while it is isolated


@pytest.mark.parametrize("slot_id", CANONICAL_SLOTS)
def test_a_seed_that_hurts_stays_in_training(slot_id: str) -> None:
    model, accuracies, probes = _run(slot_id, label_shift=1)
    state = model.slot(slot_id).state
    assert state is not None
    assert len(set(accuracies)) == 1
    assert state.stage == SeedStage.TRAINING and len(probes) == EPOCHS
    assert max(probes[LifecycleConfig().min_training_epochs - 1:]) < 0.0, probes
    result = model.slot(slot_id).gates.check_gate(state, SeedStage.BLENDING)
    assert not result.passed
    assert [c for c in result.checks_failed if c.startswith("probe_negative_")], result.checks_failed
    assert "seed_ready" in result.checks_passed and any(c.startswith("seed_gradient_active") for c in
                                                         result.checks_passed)


@pytest.mark.parametrize("label_shift", [0, 1])
def test_validation_does_not_change_the_model(label_shift: int) -> None:
    """Probing is a measurement: a second validation of the same model gives the same numbers."""
    model, _, _ = _run("early", label_shift)
    ts = TrainState(model, OptimizerSpec(name="sgd", lr=0.01), OptimizerSpec(name="sgd", lr=0.01), "classification",
                    torch.device("cpu"))
    val = _data(2, 256)
    first, second = validate(ts, val), validate(ts, val)
    assert first == second
