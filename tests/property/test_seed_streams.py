"""One seed rule: PPO's training episodes, a study's selection episodes and its held-out evaluation episodes never
share a host or a data seed, for every allowed `n_envs` and group size; nor do a study's training runs; nor do a
recorded selection's seeds and the held-out and training seeds of a study of another base seed that reuses it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esper.cli.study import MAX_STUDY_SEEDS
from esper.evaluation.episodes import paired_seeds
from esper.evaluation.study import evaluation_plan
from esper.leyline.seeding import MAX_BASE_SEED, SeedStream, derive_seed, run_seed
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.ppo_config import MAX_ENVS
from esper.simic.ppo.settings import group_data_seeds
from esper.simic.ppo.train import batch_seeds

EPISODES = 1024  # a long run: 1,024 batches at n_envs = 1, enough to reach any fixed seed offset of the past


def _held_out(seed: int, stream: SeedStream) -> tuple[set[int], set[int]]:
    plan = evaluation_plan(TrainingConfig.from_dict({"seed": seed, "compute_cost": 1.0},
                                                    base=TrainingConfig.preset("synthetic")), stream)
    pairs = [paired_seeds(plan, i) for i in range(MAX_STUDY_SEEDS)]
    hosts, data = {h for h, _ in pairs}, {d for _, d in pairs}
    assert len(hosts) == len(data) == MAX_STUDY_SEEDS  # every paired episode of a phase on its own seeds
    return hosts, data


@pytest.mark.parametrize("seed", [0, 42, MAX_BASE_SEED])
def test_training_selection_and_evaluation_seeds_never_overlap(seed: int) -> None:
    eval_hosts, eval_data = _held_out(seed, SeedStream.EVALUATION)
    sel_hosts, sel_data = _held_out(seed, SeedStream.SELECTION)
    held_out = eval_hosts | eval_data | sel_hosts | sel_data
    assert len(held_out) == 4 * MAX_STUDY_SEEDS
    memo: dict[tuple[int, int], tuple[list[int], int]] = {}
    for n_envs in range(1, MAX_ENVS + 1):
        for group_size in (k for k in range(1, n_envs + 1) if n_envs % k == 0):
            groups, hosts, data = n_envs // group_size, [], []
            for b in range(math.ceil(EPISODES / n_envs)):
                if (b, groups) not in memo:
                    memo[b, groups] = batch_seeds(seed, b, groups)
                batch_hosts, batch_data = memo[b, groups]
                hosts += batch_hosts
                data.append(batch_data)
            assert len(set(hosts)) == len(hosts), f"a host seed repeats at n_envs={n_envs}, group_size={group_size}"
            assert len(set(data)) == len(data)
            assert not (set(hosts) | set(data)) & held_out, f"n_envs={n_envs}, group_size={group_size}"
    family_data = [s for b in range(EPISODES) for s in group_data_seeds(seed, b, 4)]  # a family run's, per group
    assert len(set(family_data)) == len(family_data) and not set(family_data) & (held_out | set(hosts))


def test_streams_and_indices_name_distinct_seeds() -> None:
    assert derive_seed(7, SeedStream.TRAINING, 1, 0) == derive_seed(7, "training", 1, 0)  # a stream is its name
    assert len({derive_seed(7, s, 0) for s in SeedStream}) == len(SeedStream)
    assert derive_seed(7, SeedStream.TRAINING, 1, 0) != derive_seed(7, SeedStream.TRAINING, 0, 1)
    assert batch_seeds(7, 3, 2)[0][:1] == batch_seeds(7, 3, 1)[0]  # a group's seed does not depend on the group count


@settings(max_examples=25, deadline=None)
@given(base=st.integers(0, MAX_BASE_SEED), runs=st.integers(2, 8), n_envs=st.sampled_from([4, 8, 16]),
       group_size=st.sampled_from([1, 2, 4]))
def test_training_runs_share_no_seed_with_each_other_or_with_selection_and_evaluation(
        base: int, runs: int, n_envs: int, group_size: int) -> None:
    held_out = set().union(*_held_out(base, SeedStream.EVALUATION), *_held_out(base, SeedStream.SELECTION))
    seen: set[int] = set()
    for r in range(runs):
        seed = run_seed(base, r)
        assert 0 <= seed <= MAX_BASE_SEED
        run: set[int] = set()
        for b in range(384 // n_envs):
            hosts, data = batch_seeds(seed, b, n_envs // group_size)
            run |= {*hosts, data}
        assert not run & held_out, f"run {r} meets a selection or evaluation seed"
        assert not run & seen, f"run {r} shares a host or data seed with an earlier run"
        seen |= run


@settings(max_examples=25, deadline=None)
@given(recorded=st.integers(0, MAX_BASE_SEED), study=st.integers(0, MAX_BASE_SEED), runs=st.integers(1, 5))
def test_a_record_s_selection_seeds_meet_no_seed_of_a_study_of_another_base_seed(recorded: int, study: int,
                                                                                  runs: int) -> None:
    selection = set().union(*_held_out(recorded, SeedStream.SELECTION))
    evaluation = set().union(*_held_out(study, SeedStream.EVALUATION))
    assert not selection & evaluation
    for r in range(runs):
        for b in range(384 // 8):
            hosts, data = batch_seeds(run_seed(study, r), b, 8)
            assert not {*hosts, data} & selection, f"run {r} batch {b} meets a recorded selection seed"
