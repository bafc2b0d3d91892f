"""The setting an episode trains in, as every command gives it: `EpisodeScale` (what the scale-down flags set: task,
episode length, sample caps, augmentation) and `EpisodeSetting` (with slots, seed budget, batch size, schedule and
precision). PPO training, comparisons, studies and the Gymnasium env share `EpisodeSetting`; datagen, whose
environment presets bring the rest, shares `EpisodeScale`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

from pydantic import Field, StrictInt, field_validator, model_validator

from esper.data.augment import AugmentChoice
from esper.data.optim import LRSchedule
from esper.data.tasks import get_task_spec
from esper.leyline import CANONICAL_SLOTS, ordered_slots
from esper.leyline.constants import DEFAULT_BATCH_SIZE_TRAINING, DEFAULT_EPISODE_LENGTH
from esper.leyline.errors import UserInputError
from esper.leyline.strict_config import BatchSize, EpisodeLength, SampleCap, StrictConfig

__all__ = ["EpisodeScale", "EpisodeSetting"]


class EpisodeScale(StrictConfig):
    """What an episode trains on and for how long: the task, the episode length, the samples of each split and the
    training batches' augmentation."""

    KIND: ClassVar[str] = "episode setting"
    FIX: ClassVar[str] = "each setting has a flag of its name, e.g. --max-epochs"
    task: str = Field(default="cifar10", description="the task the envs train on")
    max_epochs: EpisodeLength = Field(default=DEFAULT_EPISODE_LENGTH,
                                      description="episode length; decisions follow epochs 1 .. T-1")
    max_train_samples: SampleCap | None = Field(default=None,
                                              description="train each episode on a subset of the train split "
                                                          "(default: all of it)")
    max_val_samples: SampleCap | None = Field(default=None,
                                            description="validate on a subset of the val split (default: all of it)")
    augment: AugmentChoice | None = Field(default=None,
                                          description="the training batches' augmentation: none, crop, flip or "
                                                      "crop,flip (default: the task's own)")

    @field_validator("task")
    @classmethod
    def _task(cls, v: str) -> str:
        return get_task_spec(v).name  # an unknown task names the known ones

    @model_validator(mode="after")
    def _augment(self) -> Self:
        get_task_spec(self.task).augment_in_force(self.augment)  # a task without images takes no augmentation
        return self


class EpisodeSetting(EpisodeScale):
    """An episode's whole setting: its scale, the slots seeds may germinate in, the seed budget, the batch size, the
    learning-rate schedule and the precision."""

    slots: tuple[str, ...] = Field(default=CANONICAL_SLOTS,
                                   description=f"the slots seeds may germinate in (of {', '.join(CANONICAL_SLOTS)})")
    max_seeds: StrictInt | None = Field(default=None, ge=1, le=len(CANONICAL_SLOTS),
                                        description="seed budget per episode (default: one per enabled slot)")
    batch_size: BatchSize = Field(default=DEFAULT_BATCH_SIZE_TRAINING, description="the envs' training batch size")
    lr_schedule: LRSchedule = Field(default="constant",
                                    description="the episode's host and seed learning rates per epoch (cosine: "
                                                "annealed to 0 over the episode)")
    amp: bool = Field(default=False, description="mixed precision (fp16 + GradScaler on CUDA, bf16 on CPU)")

    @field_validator("slots")
    @classmethod
    def _slots(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise UserInputError(f"Enable at least one slot (of {list(CANONICAL_SLOTS)})")
        return ordered_slots(v)

    def controller_setting(self) -> dict[str, Any]:
        """What a learned policy or a tuned heuristic checks it runs in (the setting it was made for): task, episode
        length, sample caps, batch size, schedule and the augmentation in force."""
        return {"task": self.task, "max_epochs": self.max_epochs, "max_train_samples": self.max_train_samples,
                "max_val_samples": self.max_val_samples, "batch_size": self.batch_size,
                "lr_schedule": self.lr_schedule, "augment": get_task_spec(self.task).augment_in_force(self.augment)}
