"""Governor rollback restores a consistent model and optimizers.

germinate → train → fossilize → snapshot → germinate another seed → train → NaN → panic → rollback: the model,
every seed (weights, gate, lifecycle), and the host and seed optimizer states equal the snapshot exactly.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from esper.data.batches import SharedBatchIterator
from esper.data.tasks import DataCache, DataOptions, get_task_spec
from esper.env.env import EnvSpec, MorphoEnv
from esper.env.lockstep import EpochData, Lockstep
from esper.env.loop import run_epoch
from esper.env.rewards import make_reward_fn
from esper.kasmina.hosts import CNNHost
from esper.kasmina.model import MorphogeneticModel
from esper.kasmina.state import LifecycleConfig
from esper.leyline import SeedStage
from esper.tamiyo.policy import StaticPolicy
from esper.tolaria import TolariaGovernor, TrainState, train_step, validate

HOST_SPEC = get_task_spec("synthetic").host_optimizer
SEED_SPEC = get_task_spec("synthetic").seed_optimizer


def _assert_same(a: Any, b: Any, path: str = "") -> None:
    """Recursive equality of nested dicts/lists with tensors compared exactly."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu()), path
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: {sorted(map(str, a))} != {sorted(map(str, b))}"
        for k in a:
            _assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), path
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def _clone(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_clone(v) for v in obj)
    return obj


def _train(ts: TrainState, steps: int, gen: torch.Generator) -> None:
    for _ in range(steps):
        train_step(ts, torch.randn(8, 3, 16, 16, generator=gen), torch.randint(0, 10, (8,), generator=gen))


def _epoch(ts: TrainState, slot: str, epoch: int, acc: float, gen: torch.Generator) -> None:
    """One stubbed epoch for `slot`: train, record measurements (ratio 0.1, probe +1 pp while TRAINING, c = +2 pp
    once blended), step the lifecycle."""
    _train(ts, 2, gen)
    s = ts.model.slot(slot)
    s.update_gradient_ratio(0.1)
    if s.state is not None and s.state.stage == SeedStage.TRAINING:
        s.set_probe_contribution(1.0)
    if s.alpha > 0:
        s.set_counterfactual(2.0)
    s.record_accuracy(acc)
    if s.state is not None and s.state.stage == SeedStage.PROBATIONARY:
        assert s.fossilize(epoch).passed
    else:
        s.step_epoch(epoch)
    ts.sync_optimizers()


def _seed_weights(model: MorphogeneticModel) -> dict[str, dict[str, torch.Tensor]]:
    return {s.slot_id: _clone(s.state_dict()) for s in model.slots() if s.state is not None}


def _reports(model: MorphogeneticModel) -> dict[str, tuple[str, SeedStage, float]]:
    return {k: (r.seed_id, r.stage, r.metrics.current_alpha) for k, r in model.get_slot_reports().items()}


def _lifecycle(model: MorphogeneticModel) -> dict[str, Any]:
    return {s.slot_id: s.state.to_dict() for s in model.slots() if s.state is not None}


