"""FixedModulesHost: a host with blueprint modules built in, as the `fixed:` baseline trains it."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor, nn

from esper.data.tasks import get_task_spec
from esper.kasmina import (
    DEFAULT_REGISTRY,
    FixedModulesHost,
    MorphogeneticModel,
    SegmentedHost,
    build_fixed_host,
    slot_boundaries,
)
from esper.kasmina.state import LifecycleConfig
from esper.leyline import CANONICAL_SLOTS, SeedStage

MODULES: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("synthetic", (("mid", "norm"),)),
    ("synthetic", (("early", "conv_light"), ("late", "attention"))),
    ("synthetic_text", (("early", "lora"),)),
    ("synthetic_text", (("mid", "mlp"), ("late", "attention"))),
)
CASES = [pytest.param(task, modules, id=f"{task}-" + ",".join(f"{b}@{s}" for s, b in modules))
         for task, modules in MODULES]


def _input(task: str) -> Tensor:
    gen = torch.Generator().manual_seed(5)
    if task == "synthetic":
        return torch.randn(4, 3, 32, 32, generator=gen)
    return torch.randint(0, 64, (2, 16), generator=gen)


class _HandBuilt(nn.Module):
    """The host's blocks run one by one, with each module called on the activation right after its slot's block."""

    def __init__(self, host: SegmentedHost, modules: dict[str, nn.Module]) -> None:
        super().__init__()
        self.host = host
        self.modules_at = nn.ModuleDict(modules)

    def forward(self, x: Tensor) -> Tensor:
        host = self.host
        after_block = dict(zip(slot_boundaries(len(host.blocks)), CANONICAL_SLOTS, strict=True))
        h = host._enter(x)
        for i, block in enumerate(host.blocks):
            h = block(h)
            slot = after_block.get(i, "")
            if slot in self.modules_at:
                h = self.modules_at[slot](h)
        return host._exit(h)


def _fixed(task: str, modules: tuple[tuple[str, str], ...], seed: int = 0) -> FixedModulesHost:
    return build_fixed_host(get_task_spec(task).host_factory(), modules, seed=seed).eval()


@pytest.mark.parametrize(("task", "modules"), CASES)
def test_fixed_host_equals_the_host_built_by_hand_with_the_same_weights(
        task: str, modules: tuple[tuple[str, str], ...]) -> None:
    fixed = _fixed(task, modules)
    host = get_task_spec(task).host_factory()
    assert isinstance(host, SegmentedHost)
    hand = _HandBuilt(host, {s: DEFAULT_REGISTRY.create(host.topology, b, host.segment_channels[s])
                             for s, b in modules}).eval()
    hand.host.load_state_dict(fixed.inner.state_dict())
    for slot, _ in modules:
        hand.modules_at[slot].load_state_dict(fixed.fixed[slot].state_dict())
    x = _input(task)
    with torch.no_grad():
        expected = hand(x)
        torch.testing.assert_close(fixed(x), expected)
        model = MorphogeneticModel(fixed, slots=CANONICAL_SLOTS, lifecycle=LifecycleConfig()).eval()
        torch.testing.assert_close(model(x), expected)


@pytest.mark.parametrize(("task", "modules"), CASES)
def test_every_segmented_path_computes_the_same_function(task: str, modules: tuple[tuple[str, str], ...]) -> None:
    """Counterfactuals restart from cached activations, so every split must agree with the full forward."""
    fixed = _fixed(task, modules)
    x = _input(task)
    with torch.no_grad():
        full = fixed(x)
        for i, a in enumerate(CANONICAL_SLOTS):
            at_a = fixed.forward_to_segment(a, x)
            torch.testing.assert_close(fixed.forward_from_segment(a, at_a), full, rtol=0, atol=0)
            for b in CANONICAL_SLOTS[i:]:
                torch.testing.assert_close(fixed.forward_to_segment(b, at_a, from_segment=a),
                                           fixed.forward_to_segment(b, x), rtol=0, atol=0)


def test_a_fixed_module_computes_bit_for_bit_what_a_fully_blended_seed_does() -> None:
    """Bit for bit, not only close: h + (s − h) is not always s in floating point (here: a squeeze-excitation seed
    that scales some activations down), so the module is combined with the activation by the slot's own op."""
    host = get_task_spec("synthetic").host_factory()
    grown = MorphogeneticModel(copy.deepcopy(host), slots=CANONICAL_SLOTS, lifecycle=LifecycleConfig()).eval()
    grown.germinate_seed("attention", "s1", slot="mid", blend_id="linear", baseline_accuracy=0.0, epoch=1)
    slot = grown.slot("mid")
    assert slot.state is not None and slot.seed is not None
    slot.state.stage, slot.state.alpha = SeedStage.FOSSILIZED, 1.0  # straight to the end of its lifecycle
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in slot.seed.parameters():  # weights a module that has trained may hold
            p.add_(torch.randn(p.shape, generator=gen))
    fixed = MorphogeneticModel(FixedModulesHost(copy.deepcopy(host), {"mid": copy.deepcopy(slot.seed)}),
                               slots=CANONICAL_SLOTS, lifecycle=LifecycleConfig()).eval()
    x = _input("synthetic")
    with torch.no_grad():
        h = grown.host.forward_to_segment("mid", x)
        assert not torch.equal(slot(h), slot.seed(h))  # the case where the combining op matters
        assert torch.equal(fixed(x), grown(x))


