"""TransitionDataset: validation (one clear ValueError per problem), sampling, episode structure and splits."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from esper.data.tasks import get_task_spec
from esper.datagen import TransitionDataset
from esper.env.features import obs_dim
from unit.offline_toy import toy_dataset

CNN = get_task_spec("synthetic").action_space
NUM_JOINT_ACTIONS, OBS_DIM = CNN.num_joint_actions, obs_dim(CNN)  # 43 and 80 with the built-in blueprints


@pytest.fixture(scope="module")
def data() -> TransitionDataset:
    return toy_dataset(12)


def _fields(ds: TransitionDataset) -> dict[str, Any]:
    return {f.name: getattr(ds, f.name) for f in dataclasses.fields(ds)}


def _with(ds: TransitionDataset, **changes: Any) -> dict[str, Any]:
    return {**{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in _fields(ds).items()}, **changes}


def _set(name: str, row: int, value: Any) -> Callable[[TransitionDataset], dict[str, Any]]:
    def mutate(ds: TransitionDataset) -> dict[str, Any]:
        fields = _with(ds)
        fields[name][row] = value
        return fields
    return mutate


BAD_INPUTS: list[tuple[str, Callable[[TransitionDataset], dict[str, Any]], str]] = [
    ("empty", lambda ds: {k: v[:0] if isinstance(v, torch.Tensor) else v for k, v in _fields(ds).items()},
     "empty"),
    ("schema name", lambda ds: _with(ds, feature_schema="esper-obs-v0"), "feature schema 'esper-obs-v0'"),
    ("feature count", lambda ds: _with(ds, states=ds.states[:, :50].clone()), r"states has shape \(24, 50\)"),
    ("all-invalid mask", _set("valid", 3, torch.zeros(NUM_JOINT_ACTIONS, dtype=torch.bool)), "no valid action"),
    ("NaN reward", _set("rewards", 5, float("nan")), "rewards holds NaN"),
    ("infinite state", _set("states", 2, torch.full((OBS_DIM,), float("inf"))), "states holds NaN"),
    ("invalid logged action", _set("actions", 0, 42), "invalid under its own valid-action mask"),
    ("action out of range", _set("actions", 0, NUM_JOINT_ACTIONS), "joint indices"),
    ("probability > 1", _set("behavior_logp", 0, 0.5), "<= 0"),
    ("wrong dtype", lambda ds: _with(ds, actions=ds.actions.int()), "dtype"),
    ("duplicate step", _set("step_indices", 1, 0), "steps 0 … L-1"),
    ("early terminal", _set("dones", 0, True), "only terminal"),
    ("missing terminal", _set("dones", 1, False), "only terminal"),
    ("broken chain", _set("next_states", 0, torch.zeros(OBS_DIM)), "next step"),
    ("partial policy map", lambda ds: _with(ds, behavior_policies={0: "baseline"}), "behavior_policies"),
]


@pytest.mark.parametrize(("mutate", "message"), [(m, msg) for _, m, msg in BAD_INPUTS],
                         ids=[name for name, _, _ in BAD_INPUTS])
def test_bad_input_raises_one_clear_error(data: TransitionDataset, mutate: Callable[..., dict[str, Any]],
                                          message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        TransitionDataset(**mutate(data))
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert str(info.value).startswith("Invalid transition dataset: ") and "\n" not in str(info.value)


def test_valid_dataset_properties(data: TransitionDataset) -> None:
    assert len(data) == 24 and data.num_episodes == 12 and data.state_dim == OBS_DIM
    assert data.slots == ("early", "mid", "late")


def test_sample_is_seeded_uniform_and_shaped(data: TransitionDataset) -> None:
    a = data.sample(64, torch.Generator().manual_seed(3))
    b = data.sample(64, torch.Generator().manual_seed(3))
    assert torch.equal(a.states, b.states) and torch.equal(a.actions, b.actions)
    assert a.states.shape == (64, OBS_DIM) and a.valid.shape == (64, NUM_JOINT_ACTIONS) and a.dones.dtype == torch.bool
    assert bool(a.valid.gather(1, a.actions.unsqueeze(1)).all())
    with pytest.raises(ValueError, match="batch_size"):
        data.sample(0, torch.Generator())


def test_episode_index_orders_steps(data: TransitionDataset) -> None:
    perm = torch.randperm(len(data), generator=torch.Generator().manual_seed(1))
    fields: dict[str, Any] = {k: v[perm] if isinstance(v, torch.Tensor) else v for k, v in _fields(data).items()}
    shuffled = TransitionDataset(**fields)
    index = shuffled.episode_index()
    assert index.episode_ids.tolist() == list(range(12)) and index.lengths.tolist() == [2] * 12
    assert shuffled.step_indices[index.rows].tolist() == [[0, 1]] * 12
    assert torch.equal(shuffled.episode_ids[index.first_rows], index.episode_ids)


@given(lengths=st.lists(st.integers(1, 5), min_size=1, max_size=6), seed=st.integers(0, 1000))
def test_any_shuffled_episode_layout_round_trips(lengths: list[int], seed: int) -> None:
    """Rows in any order: validation accepts them and the episode index recovers every episode in step order."""
    n = sum(lengths)
    eps = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    steps = torch.cat([torch.arange(k) for k in lengths])
    states = torch.randn(n + len(lengths), OBS_DIM, generator=torch.Generator().manual_seed(seed))
    # row i of episode e uses state slot (i + e): consecutive steps chain, the terminal next state is its own slot
    slot = torch.arange(n) + eps
    valid = torch.ones(n + len(lengths), NUM_JOINT_ACTIONS, dtype=torch.bool)
    ends = torch.cumsum(torch.tensor(lengths), 0) - 1
    dones = torch.zeros(n, dtype=torch.bool)
    dones[ends] = True
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    ds = TransitionDataset(states=states[slot][perm], actions=torch.zeros(n, dtype=torch.long)[perm],
                           rewards=torch.zeros(n)[perm], next_states=states[slot + 1][perm], dones=dones[perm],
                           valid=valid[slot][perm], next_valid=valid[slot + 1][perm],
                           behavior_logp=torch.zeros(n)[perm], episode_ids=eps[perm], step_indices=steps[perm])
    index = ds.episode_index()
    assert index.lengths.tolist() == lengths
    for e, k in enumerate(lengths):
        assert ds.step_indices[index.rows[e, :k]].tolist() == list(range(k))
        assert bool((index.rows[e, k:] == -1).all())