def test_rollback_restores_snapshot_exactly() -> None:
    gen = torch.Generator().manual_seed(0)
    model = MorphogeneticModel(CNNHost(channels=(8, 16, 32)), slots=["early", "mid", "late"],
                               lifecycle=LifecycleConfig())
    ts = TrainState(model, HOST_SPEC, SEED_SPEC, "classification", torch.device("cpu"))
    gov = TolariaGovernor(random_guess_loss=math.log(10))
    gov.snapshot(ts, epoch=0)

    # A gated seed in `mid` goes all the way to FOSSILIZED (its params join the host optimizer).
    model.germinate_seed("conv_light", "fossil", slot="mid", blend_id="gated", baseline_accuracy=50.0, epoch=1)
    model.slot("mid").step_epoch(1)
    ts.sync_optimizers()
    epoch, acc = 1, 50.0
    while model.slot("mid").state.stage != SeedStage.FOSSILIZED:  # type: ignore[union-attr]
        epoch, acc = epoch + 1, acc + 1.0
        _epoch(ts, "mid", epoch, acc, gen)
        assert epoch < 30
    # A live seed in `early` (BLENDING, with its own optimizer) is present at the snapshot too.
    model.germinate_seed("depthwise", "live", slot="early", blend_id="sigmoid", baseline_accuracy=acc, epoch=epoch)
    model.slot("early").step_epoch(epoch)
    ts.sync_optimizers()
    while model.slot("early").state.stage != SeedStage.BLENDING:  # type: ignore[union-attr]
        epoch, acc = epoch + 1, acc + 1.0
        _epoch(ts, "early", epoch, acc, gen)
    _train(ts, 2, gen)
    assert ts.fossil_order == ["mid"] and set(ts.seed_optimizers) == {"early"}

    gov.snapshot(ts, epoch=epoch)
    x_probe = torch.randn(6, 3, 16, 16, generator=gen)
    model.eval()
    with torch.no_grad():
        out_snap = model(x_probe)
    model.train()
    host_snap = _clone(model.host.state_dict())
    seeds_snap = _seed_weights(model)
    lifecycle_snap = _lifecycle(model)
    reports_snap = _reports(model)
    host_opt_snap = _clone(ts.host_optimizer.state_dict())
    seed_opt_snap = {k: (sid, _clone(opt.state_dict())) for k, (sid, opt) in ts.seed_optimizers.items()}
    slot_keys_snap = {s.slot_id: set(s.state_dict()) for s in model.slots()}

    # After the snapshot: a new seed in `late`, more training, lifecycle progress, then a NaN in the host.
    model.germinate_seed("conv_light", "late_seed", slot="late", blend_id="gated", baseline_accuracy=acc, epoch=epoch)
    ts.sync_optimizers()
    for _ in range(3):
        epoch, acc = epoch + 1, acc + 1.0
        _epoch(ts, "early", epoch, acc, gen)
        model.slot("late").record_accuracy(acc)
        model.slot("late").step_epoch(epoch)
        ts.sync_optimizers()
    assert "late" in ts.seed_optimizers
    with torch.no_grad():
        model.host.blocks[0][0].weight[0, 0, 0, 0] = math.nan
    val = validate(ts, [(x_probe, torch.zeros(6, dtype=torch.long))])
    assert math.isnan(val.val_loss)
    assert gov.check_vital_signs(val.val_loss) is True
    report = gov.execute_rollback(ts)
    assert report.rollback_occurred and report.restored_epoch == epoch - 3

    # Model: outputs, host weights, seeds (weights, gate, lifecycle) and slot reports equal the snapshot.
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(x_probe), out_snap)
    model.train()
    _assert_same(model.host.state_dict(), host_snap, "host")
    _assert_same(_seed_weights(model), seeds_snap, "seeds")
    _assert_same(_lifecycle(model), lifecycle_snap, "lifecycle")
    assert _reports(model) == reports_snap
    assert reports_snap["mid"][1] == SeedStage.FOSSILIZED and reports_snap["early"][1] == SeedStage.BLENDING
    assert model.slot("mid").gate is not None

    # The seed germinated after the snapshot is gone cleanly: no zombie state, module, gate, keys or optimizer.
    late = model.slot("late")
    assert late.state is None and late.seed is None and late.gate is None and late.to_report() is None
    assert {s.slot_id: set(s.state_dict()) for s in model.slots()} == slot_keys_snap
    assert not any(k.startswith("seed_slots.late.") for k in model.state_dict())

    # Optimizers: states equal the snapshot, and they drive the restored modules (not orphaned copies).
    _assert_same(ts.host_optimizer.state_dict(), host_opt_snap, "host_optimizer")
    assert set(ts.seed_optimizers) == set(seed_opt_snap) == {"early"}
    for slot, (sid, state) in seed_opt_snap.items():
        restored_id, opt = ts.seed_optimizers[slot]
        assert restored_id == sid
        _assert_same(opt.state_dict(), state, f"seed_optimizer.{slot}")
        assert [id(p) for g in opt.param_groups for p in g["params"]] == [
            id(p) for p in model.seed_parameters(slot)]
    groups = ts.host_optimizer.param_groups
    assert ts.fossil_order == ["mid"] and len(groups) == 2
    assert [id(p) for p in groups[0]["params"]] == [id(p) for p in model.host_parameters()]
    assert [id(p) for p in groups[1]["params"]] == [id(p) for p in model.seed_parameters("mid")]

    # Training continues from the restored state.
    before = [p.detach().clone() for p in model.parameters()]
    _train(ts, 1, gen)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, model.parameters()))
    assert gov.check_vital_signs(1.0) is False and len(gov.loss_history) == 1


