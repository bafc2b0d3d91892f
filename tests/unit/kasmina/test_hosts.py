"""Hosts: shapes, parameter counts, slot positions, segment invariants, validation, tying, one segmented forward."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import pytest
import torch
from torch import nn

from esper.kasmina.hosts import CNNHost, HostProtocol, ResNetHost, SegmentedHost, TransformerHost, slot_boundaries

SEGMENTS = ("early", "mid", "late")


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def cnn_formula(in_channels: int, channels: Sequence[int], classes: int = 10) -> int:
    """CNN host: Σ_i (9·c_{i−1}·c_i + 2·c_i) + c_last·K + K."""
    widths = (in_channels, *channels)
    convs = sum(9 * a * b + 2 * b for a, b in itertools.pairwise(widths))
    return convs + widths[-1] * classes + classes


def transformer_formula(vocab: int, dim: int, layers: int, block: int) -> int:
    """Transformer host: V·D + T_max·D + L·(12·D² + 13·D) + 2·D (tied head counted once)."""
    return vocab * dim + block * dim + layers * (12 * dim * dim + 13 * dim) + 2 * dim


def tiny_lm(n_layer: int = 3) -> TransformerHost:
    return TransformerHost(vocab_size=257, n_embd=64, n_head=4, n_layer=n_layer, block_size=64).eval()


# ----------------------------------------------------------------------------------------------- slot positions


@pytest.mark.parametrize(("n", "expected"), [(3, (0, 1, 2)), (4, (0, 1, 3)), (5, (0, 2, 4)), (6, (1, 3, 5))])
def test_slot_boundaries(n: int, expected: tuple[int, ...]) -> None:
    assert slot_boundaries(n) == expected


@pytest.mark.parametrize("n", [0, 1, 2])
def test_slot_boundaries_rejects_shallow_hosts(n: int) -> None:
    with pytest.raises(ValueError, match="at least 3 blocks"):
        slot_boundaries(n)


# ----------------------------------------------------------------------------------------------------- CNNHost

CNN_ROWS = [
    # (in_channels, channels, pool, image side, params, slot shapes without batch)
    (3, (8, 16, 32), None, 32, 6_418, [(8, 16, 16), (16, 8, 8), (32, 4, 4)]),
    (1, (8, 16, 32), None, 28, 6_274, [(8, 14, 14), (16, 7, 7), (32, 3, 3)]),
    (3, (8, 16, 32, 64, 128), None, 32, 99_922, [(8, 16, 16), (32, 4, 4), (128, 1, 1)]),
    (3, (64, 128, 256), (True, True, False), 32, 373_834, [(64, 16, 16), (128, 8, 8), (256, 8, 8)]),
    (
        3,
        (64, 64, 128, 128, 256),
        (False, True, False, True, False),
        32,
        558_538,
        [(64, 32, 32), (128, 16, 16), (256, 8, 8)],
    ),
]


@pytest.mark.parametrize(("in_ch", "channels", "pool", "side", "params", "shapes"), CNN_ROWS)
def test_cnn_host_table_rows(
    in_ch: int,
    channels: tuple[int, ...],
    pool: tuple[bool, ...] | None,
    side: int,
    params: int,
    shapes: list[tuple[int, int, int]],
) -> None:
    host = CNNHost(in_channels=in_ch, channels=channels, pool=pool).eval()
    assert n_params(host) == params == cnn_formula(in_ch, channels)
    x = torch.randn(2, in_ch, side, side)
    assert host(x).shape == (2, 10)
    for segment, shape in zip(SEGMENTS, shapes):
        assert host.forward_to_segment(segment, x).shape == (2, *shape)
    assert dict(host.segment_channels) == {s: shape[0] for s, shape in zip(SEGMENTS, shapes)}


def test_cnn_host_wide_and_default_param_counts() -> None:
    wide = CNNHost(channels=(128, 256, 512), pool=(True, True, False))
    assert n_params(wide) == 1_484_938 == cnn_formula(3, (128, 256, 512))
    assert n_params(CNNHost()) == cnn_formula(3, (32, 64, 128))
    assert n_params(CNNHost(num_classes=7)) == cnn_formula(3, (32, 64, 128), classes=7)


def test_cnn_host_validation() -> None:
    with pytest.raises(ValueError, match="at least 3 blocks"):
        CNNHost(channels=(8, 16))
    with pytest.raises(ValueError, match="pool has 2 entries"):
        CNNHost(channels=(8, 16, 32), pool=(True, False))


def test_cnn_block_structure() -> None:
    host = CNNHost(channels=(8, 16, 32), pool=(True, False, True))
    conv, bn, relu, *rest = host.blocks[0]
    assert isinstance(conv, nn.Conv2d) and conv.bias is None and conv.kernel_size == (3, 3) and conv.padding == (1, 1)
    assert isinstance(bn, nn.BatchNorm2d) and isinstance(relu, nn.ReLU)
    assert [type(m) for m in rest] == [nn.MaxPool2d]
    assert len(host.blocks[1]) == 3


# --------------------------------------------------------------------------------------------------- ResNetHost


@pytest.mark.parametrize(("depth", "params", "stages"),
                         [(18, 11_173_962, [2, 2, 2, 2]), (34, 21_282_122, [3, 4, 6, 3])])
def test_resnet_host_params_stages_and_slot_channels(depth: int, params: int, stages: list[int]) -> None:
    host = ResNetHost(depth).eval()
    assert n_params(host) == params and [len(stage) for stage in host.blocks] == stages
    assert host(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert list(host.segment_channels.items()) == list(zip(SEGMENTS, (64, 128, 512)))
    assert ResNetHost(depth, num_classes=7, in_channels=1).eval()(torch.randn(2, 1, 28, 28)).shape == (2, 7)


def test_resnet_slots_sit_after_stages_1_2_and_4() -> None:
    torch.manual_seed(0)
    host = ResNetHost(18).eval()
    x = torch.randn(2, 3, 32, 32)
    h = host.stem(x.contiguous(memory_format=torch.channels_last))
    stage_outputs = []
    for stage in host.blocks:
        h = stage(h)
        stage_outputs.append(h)
    for segment, stage in zip(SEGMENTS, (0, 1, 3)):
        assert torch.equal(host.forward_to_segment(segment, x), stage_outputs[stage])
    shapes = [tuple(host.forward_to_segment(s, x).shape) for s in SEGMENTS]
    assert shapes == [(2, 64, 32, 32), (2, 128, 16, 16), (2, 512, 4, 4)]


def test_resnet_blocks_use_projection_shortcuts_only_when_the_shape_changes() -> None:
    host = ResNetHost(34)
    first = [stage[0] for stage in host.blocks]
    assert isinstance(first[0].shortcut, nn.Identity)
    for block in first[1:]:
        conv, bn = block.shortcut
        assert conv.kernel_size == (1, 1) and conv.stride == (2, 2) and isinstance(bn, nn.BatchNorm2d)
    assert all(isinstance(stage[1].shortcut, nn.Identity) for stage in host.blocks)


def test_resnet_depth_validation() -> None:
    with pytest.raises(ValueError, match="Unsupported ResNet depth 50"):
        ResNetHost(50)


# ---------------------------------------------------------------------------------------------- TransformerHost


@pytest.mark.parametrize(
    ("dim", "layers", "block", "params"),
    [(256, 6, 256, 4_870_400), (64, 3, 64, 170_624)],
    ids=["tinystories", "synthetic_text"],
)
def test_transformer_host_table_rows(dim: int, layers: int, block: int, params: int) -> None:
    host = TransformerHost(vocab_size=257, n_embd=dim, n_head=4, n_layer=layers, block_size=block).eval()
    assert n_params(host) == params == transformer_formula(257, dim, layers, block)
    idx = torch.randint(0, 257, (2, 16))
    assert host(idx).shape == (2, 16, 257)
    for segment in SEGMENTS:
        assert host.forward_to_segment(segment, idx).shape == (2, 16, dim)
    assert list(host.segment_channels.items()) == [(s, dim) for s in SEGMENTS]


@pytest.mark.parametrize(("n_layer", "after"), [(3, (0, 1, 2)), (6, (1, 3, 5))])
def test_transformer_slots_sit_after_the_specified_layers(n_layer: int, after: tuple[int, ...]) -> None:
    host = TransformerHost(vocab_size=50, n_embd=32, n_head=4, n_layer=n_layer, block_size=16).eval()
    idx = torch.randint(0, 50, (2, 8))
    h = host.drop(host.tok_emb(idx) + host.pos_emb(torch.arange(8)))
    manual = []
    for i, block in enumerate(host.blocks):
        h = block(h)
        if i in after:
            manual.append(h)
    for segment, expected in zip(SEGMENTS, manual):
        assert torch.equal(host.forward_to_segment(segment, idx), expected)


def test_transformer_validation_errors() -> None:
    with pytest.raises(ValueError, match="n_layer"):
        TransformerHost(vocab_size=10, n_embd=32, n_head=4, n_layer=2, block_size=8)
    with pytest.raises(ValueError, match="divisible by n_head"):
        TransformerHost(vocab_size=10, n_embd=32, n_head=3, n_layer=3, block_size=8)
    with pytest.raises(ValueError, match="divisible by 4"):
        TransformerHost(vocab_size=10, n_embd=30, n_head=3, n_layer=3, block_size=8)


def test_sequence_longer_than_block_size_raises() -> None:
    host = TransformerHost(vocab_size=10, n_embd=32, n_head=4, n_layer=3, block_size=8)
    idx = torch.zeros(1, 9, dtype=torch.long)
    with pytest.raises(ValueError, match="Sequence length 9 exceeds block_size 8"):
        host(idx)
    with pytest.raises(ValueError, match="Sequence length 9 exceeds block_size 8"):
        host.forward_to_segment("early", idx)
    assert host(idx[:, :8]).shape == (1, 8, 10)


def test_weight_tying_shares_storage_and_counts_once() -> None:
    host = tiny_lm()
    assert host.head.weight is host.tok_emb.weight
    assert host.head.weight.data_ptr() == host.tok_emb.weight.data_ptr()
    names = [name for name, _ in host.named_parameters()]
    assert "tok_emb.weight" in names and "head.weight" not in names
    with torch.no_grad():
        host.tok_emb.weight[3].fill_(0.5)
    assert torch.equal(host.head.weight[3], torch.full((64,), 0.5))


def test_transformer_init() -> None:
    host = TransformerHost(vocab_size=257, n_embd=64, n_head=4, n_layer=6, block_size=64)
    block = host.blocks[0]
    assert block.attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert block.mlp.fc1.weight.std().item() == pytest.approx(0.02, rel=0.1)
    residual = 0.02 / math.sqrt(2 * 6)
    assert block.attn.proj.weight.std().item() == pytest.approx(residual, rel=0.1)
    assert block.mlp.fc2.weight.std().item() == pytest.approx(residual, rel=0.1)
    assert host.pos_emb.weight.std().item() == pytest.approx(0.02, rel=0.1)
    for name, p in host.named_parameters():
        if name.endswith("bias") and "ln" not in name:
            assert torch.count_nonzero(p) == 0, name


def test_transformer_is_causal() -> None:
    host = tiny_lm()
    idx = torch.randint(0, 257, (2, 16))
    changed = idx.clone()
    changed[:, 9] = (changed[:, 9] + 1) % 257
    out, out_changed = host(idx), host(changed)
    assert torch.equal(out[:, :9], out_changed[:, :9])
    assert not torch.allclose(out[:, 9:], out_changed[:, 9:])


# ------------------------------------------------------------------------------------ segment invariants (all)


HostCase = Callable[[], tuple[nn.Module, torch.Tensor]]

HOST_CASES: dict[str, HostCase] = {
    "cnn3": lambda: (CNNHost(channels=(8, 16, 32)).eval(), torch.randn(2, 3, 32, 32)),
    "cnn5": lambda: (CNNHost(channels=(8, 16, 32, 64, 128)).eval(), torch.randn(2, 3, 32, 32)),
    "resnet18": lambda: (ResNetHost(18).eval(), torch.randn(2, 3, 16, 16)),
    "lm3": lambda: (tiny_lm(), torch.randint(0, 257, (2, 16))),
    "lm5": lambda: (
        TransformerHost(vocab_size=50, n_embd=32, n_head=4, n_layer=5, block_size=16).eval(),
        torch.randint(0, 50, (2, 8)),
    ),
}


@pytest.mark.parametrize("case", list(HOST_CASES))
def test_segment_invariants(case: str) -> None:
    host, x = HOST_CASES[case]()
    assert isinstance(host, HostProtocol)
    full = host(x)
    for segment in SEGMENTS:
        assert torch.equal(host.forward_from_segment(segment, host.forward_to_segment(segment, x)), full)
    early = host.forward_to_segment("early", x)
    late = host.forward_to_segment("late", x)
    assert torch.equal(host.forward_to_segment("late", early, from_segment="early"), late)
    mid = host.forward_to_segment("mid", early, from_segment="early")
    assert torch.equal(mid, host.forward_to_segment("mid", x))
    assert torch.equal(host.forward_to_segment("late", mid, from_segment="mid"), late)
    assert torch.equal(host.forward_to_segment("mid", mid, from_segment="mid"), mid)


@pytest.mark.parametrize("case", list(HOST_CASES))
def test_segment_errors(case: str) -> None:
    host, x = HOST_CASES[case]()
    with pytest.raises(ValueError, match="Unknown segment 'middle'"):
        host.forward_to_segment("middle", x)
    early = host.forward_to_segment("early", x)
    with pytest.raises(ValueError, match="Unknown segment 'r0c1'"):
        host.forward_from_segment("r0c1", early)
    with pytest.raises(ValueError, match="Unknown segment 'first'"):
        host.forward_to_segment("late", early, from_segment="first")
    with pytest.raises(ValueError, match="lies after"):
        host.forward_to_segment("early", early, from_segment="mid")


def test_segment_channels_is_a_copy() -> None:
    host = CNNHost(channels=(8, 16, 32))
    channels = host.segment_channels
    assert isinstance(channels, dict)
    channels["early"] = 999
    assert host.segment_channels["early"] == 8


def test_every_host_is_a_segmented_host_with_one_segmented_forward() -> None:
    """The segmented forward is `SegmentedHost`'s alone: no host overrides it, so seeds meet every host the same way."""
    hosts = (CNNHost, ResNetHost, TransformerHost)
    assert all(issubclass(h, SegmentedHost) for h in hosts)
    for name in ("forward", "forward_to_segment", "forward_from_segment", "segment_channels"):
        assert all(getattr(h, name) is getattr(SegmentedHost, name) for h in hosts), name


def test_non_hosts_fail_the_protocol() -> None:
    assert not isinstance(nn.Linear(2, 2), HostProtocol)
