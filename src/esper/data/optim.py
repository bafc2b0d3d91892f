"""Optimizer specifications: a task says which optimizer its host and seeds use; Tolaria builds them."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Annotated, Any, ClassVar, Literal

import torch
from pydantic import Field, StrictFloat
from torch import nn

from esper.leyline.strict_config import StrictConfig

OptimizerName = Literal["sgd", "adam", "adamw"]
LRSchedule = Literal["constant", "cosine"]
LR_SCHEDULES: tuple[LRSchedule, ...] = ("constant", "cosine")
Beta = Annotated[StrictFloat, Field(ge=0.0, lt=1.0)]
"""Adam's decay rate of a moment estimate."""


def lr_factor(schedule: LRSchedule, epoch: int, max_epochs: int) -> float:
    """The multiplier of every optimizer's learning rate in epoch `epoch` (1-based) of a `max_epochs` episode.

    "constant" keeps the optimizers' own rates. "cosine" anneals them from 1× in the first epoch towards 0 in the
    last (half a cosine, stepped once per epoch), the usual recipe of a training run: the host ends converged for its
    budget instead of still climbing, so what an episode measures is where training ends, not how fast it starts."""
    if schedule == "constant":
        return 1.0
    return 0.5 * (1.0 + math.cos(math.pi * (epoch - 1) / max_epochs))


class OptimizerSpec(StrictConfig):
    """An optimizer and its hyperparameters, as a task declares them for its host and its seeds."""

    KIND: ClassVar[str] = "optimizer"
    name: OptimizerName
    lr: StrictFloat = Field(gt=0.0, le=10.0)
    momentum: StrictFloat = Field(default=0.0, ge=0.0, lt=1.0)
    weight_decay: StrictFloat = Field(default=0.0, ge=0.0, le=1.0)
    betas: tuple[Beta, Beta] = (0.9, 0.999)

    def build(self, params: Iterable[nn.Parameter] | list[dict[str, Any]]) -> torch.optim.Optimizer:
        if self.name == "sgd":
            return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)
        if self.name == "adam":
            return torch.optim.Adam(params, lr=self.lr, betas=self.betas, weight_decay=self.weight_decay)
        return torch.optim.AdamW(params, lr=self.lr, betas=self.betas, weight_decay=self.weight_decay)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "lr": self.lr, "momentum": self.momentum, "weight_decay": self.weight_decay,
                "betas": list(self.betas)}
