"""A toy two-step decision problem with a known best action, for offline RL and off-policy evaluation tests.

Step 0 starts in one of three states, each with its own valid joint actions, a *best* action and a *lure*. The lure
pays 0.3 at once but leads to a dead-end state; the best action pays nothing at once but leads to a state whose
step pays 1.0 whatever is done there; any other valid action pays nothing and leads to the dead end. The behaviour
policy picks the lure 70 % of the time, the best action 20 % and the rest uniformly; at step 1 it picks uniformly.
So cloning the behaviour chooses the lure, and the best action's value (1.0) beats the lure's (0.3).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from esper.data.tasks import get_task_spec
from esper.datagen import TransitionDataset
from esper.env.features import obs_dim

CNN = get_task_spec("synthetic").action_space
NUM_JOINT_ACTIONS, OBS_DIM = CNN.num_joint_actions, obs_dim(CNN)  # 43 and 80 with the built-in blueprints

Policy = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# start state -> (valid joint actions, best, lure)
START = {0: ((0, 1, 13, 37), 13, 0), 1: ((0, 2, 38, 40), 40, 2), 2: ((0, 5, 25), 0, 25)}
GOOD, DEAD = 3, 4
FOLLOW_UP_ACTIONS = (0, 41)
LURE_REWARD, GOOD_REWARD = 0.3, 1.0
P_LURE, P_BEST = 0.7, 0.2
VALUE = {"best": GOOD_REWARD, "lure": LURE_REWARD, "behavior": P_BEST * GOOD_REWARD + P_LURE * LURE_REWARD}
"""Undiscounted value of each policy from any start state."""


def encode(state: int, step: int) -> torch.Tensor:
    x = torch.zeros(OBS_DIM)
    x[0] = step / 2.0
    x[10 + state] = 1.0
    return x


def mask(actions: tuple[int, ...]) -> torch.Tensor:
    m = torch.zeros(NUM_JOINT_ACTIONS, dtype=torch.bool)
    m[list(actions)] = True
    return m


def state_of(states: torch.Tensor) -> torch.Tensor:
    """Decode the discrete state from encoded rows [N, 80]."""
    return states[:, 10:15].argmax(dim=1)


def behavior_probs(states: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """The behaviour policy's probabilities of every joint action [N, 43] at raw states."""
    probs = torch.zeros(len(states), NUM_JOINT_ACTIONS)
    for i, s in enumerate(state_of(states).tolist()):
        if s in START:
            actions, best, lure = START[s]
            others = [a for a in actions if a not in (best, lure)]
            probs[i, others] = (1.0 - P_LURE - P_BEST) / len(others)
            probs[i, best], probs[i, lure] = P_BEST, P_LURE
        else:
            probs[i, list(FOLLOW_UP_ACTIONS)] = 1.0 / len(FOLLOW_UP_ACTIONS)
    return probs


def fixed_policy(kind: str) -> Policy:
    """`best` or `lure` at the start states (the first follow-up action afterwards), as one-hot probabilities."""
    def probs(states: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(len(states), NUM_JOINT_ACTIONS)
        for i, s in enumerate(state_of(states).tolist()):
            out[i, START[s][1 if kind == "best" else 2] if s in START else FOLLOW_UP_ACTIONS[0]] = 1.0
        return out
    return probs


def toy_dataset(n_episodes: int, seed: int = 0, reward_noise: float = 0.0) -> TransitionDataset:
    """Episodes logged by the behaviour policy, start states cycling through the three; `reward_noise` adds
    zero-mean Gaussian noise of that standard deviation to the follow-up step's reward."""
    g = torch.Generator().manual_seed(seed)
    rows: dict[str, list[torch.Tensor]] = {k: [] for k in ("s", "a", "r", "s2", "d", "m", "m2", "lp", "e", "t")}

    def add(e: int, t: int, s: int, a: int, r: float, s2: int, m: torch.Tensor, m2: torch.Tensor, p: float) -> None:
        for key, value in (("s", encode(s, t)), ("a", torch.tensor(a)), ("r", torch.tensor(r)),
                           ("s2", encode(s2, t + 1)), ("d", torch.tensor(t == 1)), ("m", m), ("m2", m2),
                           ("lp", torch.tensor(p).log()), ("e", torch.tensor(e)), ("t", torch.tensor(t))):
            rows[key].append(value)

    for e in range(n_episodes):
        start = e % len(START)
        actions, best, lure = START[start]
        probs = behavior_probs(encode(start, 0).unsqueeze(0), mask(actions).unsqueeze(0))[0]
        a = int(torch.multinomial(probs, 1, generator=g))
        nxt = GOOD if a == best else DEAD
        follow = mask(FOLLOW_UP_ACTIONS)
        add(e, 0, start, a, LURE_REWARD if a == lure else 0.0, nxt, mask(actions), follow, float(probs[a]))
        a2 = FOLLOW_UP_ACTIONS[int(torch.randint(2, (1,), generator=g))]
        noise = reward_noise * float(torch.randn(1, generator=g))
        add(e, 1, nxt, a2, (GOOD_REWARD if nxt == GOOD else 0.0) + noise, nxt, follow, follow, 0.5)
    return TransitionDataset(
        states=torch.stack(rows["s"]), actions=torch.stack(rows["a"]).long(), rewards=torch.stack(rows["r"]).float(),
        next_states=torch.stack(rows["s2"]), dones=torch.stack(rows["d"]), valid=torch.stack(rows["m"]),
        next_valid=torch.stack(rows["m2"]), behavior_logp=torch.stack(rows["lp"]).float(),
        episode_ids=torch.stack(rows["e"]).long(), step_indices=torch.stack(rows["t"]).long(),
    )


def episodes_subset(data: TransitionDataset, episode_ids: torch.Tensor) -> TransitionDataset:
    """The sub-dataset of whole episodes whose ids are in `episode_ids`."""
    keep = torch.isin(data.episode_ids, episode_ids)
    tensors = {f.name: getattr(data, f.name)[keep] for f in dataclasses.fields(data)
               if isinstance(getattr(data, f.name), torch.Tensor)}
    chosen = set(episode_ids.tolist())
    return dataclasses.replace(data, **tensors,
                               behavior_policies={k: v for k, v in data.behavior_policies.items() if k in chosen},
                               episode_names={k: v for k, v in data.episode_names.items() if k in chosen})
