"""`esper tune heuristic` at a tiny size (seconds): it prints its run directory first, writes a record that `esper
compare` runs as heuristic:PATH, continues from its finished trials when rerun, and refuses a budget that pays for no
trial and a record that is not one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from esper.cli.main import main
from esper.storage.rundir import RUN_DIR_NAME
from esper.tamiyo import read_heuristic_record

pytestmark = pytest.mark.smoke

OUTPUT = ["--no-tui", "--no-tensorboard", "--telemetry-level", "minimal", "--device", "cpu"]
SETTING = ["--task", "synthetic", "--max-epochs", "12", "--max-train-samples", "64", "--max-val-samples", "32",
           "--max-test-samples", "32", "--batch-size", "64", *OUTPUT]


def _episode_lines(root: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in root.rglob("episodes.jsonl"))


def test_tune_writes_a_record_compare_runs_and_a_rerun_continues_it(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    record, root = tmp_path / "tuned.json", tmp_path / "runs"
    tune = ["tune", "heuristic", "--seeds", "1", "--budget", "36", "--output", str(record), "--runs-root", str(root),
            "--data-dir", str(tmp_path / "data"), *SETTING]
    assert main(tune) == 0
    out = capsys.readouterr().out
    [run] = root.iterdir()
    assert out.splitlines()[0] == f"Run directory: {run}"  # first, and named as --help says
    name = RUN_DIR_NAME.format(command="tune", task="synthetic", seed=42, digest="DIGEST").replace("DIGEST", "")
    assert re.fullmatch(re.escape(name) + "[0-9a-f]{8}", run.name), run.name
    assert "Trial 2/2:" in out and f"Record:  {record}" in out and f"heuristic:{record}" in out
    tuned = read_heuristic_record(record)
    assert tuned.tuning is not None and tuned.tuning.trials == 2 and tuned.tuning.seeds == 1
    assert tuned.tuning.cost_env_epochs <= 36 and tuned.tuning.command.startswith("esper tune heuristic --seeds 1")
    assert tuned.setting.max_epochs == 12 and tuned.tuning.seed_stream == "selection"
    assert (run / "trials.md").is_file() and (run / "static" / "results.json").is_file()

    # the same command again: every phase is finished, nothing runs, the same record
    episodes, text = _episode_lines(run), record.read_text()
    assert main(tune) == 0
    assert "Resuming" in capsys.readouterr().out
    assert _episode_lines(run) == episodes and record.read_text() == text

    # the record runs as a controller beside the default heuristic, with no search
    compare = ["compare", "--controllers", "static", "heuristic", f"heuristic:{record}", "--episodes", "1",
               "--run-dir", str(tmp_path / "compare"), "--data-dir", str(tmp_path / "data"), *SETTING]
    assert main(compare) == 0
    assert "heuristic:tuned.json" in capsys.readouterr().out


def test_a_budget_for_no_trial_and_a_bad_record_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "tune"
    assert main(["tune", "heuristic", "--seeds", "2", "--budget", "40", "--run-dir", str(run), *SETTING]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "A budget of 40 env-epochs pays for no trial" in err and "pass --budget 48 or more" in err
    assert not run.exists()  # nothing finished: nothing left behind
    bad = tmp_path / "bad.json"
    bad.write_text('{"thresholds": {"stall_training_epochs": 0}}')
    assert main(["compare", "--controllers", "static", f"heuristic:{bad}", "--run-dir", str(tmp_path / "c"),
                 *SETTING]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"Heuristic record {bad}" in err and "esper tune heuristic" in err
