"""From episode files to a `TransitionDataset`: the offline learners' and off-policy evaluators' input.

Step t of an episode becomes the row (features_t, joint action_t, reward_t, features_{t+1}, done_t): the next state
of the last decision is the episode's final measurement (`final_features`), and nothing can follow a terminal state,
so its next valid-action mask is empty. reward_t is the decision's total in one reward family of the episode layer
(`esper.env.rewards.RewardFamily`), all of which every episode records: `gap` (default; growth's lead over the static
twin, net of the parameters and interventions it cost, the reward the episodes ran with), `contribution`, `loss` or
`sparse`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from esper.datagen.reader import read_episodes
from esper.datagen.schema import REWARD_FAMILIES, recorded_space
from esper.datagen.transitions import TransitionDataset
from esper.leyline import OBS_SCHEMA
from esper.leyline.errors import UserInputError, did_you_mean

__all__ = ["load_transitions"]


def _number(value: Any) -> float:
    """Stored numbers; null (a non-finite value on disk) reads as NaN, which the dataset then rejects by row."""
    return float("nan") if value is None else float(value)


def _common(episodes: Sequence[Mapping[str, Any]], key: str) -> Any:
    values = {repr(e.get(key)): e.get(key) for e in episodes}
    if len(values) != 1:
        raise UserInputError(f"The episodes mix {key} values {sorted(values)}; load datasets of one {key} together")
    return next(iter(values.values()))


def load_transitions(
    dirs: str | Path | Sequence[str | Path],
    reward_source: str = "gap",
    *,
    reward_scale: float = 1.0,
    device: str | torch.device = "cpu",
) -> TransitionDataset:
    """Every decision of the episodes in `dirs` as one validated dataset (episodes numbered in reading order), its
    rewards `reward_scale` × the `reward_source` family's totals.

    Episodes of another observation schema, action space (topology and blueprint head) or slot set than the others
    are rejected.
    """
    if reward_source not in REWARD_FAMILIES:
        raise UserInputError(f"Unknown reward_source '{reward_source}'{did_you_mean(reward_source, REWARD_FAMILIES)}. "
                             f"Available: {', '.join(REWARD_FAMILIES)}")
    episodes = read_episodes(dirs)
    spaces = {recorded_space(e) for e in episodes}
    if len(spaces) != 1:
        raise UserInputError(f"The episodes come from {len(spaces)} action spaces "
                             f"{sorted((s.topology, list(s.head)) for s in spaces)}; load datasets of one topology and "
                             f"blueprint set together")
    space = spaces.pop()
    slots = tuple(_common(episodes, "enabled_slots"))
    states: list[list[float]] = []
    next_states: list[list[float]] = []
    actions: list[int] = []
    rewards: list[float] = []
    dones: list[bool] = []
    valid: list[list[bool]] = []
    next_valid: list[list[bool]] = []
    logp: list[float] = []
    episode_ids: list[int] = []
    steps: list[int] = []
    policies: dict[int, str] = {}
    names: dict[int, str] = {}
    no_action = [False] * space.num_joint_actions
    for index, episode in enumerate(episodes):
        decisions = episode["decisions"]
        features = [[_number(v) for v in d["observation"]["features"]] for d in decisions]
        final = [_number(v) for v in episode["final_features"]]
        masks = [list(d["valid_joint_actions"]) for d in decisions]
        for t, decision in enumerate(decisions):
            last = t == len(decisions) - 1
            states.append(features[t])
            next_states.append(final if last else features[t + 1])
            actions.append(int(decision["action"]["joint_index"]))
            rewards.append(reward_scale * _number(decision["rewards"][reward_source]["total"]))
            dones.append(last)
            valid.append(masks[t])
            next_valid.append(no_action if last else masks[t + 1])
            logp.append(_number(decision["action"]["joint_behavior_logp"]))
            episode_ids.append(index)
            steps.append(t)
        policies[index] = str(episode["behavior_policy"]["policy_id"])
        names[index] = str(episode["episode_id"])
    return TransitionDataset(
        states=torch.tensor(states, dtype=torch.float32, device=device),
        actions=torch.tensor(actions, dtype=torch.long, device=device),
        rewards=torch.tensor(rewards, dtype=torch.float32, device=device),
        next_states=torch.tensor(next_states, dtype=torch.float32, device=device),
        dones=torch.tensor(dones, dtype=torch.bool, device=device),
        valid=torch.tensor(valid, dtype=torch.bool, device=device),
        next_valid=torch.tensor(next_valid, dtype=torch.bool, device=device),
        behavior_logp=torch.tensor(logp, dtype=torch.float32, device=device),
        episode_ids=torch.tensor(episode_ids, dtype=torch.long, device=device),
        step_indices=torch.tensor(steps, dtype=torch.long, device=device),
        feature_schema=OBS_SCHEMA,
        space=space,
        slots=slots,
        behavior_policies=policies,
        episode_names=names,
    )
