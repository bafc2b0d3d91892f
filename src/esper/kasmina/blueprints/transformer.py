"""Transformer blueprints: shape-preserving, causal modules on (B, T, D).

Linears use normal(0, 0.02) weights and zero biases like the host; the only zero-init is the LoRA up-projection,
which makes LoRA a zero-output adapter by design. Every blueprint is per-position or causal, so a seed never lets a
language model see future tokens.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from esper.kasmina.blueprints.registry import register_blueprint
from esper.kasmina.hosts import CausalSelfAttention, FeedForward

LORA_RANK = 8
ATTENTION_HEADS = 4


def _init_linears(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class LoRAAdapter(nn.Module):
    """y = x + up(down(x)), rank 8, no biases; up starts at zero so the adapter begins as the identity."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.down = nn.Linear(dim, LORA_RANK, bias=False)
        self.up = nn.Linear(LORA_RANK, dim, bias=False)
        _init_linears(self)
        nn.init.zeros_(self.up.weight)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.up(self.down(x))


class AttentionSeed(nn.Module):
    """y = x + proj(causal SDPA(qkv(x))) with 4 heads."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        if dim % ATTENTION_HEADS != 0:
            raise ValueError(f"The attention blueprint needs a width divisible by {ATTENTION_HEADS} heads, got {dim}")
        self.attn = CausalSelfAttention(dim, ATTENTION_HEADS)
        _init_linears(self)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.attn(x)


class LayerNormSeed(nn.Module):
    """y = x + tanh(s)·(LayerNorm(x) − x), s init 1: a learnable pull towards the normalized activation."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.strength = nn.Parameter(torch.ones(()))

    def forward(self, x: Tensor) -> Tensor:
        return x + torch.tanh(self.strength) * (self.norm(x) - x)


class MLPSeed(nn.Module):
    """y = x + fc2(GELU(fc1(x))) with a 4× hidden width."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.mlp = FeedForward(dim)
        _init_linears(self)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.mlp(x)


def _identity(dim: int) -> nn.Module:
    return nn.Identity()


_CATALOG: tuple[tuple[str, Callable[[int], nn.Module], Callable[[int], int], str], ...] = (
    ("noop", _identity, lambda d: 0, "Identity: a placeholder seed with no parameters"),
    ("lora", LoRAAdapter, lambda d: 2 * LORA_RANK * d, "Rank-8 low-rank residual adapter"),
    ("attention", AttentionSeed, lambda d: 4 * d * d + 4 * d, "Residual 4-head causal self-attention"),
    ("norm", LayerNormSeed, lambda d: 2 * d + 1, "Learnable pull towards LayerNorm"),
    ("mlp", MLPSeed, lambda d: 8 * d * d + 5 * d, "Residual position-wise MLP"),
)
"""The built-in transformer blueprints, registered in this order (the policy head's) through `register_blueprint`."""

for _name, _factory, _param_count, _description in _CATALOG:
    register_blueprint(_name, topology="transformer", param_count=_param_count, description=_description)(_factory)
