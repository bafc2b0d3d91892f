"""A study records its selection (best-fixed, best-rule, the teacher's choice) and a later study of the same preset
and selection seeds reuses it instead of searching: the same references, the same teacher, the cost still charged.
Tiny budgets: seconds each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from esper.cli.main import main
from esper.evaluation.runs import RunLabels
from esper.evaluation.selection_record import SELECTION_RECORD_FILE, read_selection_record
from esper.leyline.errors import UserInputError
from esper.storage.rundir import read_jsonl

pytestmark = pytest.mark.smoke

OUTPUT = ["--no-tui", "--no-tensorboard", "--telemetry-level", "minimal", "--device", "cpu"]
SETTING = ["--set", "max_epochs=3", "--set", "max_train_samples=64", "--set", "max_val_samples=32"]
STUDY = ["study", "--preset", "synthetic", "--runs", "1", "--set", "n_episodes=2", "--set", "n_envs=2",
         "--set", "group_size=1", *SETTING, "--seeds", "2", "--selection-seeds", "1", "--max-test-samples", "64",
         *OUTPUT]


def _results(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "results.json").read_text())
    return data


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A study stopped after its selection (--selection-only), and its data directory."""
    root = tmp_path_factory.mktemp("selection_record")
    data, run = root / "data", root / "first"
    assert main([*STUDY, "--data-dir", str(data), "--run-dir", str(run), "--selection-only"]) == 0
    return run, data


def test_selection_only_records_what_the_selection_chose_and_what_it_cost(recorded: tuple[Path, Path]) -> None:
    run, _ = recorded
    assert not (run / "train").exists() and not (run / "eval").exists()  # it stopped after the choice
    record = read_selection_record(run / SELECTION_RECORD_FILE)
    summary = (run / "selection" / "summary.md").read_text()
    assert f"Chosen: best-fixed = {record.chosen['best-fixed']}, best-rule = {record.chosen['best-rule']}." in summary
    episodes = [e for r in sorted((run / "selection").glob("round-*")) for e in read_jsonl(r / "episodes.jsonl")]
    assert record.selection_cost.env_epochs == sum(len(e["accuracy_curve"]) for e in episodes)
    assert len(record.candidates) == len(episodes)  # one selection seed: one row per candidate episode
    assert record.teacher is not None and record.teacher.label in {"heuristic", "best-rule"}
    assert record.tuned_heuristic is None  # 3-epoch episodes: no threshold matters, nothing was tuned
    assert record.setting["max_epochs"] == 3 and record.selection_seeds == 1 and record.preset == "synthetic"
    assert "--selection-only" in record.command and record.esper_commit


def test_a_study_reuses_a_recorded_selection_without_searching(recorded: tuple[Path, Path], tmp_path: Path,
                                                             no_study_plots: None) -> None:
    """Also at another base seed: the record's selection seeds meet none of this study's seeds."""
    first, data = recorded
    record_path = tmp_path / "fashion.selection.json"  # a record kept elsewhere (in the repository)
    record_path.write_bytes((first / SELECTION_RECORD_FILE).read_bytes())
    record = read_selection_record(record_path)
    run = tmp_path / "reuse"
    assert main([*STUDY, "--data-dir", str(data), "--run-dir", str(run), "--selection-record", str(record_path),
                 "--seed", str(record.setting["seed"] + 1)]) == 0
    assert _results(run)["seed"] == record.setting["seed"] + 1
    assert not (run / "selection").exists() and not (run / "teacher" / "candidates").exists()
    study = _results(run)["study"]
    assert study["chosen"] == record.chosen
    assert study["selection_record"]["path"] == str(record_path)
    assert record.teacher is not None and study["teacher_choice"]["teacher"] == record.teacher.label
    cost = study["cost_to_obtain"]["best-fixed"]
    assert cost == {"env_epochs": record.selection_cost.env_epochs, "gflops": record.selection_cost.gflops}
    assert f"{record_path}, written by" in (summary := " ".join((run / "summary.md").read_text().split()))
    assert f"on the selection seeds of base seed {record.setting['seed']};" in summary
    assert (run / "eval").is_dir() and RunLabels(0).final in _results(run)["controllers"]


def test_a_record_of_another_setting_or_seeds_is_refused_naming_the_difference(
        recorded: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, data = recorded
    record = first / SELECTION_RECORD_FILE
    base = [*STUDY, "--data-dir", str(data), "--selection-record", str(record)]
    cases = {"a": (["--set", "max_epochs=4"], "max_epochs: recorded 3, now 4"),
             "b": (["--selection-seeds", "2"], "on 1 selection seeds, this study --preset synthetic on 2"),
             "c": (["--selection-only"], "--selection-only runs the selection that --selection-record reuses")}
    for name, (extra, expect) in cases.items():
        capsys.readouterr()
        assert main([*base, "--run-dir", str(tmp_path / name), *extra]) == 2
        assert expect in " ".join(capsys.readouterr().err.split())
    assert not any((tmp_path / d).exists() for d in cases)  # refused before anything was written


def test_a_corrupt_or_missing_record_is_refused_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserInputError, match=r"Selection record .*bad.json cannot be read"):
        read_selection_record(bad)
    bad.write_text(json.dumps({"format": "esper-selection-record/0"}))
    with pytest.raises(UserInputError, match="has format 'esper-selection-record/0'"):
        read_selection_record(bad)
    with pytest.raises(UserInputError, match="not found"):
        read_selection_record(tmp_path / "missing.json")
