"""Blend schedules, the gated blend and the isolation ops."""

from __future__ import annotations

import itertools

import pytest
import torch

from esper import leyline
from esper.kasmina.blending import (
    BLEND_IDS,
    BLEND_SCHEDULES,
    GatedBlend,
    gated_blend_param_count,
    linear,
    schedule_alpha,
    sigmoid,
)
from esper.kasmina.isolation import blend_lerp

FIVE_STEPS = [0.2, 0.4, 0.6, 0.8, 1.0]


def test_blend_ids_are_leylines() -> None:
    assert BLEND_IDS is leyline.BLEND_IDS
    assert set(BLEND_SCHEDULES) == set(BLEND_IDS)


def test_linear_values() -> None:
    assert [linear(x) for x in FIVE_STEPS] == FIVE_STEPS


def test_sigmoid_five_step_values() -> None:
    values = [sigmoid(x) for x in FIVE_STEPS]
    assert values == pytest.approx([0.0242, 0.2301, 0.7699, 0.9758, 1.0], abs=1e-4)


@pytest.mark.parametrize("blend_id", BLEND_IDS)
def test_schedules_hit_the_end_points_exactly(blend_id: str) -> None:
    assert schedule_alpha(blend_id, 0.0) == 0.0
    assert schedule_alpha(blend_id, 1.0) == 1.0


@pytest.mark.parametrize("blend_id", BLEND_IDS)
def test_schedules_are_increasing(blend_id: str) -> None:
    values = [schedule_alpha(blend_id, i / 20) for i in range(21)]
    assert all(a < b for a, b in itertools.pairwise(values))


def test_gated_uses_the_linear_ramp() -> None:
    assert [schedule_alpha("gated", x) for x in FIVE_STEPS] == FIVE_STEPS
    assert schedule_alpha("sigmoid", 0.2) == sigmoid(0.2)


def test_schedule_errors() -> None:
    with pytest.raises(ValueError, match="Unknown blend 'cosine'"):
        schedule_alpha("cosine", 0.5)
    for x in (-0.1, 1.01):
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            schedule_alpha("linear", x)
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            sigmoid(x)


# ------------------------------------------------------------------------------------------------- GatedBlend


@pytest.mark.parametrize("channels", [1, 3, 4, 8, 16, 64])
@pytest.mark.parametrize("topology", ["cnn", "transformer"])
def test_gate_param_count(channels: int, topology: str) -> None:
    gate = GatedBlend(channels, topology)
    r = max(1, channels // 4)
    expected = channels * r + 2 * r + 1
    assert gated_blend_param_count(channels) == expected
    assert sum(p.numel() for p in gate.parameters() if p.requires_grad) == expected


def test_cnn_gate_shape_and_range() -> None:
    gate = GatedBlend(16, "cnn")
    g = gate(torch.randn(5, 16, 8, 8))
    assert g.shape == (5, 1, 1, 1)
    assert bool(((g > 0) & (g < 1)).all())
    assert not torch.allclose(g[0], g[1])  # depends on the sample


def test_cnn_gate_pools_over_space() -> None:
    gate = GatedBlend(8, "cnn")
    x = torch.randn(2, 8, 4, 4)
    shuffled = x.flatten(2)[:, :, torch.randperm(16)].view(2, 8, 4, 4)
    torch.testing.assert_close(gate(x), gate(shuffled))


def test_transformer_gate_shape_and_causality() -> None:
    gate = GatedBlend(32, "transformer")
    h = torch.randn(3, 10, 32)
    g = gate(h)
    assert g.shape == (3, 10, 1)
    assert bool(((g > 0) & (g < 1)).all())
    changed = h.clone()
    changed[:, 6] += 1.0
    g_changed = gate(changed)
    assert torch.equal(g[:, :6], g_changed[:, :6])
    assert not torch.allclose(g[:, 6], g_changed[:, 6])


def test_gate_rejects_unknown_topology() -> None:
    with pytest.raises(ValueError, match="Unknown topology 'rnn'"):
        GatedBlend(8, "rnn")


# -------------------------------------------------------------------------------------------------- isolation


def test_blend_lerp_values_and_gradients() -> None:
    h = torch.randn(4, 6, requires_grad=True)
    s = torch.randn(4, 6, requires_grad=True)
    assert torch.equal(blend_lerp(h, s, 0.0), h)
    torch.testing.assert_close(blend_lerp(h, s, 1.0), s)
    out = blend_lerp(h, s, 0.25)
    torch.testing.assert_close(out, 0.75 * h + 0.25 * s)
    out.sum().backward()
    assert h.grad is not None and s.grad is not None
    torch.testing.assert_close(h.grad, torch.full_like(h, 0.75))
    torch.testing.assert_close(s.grad, torch.full_like(s, 0.25))


def test_blend_lerp_broadcasts_a_tensor_weight() -> None:
    h, s = torch.zeros(2, 3, 4, 4), torch.ones(2, 3, 4, 4)
    w = torch.tensor([0.0, 1.0]).view(2, 1, 1, 1)
    out = blend_lerp(h, s, w)
    assert torch.equal(out[0], h[0]) and torch.equal(out[1], s[1])
