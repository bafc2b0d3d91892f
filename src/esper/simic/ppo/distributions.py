"""Categorical distribution over valid actions only.

Masked logits use `esper.simic.masking` (a finite fill, so fp16/bf16 stay finite). Entropy is computed
over valid actions and normalized by log(n_valid), so entropy coefficients mean the same thing whatever the number of
valid actions; with one valid action it is exactly 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from esper.simic.masking import masked_logits

__all__ = ["InvalidStateMachineError", "MaskedCategorical"]


class InvalidStateMachineError(RuntimeError):
    """A mask row without any valid action: the lifecycle state machine and the masks disagree."""


class MaskedCategorical:
    """`logits` and bool `mask` share the shape [..., n]; every row must have at least one valid entry."""

    def __init__(self, logits: torch.Tensor, mask: torch.Tensor) -> None:
        if logits.shape != mask.shape:
            raise ValueError(f"logits {tuple(logits.shape)} and mask {tuple(mask.shape)} must have the same shape")
        mask = mask.to(torch.bool)
        valid_rows = mask.any(dim=-1)
        if not bool(valid_rows.all()):
            bad = (~valid_rows).nonzero().flatten().tolist()
            raise InvalidStateMachineError(f"No valid actions available in mask row(s) {bad}")
        self.mask = mask
        self.masked_logits = masked_logits(logits, mask)
        self.log_probs_all = F.log_softmax(self.masked_logits, dim=-1)
        self.n_valid = mask.sum(dim=-1)

    @property
    def probs(self) -> torch.Tensor:
        return self.log_probs_all.exp()

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        return self.log_probs_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """Multinomial sampling; masked entries get probability exactly 0, so they can never be drawn."""
        probs = self.probs.float().masked_fill(~self.mask, 0.0)
        flat = probs.reshape(-1, probs.shape[-1])
        return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])

    def mode(self) -> torch.Tensor:
        return self.masked_logits.argmax(dim=-1)

    def entropy(self) -> torch.Tensor:
        """Entropy over valid actions, in [0, 1]: divided by log(n_valid); 0 when one action is valid."""
        p_log_p = (self.probs * self.log_probs_all).masked_fill(~self.mask, 0.0)
        raw = -p_log_p.sum(dim=-1)
        denom = torch.log(self.n_valid.clamp(min=2).to(raw.dtype))
        return torch.where(self.n_valid > 1, raw / denom, torch.zeros_like(raw))
