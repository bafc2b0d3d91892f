"""`esper study` reruns: an interrupted evaluation resumes from its finished paired episodes to the same results,
more seeds extend it, other settings are refused, --overwrite starts over."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from esper.cli.main import main
from esper.runtime.rundir import read_jsonl

pytestmark = pytest.mark.smoke

STUDY = ["study", "--preset", "quick", "--device", "cpu", "--no-tui", "--no-tensorboard",
         "--set", "n_episodes=2", "--set", "n_envs=2", "--set", "group_size=1", "--set", "max_epochs=3",
         "--set", "max_train_samples=256", "--set", "max_val_samples=128", "--set", "param_cost=1.0"]


def _untimed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The episode rows without `wall_seconds`, the one field no two runs share."""
    return [{k: v for k, v in row.items() if k != "wall_seconds"} for row in rows]


def _episodes(path: Path) -> list[dict[str, Any]]:
    return _untimed(read_jsonl(path / "eval" / "episodes.jsonl"))


def _results(path: Path) -> dict[str, Any]:
    """results.json without the study's settings and without wall-clock times (the episodes' and their means)."""
    data: dict[str, Any] = json.loads((path / "results.json").read_text())
    data.pop("study")
    data["episodes"] = _untimed(data["episodes"])
    data["per_controller"] = {c: {k: v for k, v in s.items() if k != "wall_seconds"}
                              for c, s in data["per_controller"].items()}
    return data


def test_study_reruns_resume_consistently(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "study"
    argv = [*STUDY, "--seeds", "2", "--run-dir", str(run)]
    assert main(argv) == 0
    complete = _results(run)
    rows = read_jsonl(run / "eval" / "episodes.jsonl")
    episodes = _untimed(rows)
    assert len(episodes) == 2 * 4 and (run / "train" / "events.jsonl").exists()
    summary = (run / "summary.md").read_text().splitlines()
    for table in ("Paired test Δ:", "Paired validation Δ:"):  # each Δ table has the quick preset's references
        assert summary[summary.index(table) + 2] == "| controller | vs static | vs heuristic | vs ppo (init) |"
    title = (run / "summary.md").read_text().splitlines()[0]
    assert title == "# esper study --preset quick (synthetic; reward gap, λ_p 1)"
    assert json.loads((run / "results.json").read_text())["study"]["reward"] == title.split("reward ")[1][:-1]

    # what a kill in the second paired episode leaves: episode 0 finished, episode 1 half written
    (run / "eval" / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in rows[:6]))
    (run / "results.json").unlink()
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Nothing to train" in out and "4 finished episode(s) kept" in out
    assert _results(run) == complete
    assert _episodes(run) == episodes

    assert main([*STUDY, "--seeds", "3", "--run-dir", str(run)]) == 0  # more seeds extend the evaluation
    assert len(read_jsonl(run / "eval" / "episodes.jsonl")) == 3 * 4
    assert _episodes(run)[:8] == episodes

    assert main([*STUDY, "--seeds", "3", "--run-dir", str(run), "--tie-threshold", "2"]) == 2
    assert "other arguments" in capsys.readouterr().err
    assert main([*STUDY, "--seeds", "3", "--run-dir", str(run), "--set", "lr=0.01"]) == 2
    assert "lr" in capsys.readouterr().err

    assert main([*STUDY, "--seeds", "1", "--run-dir", str(run), "--overwrite"]) == 0
    assert len(read_jsonl(run / "eval" / "episodes.jsonl")) == 4
    assert json.loads((run / "config.json").read_text())["config"]["seeds"] == 1


def test_study_of_an_existing_policy_reproduces_the_evaluation_of_its_own_study(tmp_path: Path) -> None:
    trained = tmp_path / "trained"
    assert main([*STUDY, "--seeds", "2", "--run-dir", str(trained)]) == 0
    reused = tmp_path / "reused"
    assert main(["study", "--preset", "quick", "--device", "cpu", "--no-tui", "--no-tensorboard", "--seeds", "2",
                 "--ppo", str(trained / "train"), "--run-dir", str(reused)]) == 0
    assert not (reused / "train").exists()  # nothing trained: the run's own policies were evaluated
    assert _episodes(reused) == _episodes(trained)
    assert _results(reused)["pairwise"] == _results(trained)["pairwise"]
