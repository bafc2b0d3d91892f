"""history.jsonl of an IQL run: one typed row per training epoch (losses, AWR weights, agreement, values)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = ["IQLHistoryRow"]


@dataclass(frozen=True, slots=True)
class IQLHistoryRow:
    """`agreement`: how often the policy's argmax equals the logged action on a fixed sample of states;
    `q_behavior` / `q_policy`: mean min-Q at the logged actions and at the policy's argmax."""

    FILE: ClassVar[str] = "history.jsonl"

    epoch: int
    steps: int
    v_loss: float
    q_loss: float
    policy_loss: float
    mean_weight: float
    frac_weight_clipped: float
    agreement: float
    q_behavior: float
    q_policy: float
    seconds: float

    @classmethod
    def from_metrics(cls, metrics: dict[str, float], seconds: float) -> IQLHistoryRow:
        values = {f.name: metrics[f.name] for f in dataclasses.fields(cls) if f.name not in ("epoch", "steps",
                                                                                              "seconds")}
        return cls(epoch=int(metrics["epoch"]), steps=int(metrics["steps"]), seconds=seconds, **values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
