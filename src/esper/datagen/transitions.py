"""TransitionDataset: logged decisions as validated tensors, the input of offline learners and off-policy evaluation.

One row is one decision (s, a, r, s', done) of one episode, plus what offline methods need beyond a replay buffer:
the valid joint actions at s and s' (a learned policy must never be trained towards, or evaluated on, an action the
environment would refuse), the log-probability the behaviour policy gave the logged action (importance sampling),
and the episode id and step index (per-decision estimators and bootstrap over episodes). Everything is checked
once at construction, so a learner never discovers a NaN reward or an impossible action thousands of steps later.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from esper.env.features import obs_dim
from esper.kasmina.blueprints import DEFAULT_REGISTRY
from esper.leyline import CANONICAL_SLOTS, OBS_SCHEMA, ActionSpace, ordered_slots
from esper.leyline.errors import UserInputError

__all__ = ["EpisodeIndex", "TransitionBatch", "TransitionDataset"]

_FLOAT_FIELDS = ("states", "rewards", "next_states", "behavior_logp")


@dataclass(frozen=True, slots=True)
class TransitionBatch:
    """A minibatch of transitions (the tensors an update step reads), all on the dataset's device."""

    states: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_states: torch.Tensor
    dones: torch.Tensor
    valid: torch.Tensor
    next_valid: torch.Tensor


@dataclass(frozen=True, slots=True)
class EpisodeIndex:
    """Row indices of every episode in step order, padded to the longest episode with -1.

    `rows[e, t]` is the dataset row of step t of the e-th episode (episodes sorted by id); `lengths[e]` its length.
    """

    episode_ids: torch.Tensor  # [E] long
    rows: torch.Tensor  # [E, T] long, -1 past an episode's end
    lengths: torch.Tensor  # [E] long

    @property
    def first_rows(self) -> torch.Tensor:
        """Dataset row of each episode's first decision (its initial state)."""
        return self.rows[:, 0]


