"""MaskedCategorical."""

from __future__ import annotations

import math

import pytest
import torch

from esper.simic.ppo.distributions import InvalidStateMachineError, MaskedCategorical

MASK = torch.tensor([[True, False, True, False], [False, False, False, True]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_masked_probabilities_are_negligible_and_outputs_finite(dtype: torch.dtype) -> None:
    logits = (torch.randn(2, 4) * 5).to(dtype)
    logits[:, 1] = 30.0  # a masked action with the largest logit
    dist = MaskedCategorical(logits, MASK)
    probs = dist.probs.float()
    assert (probs[~MASK] < 1e-3).all()
    assert probs.sum(-1).tolist() == pytest.approx([1.0, 1.0], abs=1e-2)
    for out in (dist.probs, dist.log_probs_all, dist.entropy(), dist.log_prob(torch.tensor([1, 0]))):
        assert torch.isfinite(out.float()).all()
    for _ in range(20):
        assert MASK.gather(-1, dist.sample().unsqueeze(-1)).all()


def test_all_false_row_raises() -> None:
    mask = torch.tensor([[True, False], [False, False]])
    with pytest.raises(InvalidStateMachineError, match="No valid actions available"):
        MaskedCategorical(torch.zeros(2, 2), mask)
    with pytest.raises(InvalidStateMachineError):
        MaskedCategorical(torch.zeros(3), torch.zeros(3, dtype=torch.bool))


def test_shape_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="same shape"):
        MaskedCategorical(torch.zeros(2, 3), torch.ones(2, 4, dtype=torch.bool))


def test_entropy_is_normalized_over_valid_actions() -> None:
    mask = torch.tensor([[True, True, True, False, False], [True, False, False, False, False], [True] * 5])
    dist = MaskedCategorical(torch.zeros(3, 5), mask)
    assert dist.entropy().tolist() == pytest.approx([1.0, 0.0, 1.0])
    logits = torch.tensor([[2.0, 0.0, -1.0, 9.0, 9.0]])
    dist = MaskedCategorical(logits, mask[:1])
    p = torch.softmax(logits[0, :3], -1)
    expected = float(-(p * p.log()).sum() / math.log(3))
    assert dist.entropy().item() == pytest.approx(expected, rel=1e-5)
    assert 0.0 < expected < 1.0


def test_sample_never_draws_masked_actions_and_is_reproducible() -> None:
    logits = torch.randn(500, 4)
    mask = torch.rand(500, 4) > 0.5
    mask[:, 0] |= ~mask.any(-1)
    dist = MaskedCategorical(logits, mask)
    for _ in range(5):
        samples = dist.sample()
        assert mask.gather(-1, samples.unsqueeze(-1)).all()
    a = dist.sample(torch.Generator().manual_seed(3))
    b = dist.sample(torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


def test_mode_log_prob_and_probs() -> None:
    logits = torch.tensor([[5.0, 1.0, 2.0, 0.0]])
    dist = MaskedCategorical(logits, torch.tensor([[False, True, True, False]]))
    assert dist.mode().tolist() == [2]
    p = torch.softmax(torch.tensor([1.0, 2.0]), -1)
    assert dist.probs[0, 1:3].tolist() == pytest.approx(p.tolist())
    assert dist.log_prob(torch.tensor([1])).item() == pytest.approx(math.log(p[0].item()))


def test_unbatched_logits() -> None:
    dist = MaskedCategorical(torch.zeros(3), torch.tensor([False, True, False]))
    assert dist.sample().shape == () and dist.sample().item() == 1
    assert dist.entropy().item() == 0.0