def _synthetic_env() -> tuple[MorphoEnv, EpochData]:
    task = get_task_spec("synthetic")
    device = torch.device("cpu")
    cache = DataCache(DataOptions())
    data = EpochData(
        train=SharedBatchIterator({"cpu": cache.get(task, "train", device, 256, seed=0)}, 128, shuffle=True, seed=0,
                                  augment=task.augmentation(None)),
        val=SharedBatchIterator({"cpu": cache.get(task, "val", device, 128, seed=0)}, 128, shuffle=False),
        seed=0,
    )
    env = MorphoEnv(EnvSpec(task=task, slots=("early", "mid", "late"), max_epochs=4, env_seed=3, device=device),
                    "static")
    return env, data


def _poison(env: MorphoEnv) -> None:
    with torch.no_grad():
        env.model.host.blocks[0][0].weight[0, 0, 0, 0] = math.nan


def test_rollback_in_a_real_env_continues_the_episode() -> None:
    """MorphoEnv on `synthetic`: NaN in a host weight mid-episode → rollback, the decision whose outcome diverged is
    penalized, and the episode goes on."""
    env, data = _synthetic_env()
    controllers = [StaticPolicy()]
    lockstep = Lockstep([env], data, make_reward_fn("contribution", env.spec.task, 0.99))
    assert run_epoch(lockstep, controllers) == []  # nothing was decided before epoch 1
    [pending] = lockstep._pending
    assert pending is not None and math.isfinite(pending.val.val_loss)
    _poison(env)
    [step] = run_epoch(lockstep, controllers)  # the decision after epoch 1, credited with epoch 2
    assert step.epoch == 1 and step.rollback is True and step.record.rollback is True
    assert math.isfinite(step.val.val_loss) and math.isnan(step.record.after.val_loss)
    assert env.rollbacks == 1
    assert step.reward.governor_penalty == -10.0 and step.reward.total() <= -9.0
    assert all(torch.isfinite(p).all() for p in env.model.parameters())
    for epoch in (3, 4):
        [later] = run_epoch(lockstep, controllers)
        assert later.epoch == epoch - 1 and later.record.is_terminal == (epoch == 4)
        assert not later.rollback and not later.record.rollback and later.reward.governor_penalty == 0.0
        assert math.isfinite(later.record.after.val_loss) and later.val.n_samples == 128
        assert math.isfinite(later.reward.total())
    assert tuple(lockstep._pending) == (None,)  # no decision after the last epoch
    assert env.rollbacks == 1 and len(env.accuracy_curve) == 4
    assert env.result().rollbacks == 1


def test_step_after_rollback_has_a_finite_loss_delta() -> None:
    env, data = _synthetic_env()
    controllers = [StaticPolicy()]
    lockstep = Lockstep([env], data, make_reward_fn("loss", env.spec.task, 0.99))
    run_epoch(lockstep, controllers)
    _poison(env)
    [diverged] = run_epoch(lockstep, controllers)
    assert diverged.rollback and not math.isfinite(diverged.record.after.loss_delta)
    assert diverged.reward.loss_primary == -12.5  # a non-finite improvement counts as the worst regression
    [after] = run_epoch(lockstep, controllers)
    assert not after.rollback and math.isfinite(after.record.after.val_loss)
    assert math.isfinite(after.record.after.loss_delta)
    assert after.reward.loss_primary > -12.5
