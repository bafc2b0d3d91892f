"""The governor never snapshots an epoch whose vital check panicked, so a rollback restores a healthy model.

Mirrors the env's per-epoch order: check the vital signs on the real validation loss, roll back if told to, and
otherwise offer a snapshot every five epochs. A loss spike injected at a snapshot epoch panics without rolling back
(the first of three); the snapshot must be refused, and the rollback two epochs later must restore the last
healthy snapshot, whose validation loss is back to normal.
"""

from __future__ import annotations

import math

import torch

from esper.data.tasks import get_task_spec
from esper.kasmina.hosts import CNNHost
from esper.kasmina.model import MorphogeneticModel
from esper.kasmina.state import LifecycleConfig
from esper.leyline import TelemetryEvent, TelemetryEventType
from esper.tolaria import TolariaGovernor, TrainState, train_step, validate

TASK = get_task_spec("synthetic")
SNAPSHOT_EVERY = 5
SPIKE_EPOCH = 15


def _data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(16, 3, 8, 8, generator=g), torch.randint(0, 10, (16,), generator=g)


def test_a_panicking_epoch_is_never_snapshotted_and_rollback_restores_health() -> None:
    torch.manual_seed(0)
    model = MorphogeneticModel(CNNHost(channels=(4, 8, 8)), slots=["mid"], lifecycle=LifecycleConfig())
    ts = TrainState(model, TASK.host_optimizer, TASK.seed_optimizer, "classification", torch.device("cpu"))
    events: list[TelemetryEvent] = []
    gov = TolariaGovernor(random_guess_loss=TASK.random_guess_loss, on_event=events.append)
    gov.snapshot(ts, epoch=0)
    train, val = _data(1), _data(2)
    offered: dict[int, bool] = {}
    healthy_losses: list[float] = []
    head_at: dict[int, torch.Tensor] = {}
    rollback_epoch = None
    for epoch in range(1, 30):
        train_step(ts, *train)
        if epoch == SPIKE_EPOCH:
            with torch.no_grad():
                model.host.head.weight.mul_(2000.0)  # the model diverges and stays diverged
        loss = validate(ts, [val]).val_loss
        if gov.check_vital_signs(loss):
            report = gov.execute_rollback(ts)
            rollback_epoch = epoch
            break
        if loss < 12.0:
            healthy_losses.append(loss)
        if epoch % SNAPSHOT_EVERY == 0:
            offered[epoch] = gov.snapshot(ts, epoch=epoch)
            head_at[epoch] = model.host.head.weight.detach().clone()
    assert rollback_epoch == SPIKE_EPOCH + 2  # two panics below the rollback threshold, the third rolls back
    taken = [e.epoch for e in events if e.event_type == TelemetryEventType.GOVERNOR_SNAPSHOT]
    assert taken == [0, 5, 10]
    assert offered == {5: True, 10: True, 15: False}
    assert report.restored_epoch == 10 and report.reason == "loss_spike"
    assert torch.equal(model.host.head.weight, head_at[10])
    restored = validate(ts, [val]).val_loss
    assert math.isfinite(restored) and restored <= max(healthy_losses)
    assert gov.snapshot(ts, epoch=rollback_epoch)  # the restored state may be snapshotted again
