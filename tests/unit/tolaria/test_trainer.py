"""Tolaria trainer mechanics: metrics, gradient ratios, counterfactuals, optimizers, BN."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from esper.data.optim import OptimizerSpec
from esper.kasmina.hosts import CNNHost, TransformerHost
from esper.kasmina.model import MorphogeneticModel, batch_statistics
from esper.kasmina.state import LifecycleConfig
from esper.leyline import SeedStage
from esper.tolaria import (
    TrainState,
    compute_task_loss,
    finish_train_epoch,
    finish_validation,
    probe_slots,
    recalibrate_batchnorm,
    train_step,
    validate,
    validate_batch,
)

HOST_SPEC = OptimizerSpec(name="sgd", lr=0.01, momentum=0.9, weight_decay=5e-4)
SEED_SPEC = OptimizerSpec(name="sgd", lr=0.01, momentum=0.9)
EPS = 1e-8


def _model() -> MorphogeneticModel:
    host = CNNHost(in_channels=3, num_classes=10, channels=(8, 16, 32))
    return MorphogeneticModel(host, slots=["early", "mid", "late"], lifecycle=LifecycleConfig())


def _ts(model: MorphogeneticModel, *, task_type: str = "classification", amp: bool = False) -> TrainState:
    return TrainState(model, HOST_SPEC, SEED_SPEC, task_type, torch.device("cpu"), amp=amp)  # type: ignore[arg-type]


def _drive(model: MorphogeneticModel, slot: str, target: SeedStage, *, blend: str = "linear",
           blueprint: str = "conv_light", seed_id: str | None = None) -> None:
    """Germinate into `slot` and advance with stubbed measurements (ratio 0.1, +1 pp/epoch, probe +1 pp while
    TRAINING, c = +2 pp once blended) to `target`."""
    s = model.slot(slot)
    model.germinate_seed(blueprint, seed_id or f"{slot}_seed", slot=slot, blend_id=blend, baseline_accuracy=50.0,
                         epoch=1)
    acc = 50.0
    for epoch in range(2, 40):
        assert s.state is not None
        if s.state.stage == target:
            return
        s.update_gradient_ratio(0.1)
        if s.state.stage == SeedStage.TRAINING:
            s.set_probe_contribution(1.0)
        if s.state.alpha > 0:
            s.set_counterfactual(2.0)
        acc += 1.0
        s.record_accuracy(acc)
        if target == SeedStage.FOSSILIZED and s.state.stage == SeedStage.PROBATIONARY:
            assert s.fossilize(epoch).passed
            continue
        s.step_epoch(epoch)
    raise AssertionError(f"could not drive {slot} to {target.name}")


def _zero_lr(ts: TrainState) -> None:
    """Learning rate 0 on every optimizer (OptimizerSpec forbids lr 0): parameters never move."""
    for opt in ts.optimizers():
        for group in opt.param_groups:
            group["lr"] = 0.0


def _images(n: int) -> torch.Tensor:
    return torch.randn(n, 3, 16, 16)


def _ids(opt: torch.optim.Optimizer) -> set[int]:
    return {id(p) for g in opt.param_groups for p in g["params"]}


# ------------------------------------------------------------------------------------ sample-weighted metrics


def test_train_metrics_are_sample_weighted() -> None:
    """Two batches (3 and 5 samples): loss/accuracy are per-sample means, not means of batch means."""
    ts = _ts(_model())
    _zero_lr(ts)
    x1, x2 = _images(3), _images(5)
    ts.model.train()
    with torch.no_grad():  # train mode: BN batch statistics, identical to what train_step sees (weights frozen)
        y1 = ts.model(x1).argmax(1)  # all correct
        y2 = (ts.model(x2).argmax(1) + 1) % 10  # all wrong
        per_sample = torch.cat([F.cross_entropy(ts.model(x), y, reduction="none") for x, y in ((x1, y1), (x2, y2))])
    train_step(ts, x1, y1)
    train_step(ts, x2, y2)
    stats = finish_train_epoch(ts)
    assert stats.n_samples == 8
    assert stats.train_accuracy == pytest.approx(100.0 * 3 / 8)  # mean of batch means would be 50
    assert stats.train_loss == pytest.approx(per_sample.mean().item(), rel=1e-5)
    batch_means = (per_sample[:3].mean() + per_sample[3:].mean()).item() / 2
    assert abs(stats.train_loss - batch_means) > 1e-3
    # The accumulators reset: an epoch without steps reports zeros instead of dividing by zero.
    empty = finish_train_epoch(ts)
    assert (empty.train_loss, empty.train_accuracy, empty.n_samples, empty.grad_norm_host) == (0.0, 0.0, 0, 0.0)


def test_validation_metrics_are_sample_weighted() -> None:
    ts = _ts(_model())
    x1, x2 = _images(3), _images(5)
    ts.model.eval()
    with torch.no_grad():
        y1 = ts.model(x1).argmax(1)
        y2 = (ts.model(x2).argmax(1) + 1) % 10
        expected_loss = F.cross_entropy(ts.model(torch.cat([x1, x2])), torch.cat([y1, y2])).item()
    stats = validate(ts, [(x1, y1), (x2, y2)])
    assert stats.n_samples == 8
    assert stats.val_accuracy == pytest.approx(37.5)
    assert stats.val_loss == pytest.approx(expected_loss, rel=1e-5)


def test_empty_validation_returns_zeros() -> None:
    ts = _ts(_model())
    _drive(ts.model, "mid", SeedStage.PROBATIONARY)
    _drive(ts.model, "late", SeedStage.TRAINING)
    ts.model.train()
    stats = validate(ts, [])
    assert (stats.val_loss, stats.val_accuracy, stats.n_samples) == (0.0, 0.0, 0)
    assert stats.contribution == {"mid": 0.0} and stats.ablated_accuracy == {"mid": 0.0}
    assert stats.probe_contribution == {"late": 0.0} and stats.probe_accuracy == {"late": 0.0}
    assert ts.model.training
    direct = finish_validation(ts)
    assert (direct.val_loss, direct.val_accuracy, direct.n_samples) == (0.0, 0.0, 0)


@pytest.mark.parametrize("training", [True, False])
def test_finish_validation_restores_mode(training: bool) -> None:
    ts = _ts(_model())
    ts.model.train(training)
    validate_batch(ts, _images(4), torch.randint(0, 10, (4,)))
    assert not ts.model.training  # evaluation runs in eval mode
    finish_validation(ts)
    assert ts.model.training is training
    assert all(m.training is training for m in ts.model.modules())


def test_validate_batch_rejects_changing_ablations() -> None:
    ts = _ts(_model())
    _drive(ts.model, "mid", SeedStage.BLENDING)
    y = torch.randint(0, 10, (4,))
    validate_batch(ts, _images(4), y, ("mid",))
    with pytest.raises(ValueError, match="same for every batch"):
        validate_batch(ts, _images(4), y, ())
    finish_validation(ts)
    _drive(ts.model, "late", SeedStage.TRAINING)
    validate_batch(ts, _images(4), y, ("mid",), ("late",))
    with pytest.raises(ValueError, match="same for every batch"):
        validate_batch(ts, _images(4), y, ("mid",))


# ------------------------------------------------------------------------------------------ gradient ratio


def _set_grads(params: list[nn.Parameter], value: dict[str, float], key: str) -> None:
    """Hand-set gradients: every element of every parameter receives `value[key]` (read at backward time)."""
    for p in params:
        p.register_hook(lambda g, k=key: torch.full_like(g, value[k]))


def test_gradient_ratio_formula_on_hand_set_gradients() -> None:
    """Constant gradients c: ‖g‖/√n = c, so ratio = c_s / (c_h + 1e-8); the epoch value is the mean over steps."""
    model = _model()
    _drive(model, "mid", SeedStage.TRAINING)
    ts = _ts(model)
    _zero_lr(ts)
    value = {"host": 2.0, "seed": 0.5}
    _set_grads(model.host_parameters(), value, "host")
    _set_grads(model.seed_parameters("mid"), value, "seed")
    x, y = _images(4), torch.randint(0, 10, (4,))
    train_step(ts, x, y)
    value.update(host=1.0, seed=1.5)
    train_step(ts, x, y)
    stats = finish_train_epoch(ts)
    expected = (0.5 / (2.0 + EPS) + 1.5 / (1.0 + EPS)) / 2
    assert stats.gradient_ratios == {"mid": pytest.approx(expected, rel=1e-6)}


@pytest.mark.parametrize(("host", "seed"), [(2.0, 1e-10), (1e-10, 0.5)])
def test_gradient_ratio_is_zero_when_a_norm_is_tiny(host: float, seed: float) -> None:
    """‖g‖ < 1e-8 on either side gives exactly 0 (the raw formula would give ~5e-11 or ~5e7)."""
    model = _model()
    _drive(model, "mid", SeedStage.TRAINING)
    ts = _ts(model)
    _zero_lr(ts)
    value = {"host": host, "seed": seed}
    _set_grads(model.host_parameters(), value, "host")
    _set_grads(model.seed_parameters("mid"), value, "seed")
    train_step(ts, _images(4), torch.randint(0, 10, (4,)))
    assert finish_train_epoch(ts).gradient_ratios == {"mid": 0.0}


def test_gradient_ratio_matches_real_gradients() -> None:
    """Controlled loss: the ratio equals (‖g_s‖/√n_s)/(‖g_h‖/√n_h + 1e-8) on the gradients the hooks see."""
    model = _model()
    _drive(model, "mid", SeedStage.TRAINING, blend="gated")
    ts = _ts(model)
    seen: dict[str, float] = {}

    def rms(params: list[nn.Parameter]) -> float:
        flat = torch.cat([p.grad.flatten() for p in params if p.grad is not None])
        return (flat.norm() / math.sqrt(flat.numel())).item()

    def hook(state: TrainState) -> None:
        seen["seed"] = rms(state.model.seed_parameters("mid"))
        seen["host"] = rms(state.model.host_parameters())

    ts.post_backward_hooks.append(hook)
    train_step(ts, _images(6), torch.randint(0, 10, (6,)))
    stats = finish_train_epoch(ts)
    assert seen["seed"] > 0 and seen["host"] > 0
    assert stats.gradient_ratios["mid"] == pytest.approx(seen["seed"] / (seen["host"] + EPS), rel=1e-4)
    assert stats.grad_norm_host > 0


def test_ratios_only_for_training_and_blending_seeds() -> None:
    model = _model()
    _drive(model, "early", SeedStage.TRAINING)
    _drive(model, "mid", SeedStage.BLENDING)
    _drive(model, "late", SeedStage.PROBATIONARY)
    ts = _ts(model)
    train_step(ts, _images(4), torch.randint(0, 10, (4,)))
    assert set(finish_train_epoch(ts).gradient_ratios) == {"early", "mid"}

    model = _model()
    _drive(model, "early", SeedStage.GERMINATED)
    _drive(model, "mid", SeedStage.FOSSILIZED)
    ts = _ts(model)
    train_step(ts, _images(4), torch.randint(0, 10, (4,)))
    assert finish_train_epoch(ts).gradient_ratios == {}


def test_post_backward_hooks_run_before_the_optimizer_step() -> None:
    model = _model()
    ts = _ts(model)
    weight = model.host.head.weight
    before = weight.detach().clone()
    seen: dict[str, torch.Tensor] = {}

    def hook(state: TrainState) -> None:
        seen["weight"] = weight.detach().clone()
        seen["grad"] = weight.grad.detach().clone()

    ts.post_backward_hooks.append(hook)
    train_step(ts, _images(4), torch.randint(0, 10, (4,)))
    assert torch.equal(seen["weight"], before) and seen["grad"].abs().sum() > 0
    assert not torch.equal(weight.detach(), before)


# ---------------------------------------------------------------------------------------------- incubator


def _step_grads(ts: TrainState, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """Gradients by parameter name as the post-backward hooks see them in one train step."""
    seen: dict[str, torch.Tensor] = {}
    ts.post_backward_hooks.append(lambda state: seen.update(
        {n: p.grad.clone() for n, p in state.model.named_parameters() if p.grad is not None}))
    train_step(ts, x, y)
    ts.post_backward_hooks.clear()
    return seen


def _dropout_lm(seeded: bool) -> MorphogeneticModel:
    torch.manual_seed(0)
    host = TransformerHost(vocab_size=257, n_embd=16, n_head=2, n_layer=3, block_size=8, dropout=0.3)
    model = MorphogeneticModel(host, slots=["early", "mid"], lifecycle=LifecycleConfig())
    if seeded:
        _drive(model, "early", SeedStage.TRAINING, blueprint="mlp")
    return model


def test_incubator_does_not_draw_from_the_callers_random_stream() -> None:
    """With dropout in the host, a step with a TRAINING seed leaves the global random stream exactly where a step of
    the host alone leaves it (the host's gradients, dropout masks included, are bit-identical). The incubator's own
    dropout is keyed by seed id and step: a rerun gives the same seed gradient, and a second step from the same
    global stream and weights (learning rate 0) another one."""
    x, y = torch.randint(0, 257, (4, 8)), torch.randint(0, 257, (4, 8))
    runs = []
    for seeded in (False, True, True):
        ts = _ts(_dropout_lm(seeded), task_type="lm")
        _zero_lr(ts)
        torch.manual_seed(5)
        first = _step_grads(ts, x, y)
        rng = torch.get_rng_state()
        torch.manual_seed(5)
        runs.append((rng, first, _step_grads(ts, x, y)))
    (plain_rng, plain, _), (rng, seeded, seeded_next), (_, rerun, _) = runs
    assert torch.equal(plain_rng, rng)
    host = [n for n in plain if n.startswith("host.")]
    assert host and all(torch.equal(plain[n], seeded[n]) and torch.equal(plain[n], seeded_next[n]) for n in host)
    seed = [n for n in seeded if n.startswith("seed_slots.early.seed.")]
    assert seed and all(torch.equal(seeded[n], rerun[n]) for n in seed)
    assert any(not torch.equal(seeded[n], seeded_next[n]) for n in seed)


def test_incubator_loss_is_scaled_like_the_main_loss() -> None:
    """With a GradScaler the seed's optimizer is unscaled with the others, so the incubator must scale its loss too:
    the gradients the hooks see equal those of an unscaled step."""
    grads = []
    for scale in (None, 2.0**10):
        torch.manual_seed(0)
        model = _model()
        _drive(model, "mid", SeedStage.TRAINING)
        ts = _ts(model)
        if scale is not None:
            ts.scaler = torch.amp.GradScaler("cpu", init_scale=scale)
        torch.manual_seed(1)
        grads.append(_step_grads(ts, _images(6), torch.randint(0, 10, (6,))))
    plain, scaled = grads
    seed = [n for n in plain if ".seed." in n]
    assert seed and plain.keys() == scaled.keys()
    for n in plain:
        assert torch.allclose(plain[n], scaled[n], rtol=1e-5, atol=1e-8), n


# ----------------------------------------------------------------------------------------- counterfactuals


def test_counterfactual_contributions_equal_naive_removal() -> None:
    """contribution = 100·(correct_full − correct_without_k)/N, the slot's seed removed (host activation passed on,
    BatchNorm after it on batch statistics)."""
    model = _model()
    _drive(model, "mid", SeedStage.PROBATIONARY)
    _drive(model, "late", SeedStage.BLENDING, blueprint="depthwise")
    _drive(model, "early", SeedStage.TRAINING)  # alpha 0: not ablated by default
    ts = _ts(model)
    x1, x2 = _images(7), _images(9)
    model.eval()
    with torch.no_grad():
        # labels: the full model's predictions, so removing a seed that changes a prediction costs accuracy
        batches = [(x1, model(x1).argmax(1)), (x2, model(x2).argmax(1))]
    model.train()
    stats = validate(ts, batches)
    assert set(stats.contribution) == {"mid", "late"}
    assert stats.val_accuracy == 100.0
    n = 16
    for slot in ("mid", "late"):
        model.eval()
        with torch.no_grad():
            correct_without = sum(int((_seed_in_place(model, x, slot, ablate=True).argmax(1) == y).sum())
                                  for x, y in batches)
        model.train()
        assert stats.ablated_accuracy[slot] == pytest.approx(100.0 * correct_without / n, abs=1e-9)
        assert stats.contribution[slot] == pytest.approx(100.0 * (n - correct_without) / n, abs=1e-9)
    assert stats.contribution["mid"] > 0  # the alpha-1 conv seed changes some predictions: the test can fail
    assert model.training


def _seed_in_place(model: MorphogeneticModel, x: torch.Tensor, slot: str, *, ablate: bool = False) -> torch.Tensor:
    """Naive counterfactual: the chain with `slot` outputting its seed's output (or, with `ablate`, its host
    activation), BatchNorm after it on batch statistics."""
    prev, prev_slot = x, None
    with contextlib.ExitStack() as after_slot:
        for s in model.slot_ids:
            h = model.segments.forward_to_segment(s, prev, from_segment=prev_slot)
            if s == slot:
                seed = model.slot(s).seed
                assert seed is not None
                prev = h if ablate else seed(h)
                after_slot.enter_context(batch_statistics(model.host))
            else:
                prev = model.slot(s)(h)
            prev_slot = s
        return model.segments.forward_from_segment(model.slot_ids[-1], prev)


def test_probe_contributions_equal_naive_replacement() -> None:
    """probe = 100·(correct with the TRAINING seed in place of the slot's output − correct as is)/N; other slots,
    including a blended seed that is ablated in the same pass, stay as they are."""
    model = _model()
    _drive(model, "early", SeedStage.TRAINING)
    _drive(model, "mid", SeedStage.BLENDING, blueprint="depthwise")
    _drive(model, "late", SeedStage.TRAINING, blueprint="attention")
    assert probe_slots(model) == ("early", "late")
    ts = _ts(model)
    x1, x2 = _images(7), _images(9)
    model.eval()
    with torch.no_grad():
        batches = [(x1, model(x1).argmax(1)), (x2, model(x2).argmax(1))]  # the model as it is: 100 %
    model.train()
    stats = validate(ts, batches)
    assert set(stats.contribution) == {"mid"} and set(stats.probe_contribution) == {"early", "late"}
    assert stats.val_accuracy == 100.0
    n = 16
    model.eval()
    for slot in ("early", "late"):
        with torch.no_grad():
            correct = sum(int((_seed_in_place(model, x, slot).argmax(1) == y).sum()) for x, y in batches)
        assert stats.probe_accuracy[slot] == pytest.approx(100.0 * correct / n, abs=1e-9)
        assert stats.probe_contribution[slot] == pytest.approx(100.0 * correct / n - 100.0, abs=1e-9)
    model.train()
    assert min(stats.probe_contribution.values()) < 0  # the random seeds change predictions: the test can fail
    assert model.training


def test_validation_reads_back_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loss, accuracy, every counterfactual and every probe come back to the host in a single transfer."""
    model = _model()
    _drive(model, "mid", SeedStage.BLENDING)
    _drive(model, "late", SeedStage.TRAINING)
    ts = _ts(model)
    reads = {"n": 0}
    tolist = torch.Tensor.tolist

    def counting(self: torch.Tensor) -> object:
        reads["n"] += 1
        return tolist(self)

    batches = [(_images(4), torch.randint(0, 10, (4,))) for _ in range(3)]
    monkeypatch.setattr(torch.Tensor, "tolist", counting)
    monkeypatch.setattr(torch.Tensor, "item", lambda self: pytest.fail("no .item() in validation"))
    monkeypatch.setattr(torch.Tensor, "__float__", lambda self: pytest.fail("no float() in validation"))
    stats = validate(ts, batches)
    monkeypatch.undo()
    assert reads["n"] == 1
    assert set(stats.contribution) == {"mid"} and set(stats.probe_contribution) == {"late"}


# -------------------------------------------------------------------------------------------------- LM task


def _lm_model() -> MorphogeneticModel:
    host = TransformerHost(vocab_size=257, n_embd=16, n_head=2, n_layer=3, block_size=8, dropout=0.0)
    return MorphogeneticModel(host, slots=["mid"], lifecycle=LifecycleConfig(min_training_epochs=5))


def test_compute_task_loss_flattens_lm_logits() -> None:
    logits, targets = torch.randn(2, 5, 7), torch.randint(0, 7, (2, 5))
    expected = F.cross_entropy(logits.reshape(10, 7), targets.reshape(10))
    assert torch.allclose(compute_task_loss(logits, targets, "lm"), expected)
    cls_logits, cls_targets = torch.randn(4, 7), torch.randint(0, 7, (4,))
    assert torch.equal(compute_task_loss(cls_logits, cls_targets, "classification"),
                       F.cross_entropy(cls_logits, cls_targets))


def test_lm_metrics_are_per_token() -> None:
    model = _lm_model()
    ts = _ts(model, task_type="lm")
    _zero_lr(ts)
    x, y = torch.randint(0, 257, (2, 8)), torch.randint(0, 257, (2, 8))
    model.eval()
    with torch.no_grad():
        logits = model(x)
    y[0] = logits[0].argmax(-1)  # first sequence fully predicted: accuracy 50 % over all 16 tokens
    expected_loss = F.cross_entropy(logits.reshape(16, 257), y.reshape(16)).item()
    train_step(ts, x, y)  # dropout 0 and lr 0: train and eval forwards agree
    train = finish_train_epoch(ts)
    assert train.n_samples == 16
    assert train.train_loss == pytest.approx(expected_loss, rel=1e-5)
    val = validate(ts, [(x, y)])
    assert val.n_samples == 16 and val.val_accuracy == pytest.approx(50.0)
    assert val.val_loss == pytest.approx(expected_loss, rel=1e-5)


# ------------------------------------------------------------------------------------ optimizer bookkeeping


def test_live_seed_gets_its_own_optimizer() -> None:
    model = _model()
    ts = _ts(model)
    assert ts.seed_optimizers == {} and _ids(ts.host_optimizer) == {id(p) for p in model.host_parameters()}
    _drive(model, "mid", SeedStage.TRAINING, seed_id="a")
    ts.sync_optimizers()
    seed_id, opt = ts.seed_optimizers["mid"]
    assert seed_id == "a" and _ids(opt) == {id(p) for p in model.seed_parameters("mid")}
    assert opt.param_groups[0]["lr"] == SEED_SPEC.lr
    assert _ids(ts.host_optimizer) == {id(p) for p in model.host_parameters()}
    ts.sync_optimizers()  # idempotent
    assert ts.seed_optimizers["mid"][1] is opt


def test_gated_blend_gate_params_are_in_the_seed_optimizer() -> None:
    model = _model()
    _drive(model, "mid", SeedStage.BLENDING, blend="gated")
    ts = _ts(model)
    gate = model.slot("mid").gate
    assert gate is not None
    ids = _ids(ts.seed_optimizers["mid"][1])
    assert {id(p) for p in gate.parameters()} <= ids
    assert ids == {id(p) for p in model.slot("mid").seed_parameters()}
    before = [p.detach().clone() for p in gate.parameters()]
    train_step(ts, _images(4), torch.randint(0, 10, (4,)))
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, gate.parameters()))  # the gate trains


