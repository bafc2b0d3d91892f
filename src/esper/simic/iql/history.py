"""history.jsonl of an IQL run: one typed row per training epoch (losses, AWR weights, agreement, values)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from esper.storage.logcut import UnitLog

__all__ = ["IQLHistoryRow", "trim_history"]


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


def trim_history(run_dir: Path, checkpoint: Path, epochs: int) -> None:
    """Cut history.jsonl back to `checkpoint`, which completed epochs 1 .. `epochs` (`esper.storage.logcut`): rows of
    later epochs, a torn last line among them, are dropped and trained again; an epoch the checkpoint counts but the
    log lacks is refused, before anything is cut."""
    history = UnitLog.read(run_dir / IQLHistoryRow.FILE, lambda row: row.get("epoch"))
    kept = range(1, epochs + 1)
    epoch = history.first_incomplete(dict.fromkeys(kept, 1))
    if epoch is not None:
        raise history.refuse(f"the row of epoch {epoch}", checkpoint, run_dir)
    history.cut(set(kept))
