"""The episode loop in one process: controllers decide between the two halves of every epoch of a `Lockstep`.

`run_episodes` runs whole episodes for envs whose controllers live beside them (datagen, tests); `decide_all` is the
decision step every runner shares, the env pool included, whose envs live elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from esper.env.env import MorphoEnv
from esper.env.lockstep import EnvStep, EpochData, Lockstep
from esper.env.logs import EpisodeResult
from esper.env.rewards import RewardFn
from esper.leyline import EnvObservation
from esper.tamiyo import BatchTamiyoPolicy, TamiyoDecision, TamiyoPolicy

StepCallback = Callable[[list[EnvStep]], None]


def decide_all(controllers: Sequence[TamiyoPolicy], observations: Sequence[EnvObservation]) -> list[TamiyoDecision]:
    """One decision per env; a controller shared by several envs decides for all of them in one batch (the decisions
    are checked against the validity rules when `Lockstep.apply` executes them)."""
    decisions: list[TamiyoDecision | None] = [None] * len(observations)
    groups: dict[int, list[int]] = {}
    for i, controller in enumerate(controllers):
        groups.setdefault(id(controller), []).append(i)
    for indices in groups.values():
        controller = controllers[indices[0]]
        obs = [observations[i] for i in indices]
        if isinstance(controller, BatchTamiyoPolicy):
            made = controller.decide_batch(obs)
        else:
            made = [controller.decide(o) for o in obs]
        for i, decision in zip(indices, made, strict=True):
            decisions[i] = decision
    return [d for d in decisions if d is not None]


def run_epoch(lockstep: Lockstep, controllers: Sequence[TamiyoPolicy]) -> list[EnvStep]:
    """Advance the envs (and their twins) by one epoch, `controllers[i]` deciding for env i; returns the transitions
    this epoch completed."""
    measured = lockstep.measure()
    lockstep.apply(None if measured.last else decide_all(controllers, measured.observations))
    return measured.steps


def run_episodes(envs: Sequence[MorphoEnv], controllers: Sequence[TamiyoPolicy], data: EpochData,
                 reward_fn: RewardFn, on_step: StepCallback | None = None,
                 should_stop: Callable[[], bool] | None = None) -> list[EpisodeResult]:
    """Run whole episodes (all envs and their twins in lock-step) and return one result per env."""
    if len(envs) != len(controllers):
        raise ValueError(f"{len(envs)} envs but {len(controllers)} controllers")
    lockstep = Lockstep(envs, data, reward_fn)
    for _ in range(lockstep.max_epochs):
        steps = run_epoch(lockstep, controllers)
        if on_step is not None and steps:
            on_step(steps)
        if should_stop is not None and should_stop():
            break
    return [env.result() for env in envs]