@pytest.mark.parametrize(("task", "modules"), CASES)
def test_parameters_are_the_host_and_its_modules_all_trained_by_the_host_optimizer(
        task: str, modules: tuple[tuple[str, str], ...]) -> None:
    fixed = _fixed(task, modules)
    plain = get_task_spec(task).host_factory()
    channels = fixed.segment_channels
    added = sum(DEFAULT_REGISTRY.get(fixed.topology, b).param_count(channels[s]) for s, b in modules)
    assert added > 0
    model = MorphogeneticModel(fixed, slots=CANONICAL_SLOTS, lifecycle=LifecycleConfig())
    assert model.host_param_count == sum(p.numel() for p in plain.parameters()) + added
    assert model.total_params == model.host_param_count  # no seeds: the modules are host
    host_params = {id(p) for p in model.host_parameters()}
    assert all(id(p) in host_params for s, _ in modules for p in fixed.fixed[s].parameters())


def test_initialization_is_seeded_and_leaves_the_host_and_the_callers_rng_alone() -> None:
    factory = get_task_spec("synthetic").host_factory
    torch.manual_seed(11)
    plain = factory()
    after_plain = torch.rand(3)
    torch.manual_seed(11)
    fixed = build_fixed_host(factory(), (("early", "conv_light"), ("late", "attention")), seed=7)
    assert torch.equal(torch.rand(3), after_plain)
    assert all(torch.equal(a, b) for a, b in zip(fixed.inner.state_dict().values(), plain.state_dict().values(),
                                                 strict=True))
    alone = build_fixed_host(factory(), (("early", "conv_light"),), seed=7)
    other_seed = build_fixed_host(factory(), (("early", "conv_light"),), seed=8)
    weight = fixed.fixed["early"].block.conv.weight
    assert torch.equal(weight, alone.fixed["early"].block.conv.weight)  # independent of the other modules
    assert not torch.equal(weight, other_seed.fixed["early"].block.conv.weight)


def test_bad_requests_are_refused() -> None:
    host = get_task_spec("synthetic").host_factory()
    with pytest.raises(ValueError, match="A segment holds one fixed module"):
        build_fixed_host(host, (("mid", "norm"), ("mid", "attention")), seed=0)
    with pytest.raises(ValueError, match=r"Unknown segment\(s\) \['deep'\]"):
        build_fixed_host(host, (("deep", "norm"),), seed=0)
    with pytest.raises(ValueError, match="Unknown blueprint 'lora' for topology 'cnn'"):
        build_fixed_host(host, (("mid", "lora"),), seed=0)
    with pytest.raises(TypeError, match="does not implement HostProtocol"):
        FixedModulesHost(nn.Linear(2, 2), {})
    fixed = build_fixed_host(host, (("mid", "norm"),), seed=0)
    with pytest.raises(ValueError, match="Unknown segment 'deep'"):
        fixed.forward_to_segment("deep", torch.zeros(1, 3, 32, 32))
    with pytest.raises(ValueError, match="from_segment 'late' lies after segment 'early'"):
        fixed.forward_to_segment("early", torch.zeros(1, 8, 16, 16), from_segment="late")
