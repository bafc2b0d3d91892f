"""What exploring off its teacher returned to a teacher-residual policy during training.

A residual policy samples its teacher's choice most of the time and, with the smoothing ε and whatever the residual
has learned, another legal action now and then. The envs of one rollout group share their host and data seeds, and an
episode is a function of its seeds and its actions, so the group's episodes differ only where their decisions did:
two episodes that followed the teacher throughout return the same to the last bit. Regressing each episode's return
on its count of off-teacher decisions within its group (a fixed effect per group) therefore measures what a decision
off the teacher was worth, with the seeds' noise removed: the signal PPO had to learn an improvement from.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from esper.env import EpisodeResult
from esper.env.logs import StepRow
from esper.evaluation.stats import within_group_slope
from esper.simic.ppo.controller import AS_TEACHER, OVERRIDES_TEACHER
from esper.storage.rows import read_rows

__all__ = ["OffTeacherEffect", "off_teacher_effect"]


@dataclass(frozen=True)
class OffTeacherEffect:
    """A training run's off-teacher decisions and the return each was worth within its rollout group."""

    decisions: int  # off-teacher decisions over the run's training episodes
    deviating: int  # episodes with at least one
    episodes: int
    per_decision: float | None  # the return's change per off-teacher decision (pp); None: never varied in a group
    ci95: tuple[float, float] | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def off_teacher_effect(run_dir: Path, group_size: int) -> OffTeacherEffect | None:
    """The effect in the training run `run_dir` (its steps.jsonl and episodes.jsonl; envs in rollout groups of
    `group_size`); None for a policy that decided without a teacher. A rerun episode's rows replace the first."""
    off: dict[int, dict[int, bool]] = defaultdict(dict)
    for row in read_rows(run_dir / StepRow.FILE, StepRow):
        if AS_TEACHER in row.reason or OVERRIDES_TEACHER in row.reason:
            off[row.episode][row.epoch] = OVERRIDES_TEACHER in row.reason
    if not off:
        return None
    episodes = {e.episode: e for e in read_rows(run_dir / EpisodeResult.FILE, EpisodeResult)}
    groups: dict[tuple[int, int], list[EpisodeResult]] = defaultdict(list)
    for episode in episodes.values():
        groups[(episode.batch, episode.env_id // group_size)].append(episode)
    for (batch, group), members in groups.items():
        if len({e.env_seed for e in members}) > 1:
            raise ValueError(f"{run_dir}: batch {batch}'s group {group} holds episodes of different host seeds: "
                             f"its group size is not {group_size}")
    counts = {i: sum(off[i].values()) for i in episodes}
    fit = within_group_slope([[(float(counts[e.episode]), e.total_reward) for e in members]
                              for members in groups.values()])
    return OffTeacherEffect(decisions=sum(counts.values()), deviating=sum(c > 0 for c in counts.values()),
                            episodes=len(episodes), per_decision=None if fit is None else fit[0],
                            ci95=None if fit is None else fit[1])
