"""RunningMeanStd and RewardNormalizer."""

from __future__ import annotations

import io
import math

import pytest
import torch

from esper.simic.normalization import RewardNormalizer, RunningMeanStd


def test_running_mean_std_initial_state() -> None:
    rms = RunningMeanStd((3,))
    assert torch.equal(rms.mean, torch.zeros(3, dtype=torch.float64))
    assert torch.equal(rms.var, torch.ones(3, dtype=torch.float64))
    assert rms.count == pytest.approx(1e-4)
    assert rms.update_count == 0


def test_update_matches_batch_statistics() -> None:
    x = torch.randn(1000, 4) * torch.tensor([1.0, 2.0, 0.5, 3.0]) + torch.tensor([5.0, -1.0, 0.0, 2.0])
    rms = RunningMeanStd(4)
    rms.update(x)
    assert rms.mean.float() == pytest.approx(x.mean(0), abs=1e-4)
    assert rms.var.float() == pytest.approx(x.var(0, correction=0), rel=1e-3)
    assert rms.update_count == 1
    assert rms.count == pytest.approx(1000 + 1e-4)


def test_incremental_updates_equal_one_batch_update() -> None:
    x = torch.randn(90, 2) * 3 + 1
    one, many = RunningMeanStd(2), RunningMeanStd(2)
    one.update(x)
    for chunk in x.split(7):
        many.update(chunk)
    assert torch.allclose(one.mean, many.mean, atol=1e-10)
    assert torch.allclose(one.var, many.var, atol=1e-10)
    assert many.update_count == math.ceil(90 / 7)


def test_single_sample_update_and_shape_errors() -> None:
    rms = RunningMeanStd((2,))
    rms.update(torch.tensor([1.0, 2.0]))
    assert rms.update_count == 1
    with pytest.raises(ValueError, match="shape"):
        rms.update(torch.zeros(4, 3))
    with pytest.raises(ValueError, match="shape"):
        rms.update(torch.zeros(0, 2))


def test_normalize_uses_stats_and_clips() -> None:
    rms = RunningMeanStd(1)
    rms.update(torch.tensor([[0.0], [2.0]]))  # mean ≈ 1, var ≈ 1
    z = rms.normalize(torch.tensor([[1.0], [3.0], [1e6], [-1e6]]))
    assert z[0, 0].item() == pytest.approx(0.0, abs=1e-3)
    assert z[1, 0].item() == pytest.approx(2.0, rel=1e-3)
    assert z[2, 0].item() == 10.0 and z[3, 0].item() == -10.0
    assert rms.normalize(torch.tensor([[1e6]]), clip=3.0).item() == 3.0
    assert z.dtype == torch.float32


def test_running_mean_std_state_dict_round_trip_weights_only() -> None:
    rms = RunningMeanStd((2,))
    rms.update(torch.randn(10, 2))
    buf = io.BytesIO()
    torch.save(rms.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    other = RunningMeanStd((2,))
    other.load_state_dict(state)
    assert torch.equal(other.mean, rms.mean) and torch.equal(other.var, rms.var)
    assert other.count == rms.count and other.update_count == 1
    x = torch.randn(3, 2)
    assert torch.equal(other.normalize(x), rms.normalize(x))
    with pytest.raises(ValueError, match="shape mismatch"):
        RunningMeanStd((3,)).load_state_dict(state)


def test_reward_normalizer_scales_by_std_without_centering() -> None:
    norm = RewardNormalizer()
    assert norm.update_and_normalize(3.0) == 3.0  # count 1: unscaled
    out = norm.update_and_normalize(5.0)
    assert out == pytest.approx(5.0 / math.sqrt(2.0))  # sample std of (3, 5)
    assert norm.std == pytest.approx(math.sqrt(2.0))
    values = [1.0, 2.0, 3.0, 4.0]
    norm = RewardNormalizer()
    outs = [norm.update_and_normalize(v) for v in values]
    assert all(o > 0 for o in outs)  # positive rewards stay positive


def test_reward_normalizer_clamps_and_uses_epsilon() -> None:
    norm = RewardNormalizer()
    assert norm.update_and_normalize(100.0) == 10.0
    assert norm.update_and_normalize(100.0) == 10.0  # std 0 → divide by epsilon, then clamp
    norm = RewardNormalizer(clip=2.0)
    assert norm.update_and_normalize(-7.0) == -2.0
    with pytest.raises(ValueError, match="Non-finite"):
        norm.update_and_normalize(float("nan"))


def test_reward_normalizer_state_dict_round_trip() -> None:
    norm = RewardNormalizer()
    for r in (0.5, -1.0, 2.0):
        norm.update_and_normalize(r)
    other = RewardNormalizer()
    other.load_state_dict(norm.state_dict())
    assert other.update_and_normalize(1.5) == norm.update_and_normalize(1.5)
    assert all(isinstance(v, (int, float)) for v in norm.state_dict().values())
