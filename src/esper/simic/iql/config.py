"""IQLConfig: every hyperparameter of one offline IQL run, validated once.

Unknown keys are rejected (a typo in a JSON config is an error, not an ignored knob), numbers must be finite and in
range, and the object round-trips through a plain dict so checkpoints can store it and resumes can compare it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, field_validator, model_validator

from esper.leyline.errors import UserInputError
from esper.runtime.strict_config import StrictConfig

__all__ = ["RESUMABLE_FIELDS", "IQLConfig"]

RESUMABLE_FIELDS = frozenset({"epochs", "device"})
"""The only fields a resume may change: train for longer, or move the run to other hardware."""


class IQLConfig(StrictConfig):
    """Discrete IQL over the joint actions: expectile value regression, TD critics, advantage-weighted policy."""

    KIND: ClassVar[str] = "IQL config"

    expectile: float = 0.7
    beta: float = 3.0
    gamma: float = 0.99
    polyak: float = 0.005
    lr: float = 3e-4
    batch_size: int = 256
    weight_clip: float = 100.0
    epochs: int = 100
    steps_per_epoch: int = 1000
    hidden_sizes: list[int] = Field(default_factory=lambda: [256, 256])
    agreement_samples: int = 1000
    seed: int = 42
    device: str = "auto"

    @field_validator("batch_size", "epochs", "steps_per_epoch", "agreement_samples")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise UserInputError("must be >= 1")
        return v

    @field_validator("hidden_sizes")
    @classmethod
    def _hidden(cls, v: list[int]) -> list[int]:
        if not 1 <= len(v) <= 4 or any(not 4 <= h <= 4096 for h in v):
            raise UserInputError("must list 1 to 4 layer widths, each in [4, 4096]")
        return v

    @field_validator("seed")
    @classmethod
    def _seed(cls, v: int) -> int:
        if not 0 <= v < 2**63:
            raise UserInputError("must be in [0, 2**63)")
        return v

    @model_validator(mode="after")
    def _ranges(self) -> IQLConfig:
        checks = [
            (0.0 < self.expectile < 1.0, "expectile must be in (0, 1) (0.5 regresses the mean; IQL uses ~0.7)"),
            (0.0 <= self.beta <= 100.0, "beta must be in [0, 100] (0 is behaviour cloning)"),
            (0.0 < self.gamma <= 1.0, "gamma must be in (0, 1]"),
            (0.0 < self.polyak <= 1.0, "polyak must be in (0, 1]"),
            (0.0 < self.lr <= 1.0, "lr must be in (0, 1]"),
            (self.weight_clip >= 1.0, "weight_clip must be >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise UserInputError(message)
        return self


    def resume_conflicts(self, saved: dict[str, Any]) -> list[str]:
        """Fields where this config differs from a checkpoint's and a resume may not change them."""
        mine = self.to_dict()
        return sorted(k for k in mine if k not in RESUMABLE_FIELDS and saved.get(k) != mine[k])
