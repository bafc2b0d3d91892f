"""`off_teacher_effect`: the return an off-teacher decision was worth in training, paired within rollout groups; and
`within_group_slope`, the fixed-effects regression under it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esper.env import EpisodeResult
from esper.env.logs import StepRow
from esper.evaluation.exploration import off_teacher_effect
from esper.evaluation.stats import within_group_slope
from esper.simic.ppo.controller import AS_TEACHER, OVERRIDES_TEACHER
from unit.evaluation.family_probe import episode


def _step(episode_index: int, epoch: int, reason: str) -> StepRow:
    return StepRow(batch=0, env=0, episode=episode_index, epoch=epoch, controller="ppo", op="WAIT", slot=None,
                   blueprint=None, blend=None, success=True, reason=reason, train_loss=0.0, train_accuracy=0.0,
                   val_loss=0.0, val_accuracy=0.0, rollback=False, slots={}, seed_params=0, reward_components={},
                   reward=0.0)


def _run(path: Path, returns: list[list[float]], off: dict[int, int], *, tag: bool = True) -> Path:
    """A training run of one batch whose groups (of `len(returns[0])` envs) return `returns`; episode i takes
    `off[i]` off-teacher decisions among its 3."""
    path.mkdir()
    episodes, steps, index = [], [], 0
    for g, group in enumerate(returns):
        for r in group:
            episodes.append(dataclasses.replace(episode("ppo", index, 80.0), env_id=index, env_seed=1000 + g,
                                                total_reward=r))
            for epoch in range(3):
                reason = (OVERRIDES_TEACHER if epoch < off.get(index, 0) else AS_TEACHER) if tag else "no teacher"
                steps.append(_step(index, epoch + 1, f"policy (value +0.10, {reason})"))
            index += 1
    (path / EpisodeResult.FILE).write_text("".join(json.dumps(e.to_dict()) + "\n" for e in episodes))
    (path / StepRow.FILE).write_text("".join(json.dumps(s.to_dict()) + "\n" for s in steps))
    return path


def test_each_off_teacher_decision_is_priced_within_its_group(tmp_path: Path) -> None:
    # group 0 returns about 3, group 1 about 9: the groups' seeds differ, their decisions' worth does not (−0.5 each)
    returns = [[3.0, 2.5, 3.0, 2.0], [9.0, 9.0, 8.5, 8.0]]
    effect = off_teacher_effect(_run(tmp_path / "run", returns, {1: 1, 3: 2, 6: 1, 7: 2}), group_size=4)
    assert effect is not None
    assert (effect.decisions, effect.deviating, effect.episodes) == (6, 4, 8)
    assert effect.per_decision == pytest.approx(-0.5)
    assert effect.ci95 is not None and effect.ci95[0] == pytest.approx(-0.5) == pytest.approx(effect.ci95[1])


def test_a_policy_without_a_teacher_has_no_effect_and_a_wrong_group_size_is_refused(tmp_path: Path) -> None:
    assert off_teacher_effect(_run(tmp_path / "free", [[1.0, 2.0]], {1: 1}, tag=False), group_size=2) is None
    run = _run(tmp_path / "run", [[1.0, 2.0], [3.0, 4.0]], {1: 1})
    with pytest.raises(ValueError, match="its group size is not 4"):
        off_teacher_effect(run, group_size=4)
    effect = off_teacher_effect(_run(tmp_path / "never", [[1.0, 1.0]], {}), group_size=2)
    assert effect is not None and effect.per_decision is None and effect.decisions == 0  # nothing to regress on


@given(slope=st.floats(-5, 5), offsets=st.lists(st.floats(-50, 50), min_size=2, max_size=5),
       xs=st.lists(st.integers(0, 4), min_size=3, max_size=6))
def test_a_group_s_offset_never_moves_the_slope(slope: float, offsets: list[float], xs: list[int]) -> None:
    noise = [0.1, -0.2, 0.05, 0.15, -0.1, 0.0]
    groups = [[(float(x), slope * x + noise[i] + offset) for i, x in enumerate(xs)] for offset in offsets]
    fit = within_group_slope(groups)
    if len(set(xs)) == 1:
        assert fit is None  # x never varies within a group
        return
    shifted = within_group_slope([[(x, y + 7.0 * g) for x, y in group] for g, group in enumerate(groups)])
    assert fit is not None and shifted is not None
    assert shifted[0] == pytest.approx(fit[0], abs=1e-9)
    assert fit[1][0] <= fit[0] <= fit[1][1]
