"""Lifecycle potential and potential-based reward shaping.

Kept apart from the reward families because every family logs Φ and the telescoping property is tested on it alone.
Shaping of the transition from decision state S to next state S' is F = w·(γ·Φ(S') − Φ(S)) over the lifecycle of all
enabled slots, with Φ = 0 for the terminal state. That makes it policy-invariant (Ng et al., 1999): an episode's
discounted shaping sums to −Φ(S_1), whatever the policy did, so shaping can guide exploration but never pays for
ending an episode with seeds in flight (a germination at the last decision earns only −Φ).
"""

from __future__ import annotations

from esper.leyline.actions import ordered_slots
from esper.leyline.errors import UserInputError
from esper.leyline.stages import SeedStage

__all__ = [
    "STAGE_POTENTIALS",
    "LifecycleSnapshot",
    "lifecycle_potential",
    "pbrs_shaping",
    "slot_potential",
]

# One entry per enabled slot: (slot_id, stage value, epochs in current stage); an empty slot is (slot_id, 0, 0).
LifecycleSnapshot = tuple[tuple[str, int, int], ...]

STAGE_POTENTIALS: dict[SeedStage, float] = {
    SeedStage.UNKNOWN: 0.0,
    SeedStage.DORMANT: 0.0,
    SeedStage.GERMINATED: 1.0,
    SeedStage.TRAINING: 2.0,
    SeedStage.BLENDING: 3.5,
    SeedStage.PROBATIONARY: 5.5,
    SeedStage.FOSSILIZED: 6.0,
}
EPOCH_POTENTIAL = 0.3  # per epoch spent in the stage: progress inside a stage is worth something
MAX_EPOCH_POTENTIAL = 2.0  # capped so stalling in a stage cannot accumulate unbounded potential
_EMPTY = (SeedStage.UNKNOWN, SeedStage.DORMANT)


def slot_potential(stage: int, epochs_in_stage: int) -> float:
    """φ(stage, n) = P[stage] + min(0.3·n, 2.0) for an occupied slot; 0 for an empty one.

    Failure stages raise: a slot never holds a seed in them, so seeing one means the snapshot is wrong.
    """
    if epochs_in_stage < 0:
        raise ValueError(f"epochs_in_stage must be >= 0, got {epochs_in_stage}")
    seed_stage = SeedStage(stage)
    if seed_stage in _EMPTY:
        return 0.0
    if seed_stage not in STAGE_POTENTIALS:
        raise ValueError(f"No potential for stage {seed_stage.name}: slots never hold seeds in failure stages")
    return STAGE_POTENTIALS[seed_stage] + min(EPOCH_POTENTIAL * epochs_in_stage, MAX_EPOCH_POTENTIAL)


def lifecycle_potential(snapshot: LifecycleSnapshot) -> float:
    """Φ(S): sum of slot potentials over every enabled slot."""
    ordered_slots(slot for slot, _, _ in snapshot)  # rejects unknown and duplicate slots
    return sum(slot_potential(stage, n) for _, stage, n in snapshot)


def pbrs_shaping(
    prev_snapshot: LifecycleSnapshot, next_snapshot: LifecycleSnapshot, gamma: float, weight: float, *,
    terminal: bool = False,
) -> float:
    """w·(γ·Φ(S') − Φ(S)), with Φ(S') = 0 when S' is terminal; both snapshots must cover the same enabled slots."""
    if not 0.0 < gamma <= 1.0:
        raise UserInputError(f"gamma must be in (0, 1], got {gamma}")
    prev_slots = {slot for slot, _, _ in prev_snapshot}
    next_slots = {slot for slot, _, _ in next_snapshot}
    if prev_slots != next_slots:
        raise ValueError(f"Snapshots cover different slots: {sorted(prev_slots)} vs {sorted(next_slots)}")
    next_potential = 0.0 if terminal else lifecycle_potential(next_snapshot)
    return weight * (gamma * next_potential - lifecycle_potential(prev_snapshot))