def test_fossilizing_moves_seed_params_into_host_optimizer() -> None:
    model = _model()
    _drive(model, "mid", SeedStage.PROBATIONARY, blend="gated")
    ts = _ts(model)
    seed_params = model.slot("mid").seed_parameters()
    assert model.fossilize_seed(slot="mid", epoch=20).passed
    ts.sync_optimizers()
    assert "mid" not in ts.seed_optimizers
    assert ts.fossil_order == ["mid"]
    groups = ts.host_optimizer.param_groups
    assert len(groups) == 2
    assert [id(p) for p in groups[1]["params"]] == [id(p) for p in seed_params]
    for key in ("lr", "momentum", "weight_decay"):
        assert groups[1][key] == groups[0][key] == getattr(HOST_SPEC, key)  # host hyperparameters
    before = [p.detach().clone() for p in seed_params]
    train_step(ts, _images(4), torch.randint(0, 10, (4,)))
    assert all(not torch.equal(b, p.detach()) for b, p in zip(before, seed_params))  # trains with the host
    ts.sync_optimizers()
    assert len(ts.host_optimizer.param_groups) == 2  # added once


def test_culling_drops_the_seed_optimizer_and_regermination_gets_a_fresh_one() -> None:
    model = _model()
    _drive(model, "mid", SeedStage.TRAINING, seed_id="a")
    ts = _ts(model)
    old = ts.seed_optimizers["mid"][1]
    assert model.cull_seed(slot="mid", reason="test", epoch=3)
    ts.sync_optimizers()
    assert ts.seed_optimizers == {}
    _drive(model, "mid", SeedStage.TRAINING, seed_id="b")
    ts.sync_optimizers()
    seed_id, new = ts.seed_optimizers["mid"]
    assert seed_id == "b" and new is not old
    assert _ids(new) == {id(p) for p in model.seed_parameters("mid")}


