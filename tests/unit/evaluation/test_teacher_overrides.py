"""`teacher_overrides`: each run's share of final-policy evaluation decisions that are not its teacher's choice, read
from the decisions' reasons."""

from __future__ import annotations

import json
from pathlib import Path

from esper.env.logs import StepRow
from esper.evaluation.runs import RunLabels
from esper.evaluation.study import teacher_overrides
from esper.simic.ppo.controller import AS_TEACHER, OVERRIDES_TEACHER


def _row(controller: str, episode: int, epoch: int, reason: str) -> StepRow:
    return StepRow(batch=0, env=0, episode=episode, epoch=epoch, controller=controller, op="WAIT", slot=None,
                   blueprint=None, blend=None, success=True, reason=reason, train_loss=0.0, train_accuracy=0.0,
                   val_loss=0.0, val_accuracy=0.0, rollback=False, slots={}, seed_params=0, reward_components={},
                   reward=0.0)


def _write(path: Path, rows: list[StepRow]) -> Path:
    path.write_text("".join(json.dumps(row.to_dict()) + "\n" for row in rows), encoding="utf-8")
    return path


def test_each_run_s_share_counts_its_final_policy_s_decisions_only(tmp_path: Path) -> None:
    final0, final1, init0 = RunLabels(0).final, RunLabels(1).final, RunLabels(0).init
    rows = [_row(final0, 0, 1, f"policy (value +0.10, {AS_TEACHER})"),
            _row(final0, 0, 2, f"policy (value +0.10, {OVERRIDES_TEACHER})"),
            _row(final0, 1, 1, f"policy (value +0.10, {AS_TEACHER})"),
            _row(final0, 1, 2, f"policy (value +0.10, {AS_TEACHER})"),
            _row(final1, 0, 1, f"policy (value +0.10, {OVERRIDES_TEACHER})"),
            _row(init0, 0, 1, f"policy (value +0.10, {OVERRIDES_TEACHER})"),  # not a final policy
            _row("heuristic", 0, 1, "Heuristic: waiting")]
    assert teacher_overrides(_write(tmp_path / "steps.jsonl", rows), 2) == [0.25, 1.0]


def test_a_rerun_episode_replaces_its_decisions(tmp_path: Path) -> None:
    final0 = RunLabels(0).final
    rows = [_row(final0, 0, 1, f"policy (value +0.10, {OVERRIDES_TEACHER})"),
            _row(final0, 0, 1, f"policy (value +0.10, {AS_TEACHER})")]
    assert teacher_overrides(_write(tmp_path / "steps.jsonl", rows), 1) == [0.0]


def test_policies_without_a_teacher_have_no_share(tmp_path: Path) -> None:
    rows = [_row(RunLabels(0).final, 0, 1, "policy (value +0.10)")]
    assert teacher_overrides(_write(tmp_path / "steps.jsonl", rows), 1) is None


def test_a_run_whose_policy_decided_without_a_teacher_has_no_share_beside_one_that_did(tmp_path: Path) -> None:
    rows = [_row(RunLabels(0).final, 0, 1, "policy (value +0.10)"),
            _row(RunLabels(1).final, 0, 1, f"policy (value +0.10, {OVERRIDES_TEACHER})")]
    assert teacher_overrides(_write(tmp_path / "steps.jsonl", rows), 2) == [None, 1.0]
