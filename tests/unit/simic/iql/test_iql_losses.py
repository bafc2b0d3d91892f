"""The pieces of the IQL update, each against its definition."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from esper.simic.iql.iql import awr_weights, expectile_loss, masked_log_softmax, polyak_update, td_target

floats = st.floats(-10, 10, allow_nan=False, width=32)


def test_expectile_loss_weights_each_side() -> None:
    diff = torch.tensor([2.0, -2.0])
    assert expectile_loss(diff, 0.7).item() == pytest.approx((0.7 * 4 + 0.3 * 4) / 2)
    assert expectile_loss(torch.tensor([2.0]), 0.9).item() == pytest.approx(0.9 * 4)
    assert expectile_loss(torch.tensor([-2.0]), 0.9).item() == pytest.approx(0.1 * 4)
    x = torch.randn(50)
    assert expectile_loss(x, 0.5).item() == pytest.approx(0.5 * x.square().mean().item())


@given(values=st.lists(floats, min_size=2, max_size=30), tau=st.floats(0.05, 0.95))
def test_expectile_loss_is_minimized_at_the_expectile(values: list[float], tau: float) -> None:
    """The constant minimizing the loss satisfies τ·Σ(x − m)₊ = (1 − τ)·Σ(m − x)₊ (found by bisection)."""
    x = torch.tensor(values, dtype=torch.float64)
    lo, hi = float(x.min()), float(x.max())
    for _ in range(200):
        m = (lo + hi) / 2
        excess = tau * (x - m).clamp(min=0).sum() - (1 - tau) * (m - x).clamp(min=0).sum()
        lo, hi = (m, hi) if excess > 0 else (lo, m)
    found = torch.tensor((lo + hi) / 2, dtype=torch.float64, requires_grad=True)
    expectile_loss(x - found, tau).backward()
    assert found.grad is not None and abs(found.grad.item()) < 1e-6
    if tau > 0.5 and x.max() > x.min():
        assert found.item() >= x.mean().item() - 1e-9  # an upper expectile sits above the mean


def test_td_target_drops_the_bootstrap_at_terminals() -> None:
    rewards, next_v = torch.tensor([1.0, 1.0, -0.5]), torch.tensor([10.0, 10.0, 4.0])
    dones = torch.tensor([False, True, False])
    assert td_target(rewards, dones, next_v, 0.9).tolist() == pytest.approx([10.0, 1.0, 3.1])


def test_awr_weights_clip_and_report_the_clipped_fraction() -> None:
    adv = torch.tensor([-1.0, 0.0, 0.5, 2.0, 1e4])
    w, clipped = awr_weights(adv, beta=3.0, clip=100.0)
    expected = [math.exp(-3.0), 1.0, math.exp(1.5), 100.0, 100.0]  # exp(6) ≈ 403 and exp(3e4) are capped
    assert w.tolist() == pytest.approx(expected) and bool(torch.isfinite(w).all())
    assert clipped.tolist() == [False, False, False, True, True]
    w0, c0 = awr_weights(adv, beta=0.0, clip=100.0)
    assert w0.tolist() == [1.0] * 5 and not bool(c0.any())  # β = 0 is behaviour cloning


@given(logits=st.lists(floats, min_size=43, max_size=43),
       valid=st.lists(st.booleans(), min_size=43, max_size=43).filter(any))
def test_masked_log_softmax_gives_invalid_actions_no_mass_and_no_gradient(logits: list[float],
                                                                           valid: list[bool]) -> None:
    x = torch.tensor([logits], requires_grad=True)
    mask = torch.tensor([valid])
    logp = masked_log_softmax(x, mask)
    probs = logp.exp()
    assert bool((probs[~mask] == 0).all()) and probs.sum().item() == pytest.approx(1.0, abs=1e-5)
    chosen = int(mask[0].nonzero()[0])
    logp[0, chosen].backward()
    assert x.grad is not None and bool((x.grad[~mask] == 0).all()) and bool(torch.isfinite(x.grad).all())


def test_masked_log_softmax_matches_softmax_over_the_valid_subset() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    mask = torch.tensor([[True, False, True, False]])
    expected = torch.log_softmax(torch.tensor([1.0, 3.0]), 0)
    assert masked_log_softmax(logits, mask)[0, [0, 2]].tolist() == pytest.approx(expected.tolist())


def test_polyak_update_moves_the_target_by_the_rate() -> None:
    online, target = nn.Linear(3, 2), nn.Linear(3, 2)
    before = [p.detach().clone() for p in target.parameters()]
    polyak_update(target, online, 0.1)
    for t, b, o in zip(target.parameters(), before, online.parameters(), strict=True):
        assert torch.allclose(t, 0.9 * b + 0.1 * o)
    polyak_update(target, online, 1.0)
    assert all(torch.equal(t, o) for t, o in zip(target.parameters(), online.parameters(), strict=True))


def test_a_feature_constant_in_the_dataset_is_no_outlier_at_deployment() -> None:
    """As in PPO's normalizer: a feature the dataset never varied maps to 0 whatever value arrives later, instead
    of ±OBS_CLIP (its variance is ~0, so any difference used to explode)."""
    from esper.leyline.constants import OBS_CLIP
    from esper.simic.iql.iql import FeatureScaler

    logged = torch.stack([torch.tensor([0.5, float(i)]) for i in range(10)])  # feature 0 constant, 1 varies
    scaler = FeatureScaler.from_states(logged)
    live = scaler(torch.tensor([[0.9, 4.5], [0.1, 40.0]]))
    assert live[:, 0].tolist() == [0.0, 0.0]
    assert abs(float(live[0, 1])) < 0.1 and float(live[1, 1]) == OBS_CLIP
