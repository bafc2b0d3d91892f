"""`replay:RUN`: a policy's most frequent action per epoch, replayed open loop; on the seed it was recorded on it
reproduces the recorded episode bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esper.cli.main import main
from esper.data.tasks import get_task_spec
from esper.env.logs import StepRow
from esper.evaluation.replay import load_replay, replay_schedule
from esper.leyline import CANONICAL_SLOTS, LifecycleCommand, LifecycleOp, UserInputError
from esper.storage.rows import read_rows
from esper.tamiyo import ControllerContext

OUTPUT = ["--no-tui", "--no-tensorboard", "--telemetry-level", "minimal", "--device", "cpu"]
TINY = ["--task", "synthetic", "--episodes", "1", "--max-epochs", "12", "--max-train-samples", "128",
        "--max-val-samples", "64", "--max-test-samples", "64", "--seed", "5", *OUTPUT]


def _row(episode: int, epoch: int, op: str, slot: str | None = None, blueprint: str | None = None,
         blend: str | None = None, controller: str = "ppo") -> StepRow:
    return StepRow(batch=0, env=0, episode=episode, epoch=epoch, controller=controller, op=op, slot=slot,
                   blueprint=blueprint, blend=blend, success=True, reason="r", train_loss=0.0, train_accuracy=0.0,
                   val_loss=0.0, val_accuracy=0.0, rollback=False, slots={}, seed_params=0, reward_components={},
                   reward=0.0)


def test_the_schedule_takes_the_most_frequent_action_of_each_epoch() -> None:
    germinate = ("GERMINATE", "early", "norm", "linear")
    rows = [_row(0, 1, *germinate), _row(1, 1, *germinate), _row(2, 1, "WAIT"),
            _row(0, 2, "WAIT"), _row(1, 2, "CULL", "early"), _row(2, 2, "CULL", "early")]
    schedule = replay_schedule(rows)
    assert schedule[1] == LifecycleCommand(LifecycleOp.GERMINATE, "early", "norm", "linear")
    assert schedule[2] == LifecycleCommand(LifecycleOp.CULL, "early")
    tie = replay_schedule([_row(0, 1, "WAIT"), _row(1, 1, *germinate)])
    assert tie[1] == LifecycleCommand(LifecycleOp.WAIT)  # a tie goes to the action seen first


def test_a_replay_source_holds_one_controller() -> None:
    with pytest.raises(UserInputError, match="one controller"):
        replay_schedule([_row(0, 1, "WAIT"), _row(0, 1, "WAIT", controller="static")])


def _steps(run: Path) -> list[StepRow]:
    return read_rows(run / StepRow.FILE, StepRow)


def test_replay_reproduces_a_recorded_episode_bit_for_bit(tmp_path: Path) -> None:
    recorded = tmp_path / "recorded"
    assert main(["compare", "--controllers", "random", *TINY, "--run-dir", str(recorded)]) == 0
    replayed = tmp_path / "replayed"
    assert main(["compare", "--controllers", f"replay:{recorded}", *TINY, "--run-dir", str(replayed)]) == 0
    before, after = _steps(recorded), _steps(replayed)
    assert len(before) == len(after) == 11
    assert any(r.op != "WAIT" for r in before)  # random growth: something to replay
    for a, b in zip(before, after, strict=True):
        assert (a.epoch, a.op, a.slot, a.blueprint, a.blend, a.success) == (b.epoch, b.op, b.slot, b.blueprint,
                                                                           b.blend, b.success)
        assert (a.val_accuracy, a.val_loss, a.train_loss, a.slots) == (b.val_accuracy, b.val_loss, b.train_loss,
                                                                       b.slots)
    episode = json.loads((replayed / "episodes.jsonl").read_text().splitlines()[0])
    original = json.loads((recorded / "episodes.jsonl").read_text().splitlines()[0])
    assert episode["final_test_accuracy"] == original["final_test_accuracy"]
    assert episode["accuracy_curve"] == original["accuracy_curve"]


def test_an_action_the_env_does_not_allow_becomes_wait(tmp_path: Path) -> None:
    recorded = tmp_path / "recorded"
    assert main(["compare", "--controllers", "grow:norm@early", *TINY, "--run-dir", str(recorded)]) == 0
    # replayed on other seeds with a slot set in which its slot does not exist: every germination is masked
    replayed = tmp_path / "replayed"
    assert main(["compare", "--controllers", f"replay:{recorded}", *TINY, "--slots", "mid", "late", "--seed", "9",
                 "--run-dir", str(replayed)]) == 0
    assert {r.op for r in _steps(replayed)} == {"WAIT"}
    assert any("not allowed now" in r.reason for r in _steps(replayed))


def test_a_replay_refuses_another_episode_length(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recorded = tmp_path / "recorded"
    assert main(["compare", "--controllers", "static", *TINY, "--run-dir", str(recorded)]) == 0
    capsys.readouterr()
    assert main(["compare", "--controllers", f"replay:{recorded}", *TINY, "--max-epochs", "8",
                 "--run-dir", str(tmp_path / "other")]) == 2
    assert "--max-epochs 12" in capsys.readouterr().err


def test_a_replay_reads_every_run_directory_a_directory_holds(tmp_path: Path) -> None:
    """A family study's replay source holds one run directory per training type: the schedule is the modal action
    over all of their episodes."""
    germinate = ("GERMINATE", "early", "norm", "linear")
    for name, rows in (("a", [_row(0, 1, *germinate), _row(0, 2, "WAIT")]),
                       ("b", [_row(0, 1, "WAIT"), _row(1, 1, "WAIT"), _row(0, 2, "WAIT")])):
        (tmp_path / name).mkdir()
        (tmp_path / name / StepRow.FILE).write_text("".join(json.dumps(r.to_dict()) + "\n" for r in rows))
    context = ControllerContext(space=get_task_spec("synthetic").action_space, slots=tuple(CANONICAL_SLOTS),
                                max_epochs=3)
    assert load_replay(tmp_path, context).schedule == {1: LifecycleCommand(LifecycleOp.WAIT),
                                                       2: LifecycleCommand(LifecycleOp.WAIT)}
    assert load_replay(tmp_path / "a", context).schedule[1] == LifecycleCommand(LifecycleOp.GERMINATE, "early",
                                                                                 "norm", "linear")
