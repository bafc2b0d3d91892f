"""SeedGradientCollector."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
import torch
from torch import nn

from esper.env.gradients import SeedGradientCollector, collect_seed_gradients

KEYS = {"gradient_norm", "gradient_health", "has_vanishing", "has_exploding", "has_nonfinite"}


def test_collect_gradient_stats() -> None:
    model = nn.Linear(10, 5)
    model(torch.randn(4, 10)).sum().backward()
    stats = SeedGradientCollector().collect(model.parameters())
    assert set(stats) == KEYS
    assert stats["gradient_norm"] > 0
    assert 0 <= stats["gradient_health"] <= 1
    assert stats["has_vanishing"] is False and stats["has_exploding"] is False and stats["has_nonfinite"] is False


def test_detect_vanishing_gradients() -> None:
    model = nn.Linear(10, 5)
    for p in model.parameters():
        p.grad = torch.zeros_like(p) + 1e-10
    stats = SeedGradientCollector(vanishing_threshold=1e-7).collect(model.parameters())
    assert stats["has_vanishing"] is True
    assert stats["has_exploding"] is False
    assert stats["gradient_health"] == pytest.approx(0.5)


def test_detect_exploding_gradients() -> None:
    model = nn.Linear(10, 5)
    for p in model.parameters():
        p.grad = torch.ones_like(p) * 1000
    stats = SeedGradientCollector(exploding_threshold=100).collect(model.parameters())
    assert stats["has_exploding"] is True
    assert stats["gradient_health"] == pytest.approx(0.2)


def test_no_gradients_defaults() -> None:
    expected = {
        "gradient_norm": 0.0,
        "gradient_health": 1.0,
        "has_vanishing": False,
        "has_exploding": False,
        "has_nonfinite": False,
    }
    assert SeedGradientCollector().collect(nn.Linear(3, 2).parameters()) == expected
    assert SeedGradientCollector().collect([]) == expected


def _reference(params: Sequence[torch.Tensor], vanishing: float, exploding: float) -> dict[str, float | bool]:
    """The seed document's per-tensor loop."""
    norms = [float(p.grad.norm()) for p in params if p.grad is not None]
    n = len(norms)
    n_van = sum(x < vanishing for x in norms)
    n_exp = sum(x > exploding for x in norms)
    return {
        "gradient_norm": math.sqrt(sum(x * x for x in norms)) / n,
        "gradient_health": max(0.0, min(1.0, 1.0 - 0.5 * n_van / n - 0.8 * n_exp / n)),
        "has_vanishing": n_van > 0,
        "has_exploding": n_exp > 0,
    }


@pytest.mark.parametrize("scales", [(1.0, 1.0, 1.0, 1.0), (1e-9, 1.0, 500.0, 2.0), (1e-9, 1e-9, 1e-9, 1e3)])
def test_foreach_path_equals_per_tensor_reference(scales: tuple[float, ...]) -> None:
    shapes = [(7, 3), (3,), (2, 4, 5), (1,)]
    params = [nn.Parameter(torch.zeros(s)) for s in shapes]
    params.append(nn.Parameter(torch.zeros(4)))  # no grad: ignored
    for p, scale in zip(params, scales):
        p.grad = torch.randn_like(p) * scale
    stats = collect_seed_gradients(params, vanishing_threshold=1e-7, exploding_threshold=100.0)
    ref = _reference(params, 1e-7, 100.0)
    assert stats["gradient_norm"] == pytest.approx(ref["gradient_norm"], rel=1e-5)
    assert stats["gradient_health"] == pytest.approx(ref["gradient_health"])
    assert stats["has_vanishing"] is ref["has_vanishing"]
    assert stats["has_exploding"] is ref["has_exploding"]


def test_nonfinite_gradients_are_visible_and_unhealthy() -> None:
    params = [nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(3))]
    params[0].grad = torch.tensor([1.0, math.nan, 0.0])
    params[1].grad = torch.ones(3)
    stats = SeedGradientCollector().collect(params)
    assert stats["has_nonfinite"] is True
    assert stats["has_exploding"] is True
    assert stats["gradient_health"] == pytest.approx(0.6)
    params[0].grad = torch.tensor([math.inf, 0.0, 0.0])
    assert SeedGradientCollector().collect(params)["has_nonfinite"] is True


def test_half_precision_gradients_do_not_overflow() -> None:
    p = nn.Parameter(torch.zeros(1000, dtype=torch.float16))
    p.grad = torch.full_like(p, 60000.0)  # norm 1.9e6 overflows float16
    stats = SeedGradientCollector().collect([p])
    assert stats["has_nonfinite"] is False
    assert stats["gradient_norm"] == pytest.approx(60000.0 * math.sqrt(1000), rel=1e-3)


def test_async_then_materialize_matches_collect() -> None:
    model = nn.Linear(4, 4)
    model(torch.randn(2, 4)).sum().backward()
    collector = SeedGradientCollector()
    pending = collector.collect_async(model.parameters())
    assert isinstance(pending, torch.Tensor) and pending.shape == (5,)
    assert collector.materialize(pending) == collector.collect(model.parameters())
    with pytest.raises(ValueError, match="collect_async"):
        collector.materialize(torch.zeros(4))


def test_threshold_validation() -> None:
    with pytest.raises(ValueError):
        SeedGradientCollector(vanishing_threshold=1.0, exploding_threshold=0.5)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_collect_async_does_not_sync_on_cuda() -> None:
    model = nn.Linear(64, 64).cuda()
    model(torch.randn(8, 64, device="cuda")).sum().backward()
    collector = SeedGradientCollector()
    torch.cuda.set_sync_debug_mode("error")
    try:
        pending = collector.collect_async(model.parameters())
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert collector.materialize(pending)["gradient_norm"] > 0
