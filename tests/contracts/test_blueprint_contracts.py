"""Blueprint contract tests over every registered blueprint x slot x topology x size (DESIGN §11.4).

A new blueprint registered in the default registry is covered automatically.
"""

from __future__ import annotations

import pytest
import torch

from esper.kasmina.blending import gated_blend_param_count
from esper.kasmina.blueprints import DEFAULT_REGISTRY
from esper.kasmina.hosts import CNNHost, TransformerHost
from esper.kasmina.model import MorphogeneticModel
from esper.kasmina.state import LifecycleConfig
from esper.leyline import CANONICAL_SLOTS, SeedStage
from esper.runtime.optim import OptimizerSpec
from esper.tolaria import TrainState

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
        assert torch.equal(m(x), host_out)  # TRAINING: STE incubator
        _force_blending(m, slot, 0.0)
        assert torch.equal(m(x), host_out)  # BLENDING at alpha 0
        m.cull_seed(slot=slot, reason="test", epoch=1)


@pytest.mark.parametrize(("topology", "name", "slot", "size"), CASES)
def test_training_isolation(topology: str, name: str, slot: str, size: int) -> None:
    x, y = _batch(topology)
    plain = _model(topology, size)
    _loss(plain(x), y).backward()
    seeded = _model(topology, size)
    _germinate(seeded, name, slot, "sigmoid")
    _loss(seeded(x), y).backward()
    for (n1, p1), (n2, p2) in zip(plain.host.named_parameters(), seeded.host.named_parameters(), strict=True):
        assert n1 == n2 and p1.grad is not None and p2.grad is not None
        assert torch.equal(p1.grad, p2.grad), n1
    params = seeded.seed_parameters(slot)
    assert all(p.grad is not None for p in params)
    if params:
        assert sum(float(p.grad.abs().sum()) for p in params if p.grad is not None) > 0


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

        ts = TrainState(m, OptimizerSpec("sgd", 0.01), OptimizerSpec("sgd", 0.01), "classification",
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
    ts = TrainState(m, OptimizerSpec("sgd", 0.01), OptimizerSpec("sgd", 0.01), "classification", torch.device("cpu"))
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
