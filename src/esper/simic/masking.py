"""Logits over valid actions only, shared by PPO's categorical heads and IQL's joint-action policy.

Invalid entries get max(finfo(dtype).min, MASK_VALUE) rather than −inf, so fp16/bf16 stay finite; a softmax gives
them probability exactly 0 and `masked_fill` passes them no gradient, so the result over the valid actions is the
same as with −inf.
"""

from __future__ import annotations

import torch

from esper.leyline.constants import MASK_VALUE

__all__ = ["masked_logits"]


def masked_logits(logits: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """`logits` with every entry where `valid` is False replaced by the most negative finite fill."""
    return logits.masked_fill(~valid, max(torch.finfo(logits.dtype).min, MASK_VALUE))
