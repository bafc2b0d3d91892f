"""Blueprint modules: structure, initialization and causality of the catalog."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from esper.kasmina.blueprints import DEFAULT_REGISTRY
from esper.kasmina.blueprints.cnn import SeedConvBlock, group_count
from esper.kasmina.blueprints.transformer import AttentionSeed, LoRAAdapter

TRANSFORMER_NAMES = DEFAULT_REGISTRY.names("transformer")


@pytest.mark.parametrize(
    ("channels", "groups"),
    [(1, 1), (3, 1), (4, 4), (8, 8), (16, 1), (32, 2), (48, 2), (64, 4), (128, 8), (256, 16), (512, 32), (1024, 32)],
)
def test_group_count(channels: int, groups: int) -> None:
    assert group_count(channels) == groups


def test_seed_conv_block_structure() -> None:
    block = SeedConvBlock(64)
    assert block.conv.bias is None and block.conv.kernel_size == (3, 3)
    assert block.norm.num_groups == 4
    assert bool((block(torch.randn(2, 64, 4, 4)) >= 0).all())  # ends in ReLU


@pytest.mark.parametrize(
    ("topology", "name", "channels", "shape"),
    [("cnn", n, 16, (2, 16, 6, 6)) for n in DEFAULT_REGISTRY.names("cnn")]
    + [("transformer", n, 32, (2, 7, 32)) for n in TRANSFORMER_NAMES],
)
def test_only_noop_and_lora_start_as_identity(topology: str, name: str, channels: int, shape: tuple[int, ...]) -> None:
    """Seeds use standard init, so all but noop and the zero-init LoRA adapter change their input from the start."""
    x = torch.randn(*shape)
    with torch.no_grad():
        y = DEFAULT_REGISTRY.create(topology, name, channels)(x)
    assert torch.equal(y, x) == (name in ("noop", "lora"))


def test_lora_zero_init_is_only_the_up_projection() -> None:
    lora = LoRAAdapter(64)
    assert torch.count_nonzero(lora.up.weight) == 0
    assert lora.down.weight.std().item() == pytest.approx(0.02, rel=0.15)
    assert lora.down.bias is None and lora.up.bias is None


@pytest.mark.parametrize("name", ["attention", "mlp"])
def test_transformer_linear_init(name: str) -> None:
    module = DEFAULT_REGISTRY.create("transformer", name, 128)
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 2
    for linear in linears:
        assert linear.weight.std().item() == pytest.approx(0.02, rel=0.1)
        assert linear.bias is not None and torch.count_nonzero(linear.bias) == 0


def test_norm_strength_starts_at_one() -> None:
    for topology, channels in (("cnn", 8), ("transformer", 32)):
        module = DEFAULT_REGISTRY.create(topology, "norm", channels)
        assert torch.equal(module.get_parameter("strength"), torch.tensor(1.0))


def test_cnn_norm_uses_min_32_groups() -> None:
    assert DEFAULT_REGISTRY.create("cnn", "norm", 8).get_submodule("norm").num_groups == 8
    assert DEFAULT_REGISTRY.create("cnn", "norm", 64).get_submodule("norm").num_groups == 32


def test_squeeze_excitation_only_rescales_channels() -> None:
    se = DEFAULT_REGISTRY.create("cnn", "attention", 16)
    x = torch.randn(2, 16, 5, 5)
    with torch.no_grad():
        scale = se(x) / x
    assert bool(((scale > 0) & (scale < 2)).all())
    torch.testing.assert_close(scale, scale[:, :, :1, :1].expand_as(scale))


def test_squeeze_excitation_gate_is_centred_on_the_identity() -> None:
    """A zero pre-activation gives gate 1, and a fresh seed stays close to it instead of halving its input."""
    se = DEFAULT_REGISTRY.create("cnn", "attention", 16)
    x = torch.relu(torch.randn(4, 16, 6, 6))  # a host activation after ReLU, as the CNN slots see it
    with torch.no_grad():
        fresh = se(x) / x.clamp_min(1e-6)
        nn.init.zeros_(se.get_parameter("fc2.weight"))
        assert torch.equal(se(x), x)
    gate = fresh[x > 0]
    assert gate.min() > 0.5 and gate.max() < 1.5 and abs(float(gate.mean()) - 1.0) < 0.1


def test_squeeze_excitation_has_a_gradient_when_every_bottleneck_unit_is_negative() -> None:
    """The bottleneck activation must not be dead: a ReLU there gave an exactly zero gradient to every weight."""
    se = DEFAULT_REGISTRY.create("cnn", "attention", 8)
    with torch.no_grad():
        se.get_parameter("fc1.weight").copy_(-se.get_parameter("fc1.weight").abs())  # all pre-activations < 0
    x = torch.relu(torch.randn(2, 8, 4, 4)) + 0.1
    (se(x) * torch.randn(2, 8, 4, 4)).sum().backward()
    for name, p in se.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_attention_blueprint_validates_width() -> None:
    with pytest.raises(ValueError, match="divisible by 4 heads"):
        AttentionSeed(30)
    with pytest.raises(ValueError, match="divisible by 4 heads"):
        DEFAULT_REGISTRY.create("transformer", "attention", 10)


@pytest.mark.parametrize("name", TRANSFORMER_NAMES)
def test_transformer_blueprints_are_causal(name: str) -> None:
    module = DEFAULT_REGISTRY.create("transformer", name, 32)
    if name == "lora":
        nn.init.normal_(module.get_parameter("up.weight"), std=0.02)  # make the adapter non-trivial
    x = torch.randn(2, 12, 32)
    changed = x.clone()
    changed[:, 7] += 1.0
    with torch.no_grad():
        y, y_changed = module(x), module(changed)
    torch.testing.assert_close(y[:, :7], y_changed[:, :7], rtol=0, atol=1e-6)
    assert not torch.allclose(y[:, 7], y_changed[:, 7])