def test_rebuild_optimizers_keeps_fossil_group_order() -> None:
    model = _model()
    ts = _ts(model)
    for slot in ("late", "early"):
        _drive(model, slot, SeedStage.FOSSILIZED)
        ts.sync_optimizers()
    _drive(model, "mid", SeedStage.TRAINING)
    ts.sync_optimizers()
    ts.rebuild_optimizers()
    assert ts.fossil_order == ["late", "early"]
    groups = ts.host_optimizer.param_groups
    assert [[id(p) for p in g["params"]] for g in groups] == [
        [id(p) for p in ps] for ps in (model.host_parameters(), model.seed_parameters("late"),
                                       model.seed_parameters("early"))]
    assert set(ts.seed_optimizers) == {"mid"}


# ----------------------------------------------------------------------------------------- BatchNorm, AMP


def test_recalibrate_batchnorm_is_cumulative_average_at_current_weights() -> None:
    model = _model()
    _drive(model, "mid", SeedStage.BLENDING)
    ts = _ts(model)
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    norms[0].momentum = 0.3
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.running_mean.fill_(5.0)  # stale statistics must not survive
    batches = [_images(6) for _ in range(3)]
    inputs: dict[int, list[torch.Tensor]] = {i: [] for i in range(len(norms))}
    handles = [m.register_forward_pre_hook(lambda mod, args, i=i: inputs[i].append(args[0].detach()))
               for i, m in enumerate(norms)]
    model.train()
    with torch.no_grad():
        for x in batches:
            model(x)
    for h in handles:
        h.remove()
    model.eval()
    recalibrate_batchnorm(ts, batches)
    assert not model.training  # mode restored
    for i, m in enumerate(norms):
        mean = torch.stack([a.mean(dim=(0, 2, 3)) for a in inputs[i]]).mean(0)
        var = torch.stack([a.var(dim=(0, 2, 3), unbiased=True) for a in inputs[i]]).mean(0)
        assert torch.allclose(m.running_mean, mean, atol=1e-5)
        assert torch.allclose(m.running_var, var, atol=1e-5, rtol=1e-4)
        assert m.momentum == momenta[i]
        assert int(m.num_batches_tracked) == 3


def test_bf16_autocast_on_cpu_trains_and_validates() -> None:
    model = _model()
    _drive(model, "early", SeedStage.TRAINING)
    _drive(model, "mid", SeedStage.BLENDING, blend="gated")
    ts = _ts(model, amp=True)
    assert ts.scaler is None and ts.autocast_dtype == torch.bfloat16
    dtypes: list[torch.dtype] = []
    model.host.head.register_forward_hook(lambda mod, args, out: dtypes.append(out.dtype))
    before = [p.detach().clone() for p in model.parameters()]
    x, y = _images(8), torch.randint(0, 10, (8,))
    for _ in range(2):
        train_step(ts, x, y)
    train = finish_train_epoch(ts)
    val = validate(ts, [(x, y)])
    assert dtypes and all(d == torch.bfloat16 for d in dtypes)  # autocast really was on
    assert math.isfinite(train.train_loss) and math.isfinite(val.val_loss)
    assert all(math.isfinite(r) for r in train.gradient_ratios.values()) and set(train.gradient_ratios) == {
        "early", "mid"}
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert any(not torch.equal(b, p.detach()) for b, p in zip(before, model.parameters()))
    assert all(p.dtype == torch.float32 for p in model.parameters())
