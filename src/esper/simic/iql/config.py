"""IQLConfig: every hyperparameter of one offline IQL run, validated once.

Unknown keys are rejected (a typo in a JSON config is an error, not an ignored knob), numbers must be finite and in
range, and the object round-trips through a plain dict so checkpoints can store it and resumes can compare it.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field, StrictFloat, StrictInt

from esper.leyline.strict_config import BatchSize, StrictConfig

__all__ = ["RESUMABLE_FIELDS", "IQLConfig"]

MAX_STEPS = 10**9
Width = Annotated[StrictInt, Field(ge=4, le=4096)]

RESUMABLE_FIELDS = frozenset({"epochs", "device"})
"""The only fields a resume may change: train for longer, or move the run to other hardware."""


class IQLConfig(StrictConfig):
    """Discrete IQL over the joint actions: expectile value regression, TD critics, advantage-weighted policy."""

    KIND: ClassVar[str] = "IQL config"

    expectile: StrictFloat = Field(default=0.7, gt=0.0, lt=1.0,
                                   description="value regression expectile (0.5 regresses the mean; IQL uses ~0.7)")
    beta: StrictFloat = Field(default=3.0, ge=0.0, le=100.0,
                              description="advantage temperature of the policy's weights (0 is behaviour cloning)")
    gamma: StrictFloat = Field(default=0.99, gt=0.0, le=1.0, description="discount")
    polyak: StrictFloat = Field(default=0.005, gt=0.0, le=1.0, description="target critic update rate")
    lr: StrictFloat = Field(default=3e-4, gt=0.0, le=1.0, description="learning rate of every network")
    batch_size: BatchSize = Field(default=256, description="transitions per gradient step")
    weight_clip: StrictFloat = Field(default=100.0, ge=1.0, le=1e6, description="cap on the policy's advantage weights")
    epochs: StrictInt = Field(default=100, ge=1, le=MAX_STEPS, description="training epochs")
    steps_per_epoch: StrictInt = Field(default=1000, ge=1, le=MAX_STEPS, description="gradient steps per epoch")
    hidden_sizes: list[Width] = Field(default_factory=lambda: [256, 256], min_length=1, max_length=4,
                                      description="layer widths of every network")
    agreement_samples: StrictInt = Field(default=1000, ge=1, le=MAX_STEPS,
                                         description="transitions the per-epoch agreement with the logged actions is "
                                                     "measured on")
    seed: StrictInt = Field(default=42, ge=0, lt=2**63, description="seed of the networks and the batch order")
    device: str = Field(default="auto", description="'auto', 'cpu' or 'cuda:N'")

    def resume_conflicts(self, saved: dict[str, Any]) -> list[str]:
        """Fields where this config differs from a checkpoint's and a resume may not change them."""
        mine = self.to_dict()
        return sorted(k for k in mine if k not in RESUMABLE_FIELDS and saved.get(k) != mine[k])
