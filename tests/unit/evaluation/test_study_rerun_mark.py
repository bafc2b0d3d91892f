"""A finished study rerun with more seeds or runs: until it finishes again, its results.json, results.csv and
summary.md say that they describe the earlier finish."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esper.evaluation.study_report import mark_rerun
from esper.storage.rows import LogFormatError


def _finished_study(path: Path) -> None:
    path.mkdir()
    (path / "results.json").write_text(json.dumps({"complete": True, "episodes_done": 5, "episodes_planned": 5,
                                                   "study": {"seeds": 5, "runs": 2}}))
    (path / "results.csv").write_text("controller,episode\nstatic,0\n")
    (path / "summary.md").write_text("# study\n\nnumbers\n")


def test_more_seeds_mark_every_file_once(tmp_path: Path) -> None:
    study = tmp_path / "study"
    _finished_study(study)
    mark_rerun(study, seeds=8, runs=2)
    mark_rerun(study, seeds=8, runs=2)  # a second interruption: still one line
    data = json.loads((study / "results.json").read_text())
    assert (data["complete"], data["episodes_done"], data["episodes_planned"]) == (False, 5, 8)
    note = "incomplete: this study now runs 8 paired evaluation seeds and 2 training run(s)"
    csv_lines = (study / "results.csv").read_text().splitlines()
    assert csv_lines[0].startswith(f"# {note}") and csv_lines[1:] == ["controller,episode", "static,0"]
    summary = (study / "summary.md").read_text().splitlines()
    assert summary[0].startswith(f"> {note}") and summary[1:] == ["# study", "", "numbers"]


def test_the_same_settings_or_no_results_change_nothing(tmp_path: Path) -> None:
    study = tmp_path / "study"
    _finished_study(study)
    before = {p.name: p.read_text() for p in study.iterdir()}
    mark_rerun(study, seeds=5, runs=2)
    assert {p.name: p.read_text() for p in study.iterdir()} == before
    mark_rerun(tmp_path / "fresh", seeds=5, runs=2)


def test_a_results_json_that_is_not_a_study_s_names_the_fix(tmp_path: Path) -> None:
    study = tmp_path / "study"
    study.mkdir()
    (study / "results.json").write_text("{}")
    with pytest.raises(LogFormatError, match="--overwrite"):
        mark_rerun(study, seeds=5, runs=2)
