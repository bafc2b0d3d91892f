"""Blueprint contract tests over every registered blueprint x slot x topology x size.

A new blueprint registered in the default registry is covered automatically.
"""

from __future__ import annotations

import pytest
import torch

from esper.data.optim import OptimizerSpec
from esper.kasmina.blending import gated_blend_param_count
from esper.kasmina.blueprints import DEFAULT_REGISTRY
from esper.kasmina.hosts import CNNHost, TransformerHost
from esper.kasmina.model import MorphogeneticModel
from esper.kasmina.state import LifecycleConfig
from esper.leyline import CANONICAL_SLOTS, SeedStage
from esper.tolaria import TrainState, train_step

BLENDS = ("linear", "sigmoid", "gated")
CASES = [
    (topology, name, slot, size)
    for topology, sizes in (("cnn", (8, 16)), ("transformer", (32, 64)))
    for name in DEFAULT_REGISTRY.names(topology)
    for slot in CANONICAL_SLOTS
    for size in sizes
]


def _host(topology: str, size: int, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    if topology == "cnn":
        return CNNHost(in_channels=3, num_classes=5, channels=(size, 2 * size, 2 * size))
    return TransformerHost(vocab_size=40, n_embd=size, n_head=4, n_layer=3, block_size=12, dropout=0.0)


def _model(topology: str, size: int) -> MorphogeneticModel:
    return MorphogeneticModel(_host(topology, size), slots=list(CANONICAL_SLOTS), lifecycle=LifecycleConfig())


def _batch(topology: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    if topology == "cnn":
        return torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 5, (4,), generator=g)
    return torch.randint(0, 40, (2, 12), generator=g), torch.randint(0, 40, (2, 12), generator=g)


def _loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def _germinate(m: MorphogeneticModel, name: str, slot: str, blend: str) -> None:
    m.germinate_seed(name, "seed", slot=slot, blend_id=blend, baseline_accuracy=10.0, epoch=1)
    m.step_epoch(1)  # G1: GERMINATED -> TRAINING
    assert m.slot(slot).state.stage == SeedStage.TRAINING  # type: ignore[union-attr]


def _force_blending(m: MorphogeneticModel, slot: str, alpha: float) -> None:
    state = m.slot(slot).state
    assert state is not None
    state.stage, state.alpha = SeedStage.BLENDING, alpha


@pytest.mark.parametrize(("topology", "name", "slot", "size"), CASES)
def test_shape_finite_and_param_count(topology: str, name: str, slot: str, size: int) -> None:
    m = _model(topology, size)
    channels = m.host.segment_channels[slot]
    for blend in BLENDS:
        _germinate(m, name, slot, blend)
        s = m.slot(slot)
        expected = DEFAULT_REGISTRY.get(topology, name).param_count(channels)
        expected += gated_blend_param_count(channels) if blend == "gated" else 0
        assert s.seed_param_count == expected == s.to_report().metrics.seed_param_count  # type: ignore[union-attr]
        h = torch.randn(2, channels, 4, 4) if topology == "cnn" else torch.randn(2, 6, channels)
        out = s.seed(h)  # type: ignore[misc]
        assert out.shape == h.shape and torch.isfinite(out).all()
        m.cull_seed(slot=slot, reason="test", epoch=1)


@pytest.mark.parametrize(("topology", "name", "slot", "size"), CASES)
def test_alpha_zero_preserves_host_function(topology: str, name: str, slot: str, size: int) -> None:
    m = _model(topology, size)
    x, _ = _batch(topology)
    m.eval()
    host_out = m.host(x)
    for blend in BLENDS:
        _germinate(m, name, slot, blend)
        assert torch.equal(m(x), host_out)  # TRAINING: isolated, the slot outputs the host activation
        _force_blending(m, slot, 0.0)
        assert torch.equal(m(x), host_out)  # BLENDING at alpha 0
        m.cull_seed(slot=slot, reason="test", epoch=1)


def _task_type(topology: str) -> str:
    return "classification" if topology == "cnn" else "lm"


def _step_gradients(m: MorphogeneticModel, topology: str) -> dict[str, torch.Tensor | None]:
    """Every parameter's gradient as one real train step sees it (captured by a post-backward hook, i.e. after the
    main backward and the incubator, before the optimizer step), by parameter name."""
    x, y = _batch(topology)
    spec = OptimizerSpec(name="sgd", lr=0.01)
    ts = TrainState(m, spec, spec, _task_type(topology), torch.device("cpu"))  # type: ignore[arg-type]
    seen: dict[str, torch.Tensor | None] = {}

    def capture(state: TrainState) -> None:
        seen.update({n: None if p.grad is None else p.grad.clone() for n, p in state.model.named_parameters()})

    ts.post_backward_hooks.append(capture)
    train_step(ts, x, y)
    return seen


@pytest.mark.parametrize(("topology", "name", "slot", "size"), CASES)
def test_training_isolation(topology: str, name: str, slot: str, size: int) -> None:
    """A TRAINING seed leaves the host's gradients bit-identical to the host's alone and still gets a gradient
    (from the incubator: the main forward does not contain it)."""
    plain = _step_gradients(_model(topology, size), topology)
    seeded_model = _model(topology, size)
    _germinate(seeded_model, name, slot, "sigmoid")
    seeded = _step_gradients(seeded_model, topology)
    host = [n for n in plain if n.startswith("host.")]
    assert host and all(plain[n] is not None for n in host)
    for n in host:
        assert torch.equal(plain[n], seeded[n]), n  # type: ignore[arg-type]
    seed_grads = [seeded[n] for n, _ in seeded_model.seed_slots[slot].named_parameters(prefix=f"seed_slots.{slot}")]
    assert all(g is not None for g in seed_grads)
    if seed_grads:
        assert sum(float(g.abs().sum()) for g in seed_grads if g is not None) > 0


def _in_place_loss(m: MorphogeneticModel, topology: str, slot: str) -> torch.Tensor:
    """The task loss of a naive training-mode forward in which `slot` outputs its seed's output on the detached host
    activation and every other slot what it computes; the host's BatchNorm layers after the slot normalize with the
    batch's statistics without tracking them (before it they are in training mode anyway)."""
    x, y = _batch(topology)
    norms = [b for b in m.host.modules() if isinstance(b, torch.nn.BatchNorm2d)]
    prev, prev_slot = x, None
    try:
        for s in m.slot_ids:
            h = m.segments.forward_to_segment(s, prev, from_segment=prev_slot)
            seed = m.slot(s).seed
            if s == slot:
                assert seed is not None
                prev = seed(h.detach())
                for b in norms:
                    b.track_running_stats = False
            else:
                prev = m.slot(s)(h)
            prev_slot = s
        out = m.segments.forward_from_segment(m.slot_ids[-1], prev)
    finally:
        for b in norms:
            b.track_running_stats = True
    return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


@pytest.mark.parametrize(("topology", "name", "slot", "size"), CASES)
def test_incubator_gradient_is_the_gradient_of_the_loss_with_the_seed_in_place(topology: str, name: str, slot: str,
                                                                                size: int) -> None:
    """The seed's gradient in a train step equals d(loss of the model with the seed's output in place)/d(seed
    parameters), with another TRAINING seed and a blended seed around it as they are; the other TRAINING seed gets
    its own in-place gradient, not one that depends on `slot`'s seed."""
    others = [s for s in CANONICAL_SLOTS if s != slot]
    m = _model(topology, size)
    _germinate(m, name, slot, "gated")
    _perturb(m, slot)
    _germinate(m, "attention", others[0], "linear")
    _force_blending(m, others[0], 0.6)
    _germinate(m, "attention", others[1], "linear")
    _perturb(m, others[1])
    m.train()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    grads = _step_gradients(m, topology)
    m.load_state_dict(before)  # the step moved the parameters; the naive forward needs the ones the step saw
    for s in (slot, others[1]):
        params = dict(m.seed_slots[s].named_parameters(prefix=f"seed_slots.{s}"))
        seed_params = {n: p for n, p in params.items() if ".seed." in n}
        gate_params = [n for n in params if ".gate." in n]
        assert all(grads[n] is None for n in gate_params)  # the gate has no part in TRAINING
        if not seed_params:
            continue
        naive = torch.autograd.grad(_in_place_loss(m, topology, s), list(seed_params.values()))
        for (n, _), g in zip(seed_params.items(), naive, strict=True):
            assert grads[n] is not None and torch.allclose(grads[n], g, rtol=1e-4, atol=1e-7), n  # type: ignore[arg-type]
        if name != "noop" and s == slot:
            assert any(float(g.abs().sum()) > 0 for g in naive)  # the comparison can fail


@pytest.mark.parametrize("slot", ["early", "mid"])  # the late slot of this host has no BatchNorm after it
def test_incubator_leaves_batchnorm_statistics_of_the_host_alone(slot: str) -> None:
    """BatchNorm running statistics (and batch counters) after a train step with a TRAINING seed are those of a step
    of the host alone: only the main forward updates them."""
    plain = _model("cnn", 8)
    seeded = _model("cnn", 8)
    _germinate(seeded, "conv_light", slot, "linear")
    _perturb(seeded, slot)
    _step_gradients(plain, "cnn")
    _step_gradients(seeded, "cnn")
    buffers = [(n, b) for n, b in plain.host.named_buffers() if "running" in n or "num_batches" in n]
    assert buffers and int(dict(buffers)["blocks.0.1.num_batches_tracked"]) == 1
    seeded_buffers = dict(seeded.host.named_buffers())
    for n, b in buffers:
        assert torch.equal(b, seeded_buffers[n]), n


@pytest.mark.parametrize(("topology", "name", "slot", "size"), CASES)
def test_fossilized_seed_trains_with_host_and_round_trips(topology: str, name: str, slot: str, size: int) -> None:
    x, y = _batch(topology)
    for blend in BLENDS:
        m = _model(topology, size)
        _germinate(m, name, slot, blend)
        _force_blending(m, slot, 1.0)
        m.eval()
        blended = m(x)
        state = m.slot(slot).state
        assert state is not None
        state.stage = SeedStage.PROBATIONARY
        m.slot(slot).set_counterfactual(2.0)
        assert m.fossilize_seed(slot=slot, epoch=2).passed
        assert torch.equal(m(x), blended)

        fresh = _model(topology, size)
        fresh.load_state(m.export_state())
        fresh.eval()
        assert torch.equal(fresh(x), blended)

        m.train()
        m.zero_grad(set_to_none=True)
        _loss(m(x), y).backward()
        first_block = next(m.host.blocks[0].parameters())  # type: ignore[index]
        assert first_block.grad is not None and first_block.grad.abs().sum() > 0  # upstream host layers train

        ts = TrainState(m, OptimizerSpec(name="sgd", lr=0.01), OptimizerSpec(name="sgd", lr=0.01), "classification",
                        torch.device("cpu"))
        host_ids = {id(p) for g in ts.host_optimizer.param_groups for p in g["params"]}
        assert {id(p) for p in m.seed_parameters(slot)} <= host_ids and not ts.seed_optimizers


@pytest.mark.parametrize(("topology", "name", "slot", "size"), CASES)
def test_cull_restores_host_exactly(topology: str, name: str, slot: str, size: int) -> None:
    x, _ = _batch(topology)
    for blend in BLENDS:
        m = _model(topology, size)
        keys = set(m.state_dict())
        m.eval()
        host_out = m(x)
        _germinate(m, name, slot, blend)
        _force_blending(m, slot, 0.7)
        assert m.cull_seed(slot=slot, reason="test", epoch=1)
        assert torch.equal(m(x), host_out)
        assert set(m.state_dict()) == keys


@pytest.mark.parametrize("topology", ["cnn", "transformer"])
def test_gated_parameters_are_in_the_seed_optimizer(topology: str) -> None:
    m = _model(topology, 32 if topology == "transformer" else 8)
    name = DEFAULT_REGISTRY.names(topology)[1]
    _germinate(m, name, "mid", "gated")
    sgd = OptimizerSpec(name="sgd", lr=0.01)
    ts = TrainState(m, sgd, sgd, "classification", torch.device("cpu"))
    gate = m.slot("mid").gate
    assert gate is not None
    _, opt = ts.seed_optimizers["mid"]
    opt_ids = {id(p) for g in opt.param_groups for p in g["params"]}
    assert {id(p) for p in gate.parameters()} <= opt_ids


def _perturb(m: MorphogeneticModel, slot: str) -> None:
    """Move the seed off its initialization (LoRA starts as the identity) so that probing it changes the logits."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in m.seed_parameters(slot):
            p.add_(0.5 * torch.randn(p.shape, generator=g))


def _naive(m: MorphogeneticModel, x: torch.Tensor, outputs: dict[str, str]) -> torch.Tensor:
    """A full chained forward where slot k outputs its seed's output ("probe"), its host activation ("ablate"), or
    what the slot computes (any slot not in `outputs`). After a probed or ablated slot the host's BatchNorm layers
    normalize with the batch's own statistics, as they would once re-estimated for the changed activations."""
    norms = [b for b in m.host.modules() if isinstance(b, torch.nn.BatchNorm2d)]
    prev, prev_slot = x, None
    try:
        for s in m.slot_ids:
            h = m.segments.forward_to_segment(s, prev, from_segment=prev_slot)
            seed = m.slot(s).seed
            how = outputs.get(s)
            if how == "probe":
                assert seed is not None
                prev = seed(h)
            else:
                prev = h if how == "ablate" else m.slot(s)(h)
            if how is not None:
                for b in norms:
                    b.training, b.track_running_stats = True, False
            prev_slot = s
        return m.segments.forward_from_segment(m.slot_ids[-1], prev)
    finally:
        for b in norms:
            b.training, b.track_running_stats = False, True


@pytest.mark.parametrize(("topology", "name", "slot", "size"), CASES)
def test_probe_equals_naive_forward_with_the_seed_in_place(topology: str, name: str, slot: str, size: int) -> None:
    """Probe logits are bit-identical to a forward whose `slot` outputs its TRAINING seed's output, with the other
    slots as they are: one holding a blended seed (ablated in the same call), one another TRAINING seed. The model's
    state (BatchNorm running statistics and modes included) is unchanged."""
    x, _ = _batch(topology)
    others = [s for s in CANONICAL_SLOTS if s != slot]
    other_blueprint = "attention"
    for blend in BLENDS:
        m = _model(topology, size)
        _germinate(m, name, slot, blend)
        _perturb(m, slot)
        _germinate(m, other_blueprint, others[0], "gated")
        _force_blending(m, others[0], 0.6)
        _germinate(m, other_blueprint, others[1], "linear")
        _perturb(m, others[1])
        m.eval()
        before = {k: v.clone() for k, v in m.state_dict().items()}
        with torch.no_grad():
            full, ablated, probed = m.forward_with_counterfactuals(x, ablate=(others[0],), probe=(slot, others[1]))
            after = m.state_dict()
            assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
            assert not any(module.training for module in m.modules())
            assert torch.equal(full, m(x))
            assert torch.equal(probed[slot], _naive(m, x, {slot: "probe"}))
            assert torch.equal(probed[others[1]], _naive(m, x, {others[1]: "probe"}))
            assert torch.equal(ablated[others[0]], _naive(m, x, {others[0]: "ablate"}))
            if name != "noop":  # a probe that changes nothing would pass the equality above trivially
                assert not torch.equal(probed[slot], full)


@pytest.mark.parametrize("topology", ["cnn", "transformer"])
def test_probe_rejects_slots_without_a_training_seed(topology: str) -> None:
    m = _model(topology, 32 if topology == "transformer" else 8)
    x, _ = _batch(topology)
    with pytest.raises(ValueError, match="Slot 'mid' has no TRAINING seed to probe \\(empty\\)"):
        m.forward_with_counterfactuals(x, probe=("mid",))
    _germinate(m, "norm", "mid", "linear")
    _force_blending(m, "mid", 0.5)
    with pytest.raises(ValueError, match="no TRAINING seed to probe \\(BLENDING\\)"):
        m.forward_with_counterfactuals(x, probe=("mid",))
