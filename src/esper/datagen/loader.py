"""From episode files to a `TransitionDataset`: the offline learners' and off-policy evaluators' input.

Step t of an episode becomes the row (features_t, joint action_t, reward_t, features_{t+1}, done_t): the next state
of the last decision is the episode's final measurement (`final_features`, schema 2.1.0), and nothing can follow a
terminal state, so its next valid-action mask is empty. Rewards come from one stored source:

* `gap` (default): the stored reward, growth's lead over the static twin per parameter added (schema 2.1.0 only);
* `accuracy`: `RewardComponents.total(gamma, shaping_weight)`, the older accuracy-shaped reward;
* `contribution`: the contribution family's total (`shaped_reward.total`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from esper.datagen.configs import RewardComponents
from esper.datagen.reader import read_episodes
from esper.datagen.schema import recorded_space
from esper.datagen.transitions import TransitionDataset
from esper.leyline import OBS_SCHEMA
from esper.leyline.constants import DEFAULT_GAMMA
from esper.leyline.errors import UserInputError

__all__ = ["REWARD_SOURCES", "load_transitions"]

REWARD_SOURCES: tuple[str, ...] = ("gap", "accuracy", "contribution")
_COMPONENT_FIELDS = tuple(f.name for f in dataclasses.fields(RewardComponents))


def _number(value: Any) -> float:
    """Stored numbers; null (a non-finite value on disk) reads as NaN, which the dataset then rejects by row."""
    return float("nan") if value is None else float(value)


def _reward(episode: Mapping[str, Any], decision: Mapping[str, Any], source: str, gamma: float,
            shaping_weight: float) -> float:
    action = decision["action"]
    if source == "gap":
        if episode["schema_version"] == "2.0.0":
            raise UserInputError(f"Episode {episode['episode_id']} (schema 2.0.0) stores no gap reward; load it with "
                                 "reward_source='accuracy' or 'contribution', or regenerate the data")
        return _number(action["reward_components"]["gap"])
    if source == "accuracy":
        stored = action["reward_components"]
        components = RewardComponents(**{k: _number(stored[k]) for k in _COMPONENT_FIELDS if k in stored})
        return components.total(gamma, shaping_weight)
    shaped = action.get("shaped_reward")
    if not isinstance(shaped, Mapping) or "total" not in shaped:
        raise UserInputError(f"Episode {episode['episode_id']} stores no contribution-family reward (shaped_reward)")
    return _number(shaped["total"])


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
    shaping_weight: float = 1.0,
    gamma: float = DEFAULT_GAMMA,
    device: str | torch.device = "cpu",
) -> TransitionDataset:
    """Every decision of the episodes in `dirs` as one validated dataset (episodes numbered in reading order).

    `reward_scale` multiplies the chosen reward; `gamma` and `shaping_weight` only shape the `accuracy` source.
    Episodes of another observation schema, action space (topology and blueprint head) or slot set than the others
    are rejected.
    """
    if reward_source not in REWARD_SOURCES:
        raise UserInputError(f"Unknown reward_source '{reward_source}'. Available: {', '.join(REWARD_SOURCES)}")
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
        if episode["schema_version"] == "2.0.0":
            final = features[-1]  # 2.0.0 has no final measurement; a terminal row's next state is never used
        else:
            final = [_number(v) for v in episode["final_features"]]
        masks = [list(d["valid_joint_actions"]) for d in decisions]
        for t, decision in enumerate(decisions):
            last = t == len(decisions) - 1
            states.append(features[t])
            next_states.append(final if last else features[t + 1])
            actions.append(int(decision["action"]["joint_index"]))
            rewards.append(reward_scale * _reward(episode, decision, reward_source, gamma, shaping_weight))
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
