"""The typed rows of an episode's line logs: one per env step (`steps.jsonl`), one per episode (`episodes.jsonl`).

Writers build these from the live env; `esper report` and the evaluation layer read them back with
`esper.storage.rows.read_rows`, so both sides share one schema.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from esper.kasmina.model import MorphogeneticModel

__all__ = ["EpisodeResult", "SlotSummary", "StepRow", "slot_summaries"]


@dataclass(frozen=True, slots=True)
class SlotSummary:
    """An occupied slot at the end of a step (an empty slot is logged as null)."""

    stage: str
    blueprint: str
    alpha: float
    counterfactual: float | None


def slot_summaries(model: MorphogeneticModel) -> dict[str, SlotSummary | None]:
    """Every enabled slot of the model, in canonical order."""
    out: dict[str, SlotSummary | None] = {}
    for s in model.slots():
        state = s.state
        out[s.slot_id] = None if state is None else SlotSummary(
            state.stage.name, state.blueprint_id, state.alpha, state.metrics.counterfactual_contribution)
    return out


@dataclass(frozen=True, slots=True)
class StepRow:
    """steps.jsonl: what was decided, what happened, and every reward component (whose total is `reward`)."""

    FILE: ClassVar[str] = "steps.jsonl"

    batch: int
    env: int
    episode: int
    epoch: int
    controller: str
    op: str
    slot: str | None
    blueprint: str | None
    blend: str | None
    success: bool
    reason: str
    train_loss: float
    train_accuracy: float
    val_loss: float
    val_accuracy: float
    rollback: bool
    slots: dict[str, SlotSummary | None]
    seed_params: int
    reward_components: dict[str, Any]
    reward: float

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["slots"] = {slot: None if s is None else {"stage": s.stage, "blueprint": s.blueprint,
                                                       "alpha": round(s.alpha, 6), "counterfactual": s.counterfactual}
                        for slot, s in self.slots.items()}
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepRow:
        slots = {slot: None if s is None else SlotSummary(**s) for slot, s in d["slots"].items()}
        return cls(**{**d, "slots": slots})


@dataclass(frozen=True, slots=True)
class EpisodeResult:
    """episodes.jsonl: one finished episode of one controller."""

    FILE: ClassVar[str] = "episodes.jsonl"

    controller: str
    env_id: int
    episode: int
    batch: int
    env_seed: int
    host_width: float
    host_params: int
    final_accuracy: float
    final_loss: float
    twin_final_accuracy: float | None
    twin_final_loss: float | None
    best_accuracy: float
    seeds_created: int
    seeds_fossilized: int
    seeds_culled: int
    params_added: int
    action_counts: dict[str, int]
    accuracy_curve: list[float]
    total_reward: float
    rollbacks: int
    # Scored once on the final model of an evaluation episode, on the test split no controller, reward or gate
    # sees; None where no test pass ran (PPO training episodes, datagen).
    final_test_accuracy: float | None = None
    final_test_loss: float | None = None
    # What the episode cost: FLOPs of every forward and backward pass it ran (host, seeds, twin excluded) and its
    # wall-clock seconds.
    train_flops: int = 0
    wall_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def decisions(self) -> int:
        """How many decisions the episode took: its rows in steps.jsonl (every decision counts its op once)."""
        return sum(self.action_counts.values())
