"""Tolaria never reads a device value on the host inside a pass: the epoch's sums stay on the device and reach the
host once, through a Readout, exactly as a read of each env's own would give them."""

from __future__ import annotations

import copy

import torch
from torch import nn

from esper.data.optim import OptimizerSpec
from esper.execution.readout import Readout
from esper.execution.syncs import SyncCounter
from esper.kasmina.hosts import CNNHost
from esper.kasmina.model import MorphogeneticModel
from esper.kasmina.state import LifecycleConfig
from esper.leyline import SeedStage
from esper.tolaria import (
    TrainState,
    counterfactual_slots,
    finish_train_epoch,
    finish_validation,
    probe_slots,
    queue_train_epoch,
    queue_validation,
    recalibrate_batchnorm,
    train_step,
    validate_batch,
)

SGD = OptimizerSpec(name="sgd", lr=0.05, momentum=0.9, weight_decay=5e-4)


def _ts(seed: int) -> TrainState:
    """A CNN env with a TRAINING seed (probed) and a BLENDING one (ablated), so every accumulator is in use."""
    torch.manual_seed(seed)
    model = MorphogeneticModel(CNNHost(in_channels=3, num_classes=10, channels=(8, 16, 32)),
                               slots=["early", "mid", "late"], lifecycle=LifecycleConfig(min_training_epochs=0))
    model.germinate_seed("conv_light", "m", slot="mid", blend_id="linear", baseline_accuracy=10.0, epoch=1)
    model.slot("mid").step_epoch(2)  # GERMINATED → TRAINING
    model.slot("mid").set_probe_contribution(1.0)
    model.slot("mid").update_gradient_ratio(0.5)
    model.slot("mid").step_epoch(3)  # → BLENDING
    model.germinate_seed("norm", "l", slot="late", blend_id="linear", baseline_accuracy=10.0, epoch=3)
    model.slot("late").step_epoch(4)
    assert model.slot("mid").state.stage == SeedStage.BLENDING  # type: ignore[union-attr]
    assert model.slot("late").state.stage == SeedStage.TRAINING  # type: ignore[union-attr]
    return TrainState(model, SGD, SGD, "classification", torch.device("cpu"))


def _epoch(ts: TrainState, seed: int) -> None:
    """Three train steps, a recalibration and two validation batches, all queued on the device."""
    g = torch.Generator().manual_seed(seed)
    batches = [(torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)) for _ in range(3)]
    for x, y in batches:
        train_step(ts, x, y)
    recalibrate_batchnorm(ts, [x for x, _ in batches])
    ablate, probe = counterfactual_slots(ts.model), probe_slots(ts.model)
    assert ablate == ("mid",) and probe == ("late",)
    for x, y in batches[:2]:
        validate_batch(ts, x, y, ablate, probe)


def test_an_epoch_of_train_steps_recalibration_and_validation_reads_nothing() -> None:
    ts = _ts(0)
    with SyncCounter() as counter:
        _epoch(ts, 0)
    assert counter.total == 0, counter.counts


def test_one_readout_reads_every_env_once_and_gives_what_each_read_alone_gives() -> None:
    alone, together = [_ts(i) for i in range(3)], [_ts(i) for i in range(3)]
    for i in range(3):
        _epoch(alone[i], i)
        _epoch(together[i], i)
    expected = [(finish_train_epoch(ts), finish_validation(ts)) for ts in alone]
    readout = Readout()
    queued = [(queue_train_epoch(ts, readout), queue_validation(ts, readout)) for ts in together]
    with SyncCounter() as counter:
        readout.read()
    assert counter.total == 1
    assert [(train.value, val.value) for train, val in queued] == expected  # equal floats: bit for bit
    train, val = expected[0]
    assert set(train.gradient_ratios) == {"mid", "late"} and set(val.contribution) == {"mid"}
    assert set(val.probe_contribution) == {"late"} and val.n_samples == 16


def test_recalibration_equals_batchnorms_own_cumulative_average_bit_for_bit() -> None:
    """The k-th batch's momentum 1/k is the factor BatchNorm computes itself with momentum None (by reading its
    batch counter on the host at every call)."""
    ts = _ts(1)
    _epoch(ts, 1)
    reference = copy.deepcopy(ts.model)
    inputs = [torch.randn(8, 3, 16, 16, generator=torch.Generator().manual_seed(k)) for k in range(4)]
    norms = [m for m in reference.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    reference.train()
    with torch.no_grad():
        for x in inputs:
            reference(x)
    with SyncCounter() as counter:
        recalibrate_batchnorm(ts, inputs)
    assert counter.total == 0
    ours = [m for m in ts.model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    assert len(ours) == len(norms) == 3  # the host's (blueprints normalize without running statistics)
    for mine, theirs in zip(ours, norms, strict=True):
        assert torch.equal(mine.running_mean, theirs.running_mean)
        assert torch.equal(mine.running_var, theirs.running_var)
        assert torch.equal(mine.num_batches_tracked, theirs.num_batches_tracked)
        assert mine.momentum == 0.1  # the layer's own momentum is back