@dataclass(frozen=True, eq=False)
class TransitionDataset:
    """Logged transitions; the constructor validates everything and raises one ValueError naming the problem.

    Shapes: states and next_states [N, F] float32, actions [N] long joint indices, rewards [N] float32, dones [N]
    bool, valid and next_valid [N, J] bool (F features and J joint actions of `space`: 80 and 43 for the built-in
    CNN blueprints), behavior_logp [N] float32 (log of the joint behaviour probability of
    the logged action), episode_ids and step_indices [N] long. Every episode holds steps 0 … L-1 and ends with its
    only terminal transition; a non-terminal row's next state and next mask are those of the episode's next row.
    `behavior_policies` optionally maps each episode id to the id of the behaviour policy that logged it, and
    `episode_names` to the episode's name in its dataset (its file name), so results can point back to the data.
    """

    states: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_states: torch.Tensor
    dones: torch.Tensor
    valid: torch.Tensor
    next_valid: torch.Tensor
    behavior_logp: torch.Tensor
    episode_ids: torch.Tensor
    step_indices: torch.Tensor
    feature_schema: str = OBS_SCHEMA
    space: ActionSpace = field(default_factory=lambda: DEFAULT_REGISTRY.action_space("cnn"))
    slots: tuple[str, ...] = CANONICAL_SLOTS
    behavior_policies: Mapping[int, str] = field(default_factory=dict)
    episode_names: Mapping[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problem = self._problem()
        if problem is not None:
            raise UserInputError(f"Invalid transition dataset: {problem}")
        object.__setattr__(self, "slots", ordered_slots(self.slots))

    @property
    def topology(self) -> str:
        return self.space.topology

    # ------------------------------------------------------------------------------------------------ validation
    def _problem(self) -> str | None:
        """The first thing wrong with the dataset (shape, dtype, value, episode structure), or None."""
        if self.feature_schema != OBS_SCHEMA:
            return (f"feature schema {self.feature_schema!r} does not match this version's {OBS_SCHEMA!r}; "
                    f"regenerate the data or use the esper version that wrote it")
        if self.actions.dim() != 1:
            return f"actions must be a 1-D tensor of joint indices, got shape {tuple(self.actions.shape)}"
        n = int(self.actions.shape[0])
        if n == 0:
            return "it is empty (no transitions); point it at a directory holding episode files"
        features, joint = obs_dim(self.space), self.space.num_joint_actions
        shapes = {
            "states": (n, features), "actions": (n,), "rewards": (n,), "next_states": (n, features), "dones": (n,),
            "valid": (n, joint), "next_valid": (n, joint), "behavior_logp": (n,),
            "episode_ids": (n,), "step_indices": (n,),
        }
        for name, shape in shapes.items():
            tensor: torch.Tensor = getattr(self, name)
            if tuple(tensor.shape) != shape:
                return (f"{name} has shape {tuple(tensor.shape)}, expected {shape} (schema {OBS_SCHEMA} with blueprint "
                        f"head {list(self.space.head)}: {features} features, {joint} joint actions)")
        kinds = {name: torch.float32 for name in _FLOAT_FIELDS}
        kinds.update(actions=torch.long, episode_ids=torch.long, step_indices=torch.long,
                     dones=torch.bool, valid=torch.bool, next_valid=torch.bool)
        for name, dtype in kinds.items():
            if getattr(self, name).dtype != dtype:
                return f"{name} has dtype {getattr(self, name).dtype}, expected {dtype}"
        for name in _FLOAT_FIELDS:
            bad = ~torch.isfinite(getattr(self, name))
            if bool(bad.any()):
                row = int(bad.reshape(n, -1).any(dim=1).nonzero()[0])
                return f"{name} holds NaN or infinite values ({int(bad.sum())} of them, first in row {row})"
        if bool((self.behavior_logp > 1e-6).any()):
            return "behavior_logp must be log-probabilities (<= 0)"
        if bool(((self.actions < 0) | (self.actions >= joint)).any()):
            return f"actions must be joint indices in [0, {joint})"
        if not bool(self.valid.any(dim=1).all()):
            row = int((~self.valid.any(dim=1)).nonzero()[0])
            return f"valid has rows with no valid action (first: row {row}); every state allows at least WAIT"
        logged_valid = self.valid.gather(1, self.actions.unsqueeze(1)).squeeze(1)
        if not bool(logged_valid.all()):
            row = int((~logged_valid).nonzero()[0])
            return f"row {row}: logged action {int(self.actions[row])} is invalid under its own valid-action mask"
        if not bool((self.next_valid.any(dim=1) | self.dones).all()):
            return "next_valid has non-terminal rows with no valid action"
        return self._episode_problem()

    def _episode_problem(self) -> str | None:
        order = _episode_order(self.episode_ids, self.step_indices)
        eps, steps, dones = self.episode_ids[order], self.step_indices[order], self.dones[order]
        starts = torch.ones_like(eps, dtype=torch.bool)
        starts[1:] = eps[1:] != eps[:-1]
        ends = torch.ones_like(starts)
        ends[:-1] = starts[1:]
        expected = torch.arange(len(eps), device=eps.device)
        first = torch.cummax(torch.where(starts, expected, 0), dim=0).values
        if not bool((steps == expected - first).all()):
            bad = int(eps[(steps != expected - first).nonzero()[0]])
            return f"episode {bad} does not hold steps 0 … L-1 exactly once each"
        if not bool((dones == ends).all()):
            bad = int(eps[(dones != ends).nonzero()[0]])
            return f"episode {bad} must end with its only terminal transition (done=True on the last step only)"
        current, successor = order[~ends], order[1:][~ends[:-1]]
        if not (torch.equal(self.next_states[current], self.states[successor])
                and torch.equal(self.next_valid[current], self.valid[successor])):
            return "a non-terminal row's next_states/next_valid differ from the state/mask of the episode's next step"
        ids = set(torch.unique(self.episode_ids).tolist())
        if self.behavior_policies and set(self.behavior_policies) != ids:
            return "behavior_policies must name the behaviour policy of every episode id, and only those"
        if self.episode_names and set(self.episode_names) != ids:
            return "episode_names must name every episode id, and only those"
        return None

    # ------------------------------------------------------------------------------------------------ access
    def __len__(self) -> int:
        return int(self.actions.shape[0])

    @property
    def state_dim(self) -> int:
        return int(self.states.shape[1])

    @property
    def device(self) -> torch.device:
        return self.states.device

    @property
    def num_episodes(self) -> int:
        return int(torch.unique(self.episode_ids).numel())

    def to(self, device: str | torch.device) -> TransitionDataset:
        tensors = {f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                   if isinstance(getattr(self, f.name), torch.Tensor)}
        return dataclasses.replace(self, **tensors)

    def batch(self, rows: torch.Tensor) -> TransitionBatch:
        """The transitions at `rows` (a long tensor of row indices)."""
        rows = rows.to(self.device)
        return TransitionBatch(self.states[rows], self.actions[rows], self.rewards[rows], self.next_states[rows],
                               self.dones[rows], self.valid[rows], self.next_valid[rows])

    def sample(self, batch_size: int, generator: torch.Generator) -> TransitionBatch:
        """A uniform minibatch drawn with replacement from `generator` (a CPU generator, so resumes are portable)."""
        if batch_size < 1:
            raise UserInputError(f"batch_size must be >= 1, got {batch_size}")
        return self.batch(torch.randint(len(self), (batch_size,), generator=generator))

    def episode_index(self) -> EpisodeIndex:
        order = _episode_order(self.episode_ids, self.step_indices).cpu()
        eps = self.episode_ids.cpu()[order]
        ids, lengths = torch.unique_consecutive(eps, return_counts=True)
        rows = torch.full((len(ids), int(lengths.max())), -1, dtype=torch.long)
        starts = torch.cumsum(lengths, 0) - lengths
        position = torch.arange(len(eps)) - torch.repeat_interleave(starts, lengths)
        rows[torch.repeat_interleave(torch.arange(len(ids)), lengths), position] = order
        return EpisodeIndex(ids, rows, lengths)



def _episode_order(episode_ids: torch.Tensor, step_indices: torch.Tensor) -> torch.Tensor:
    """Row order sorted by (episode id, step index)."""
    by_step = torch.argsort(step_indices, stable=True)
    return by_step[torch.argsort(episode_ids[by_step], stable=True)]
