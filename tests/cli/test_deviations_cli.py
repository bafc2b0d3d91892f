"""`esper compare` with a teacher's one-epoch deviations, then `esper report --deviations`: the deviation's episode is
its teacher's until the overruled epoch, takes the action there, and the table scores it against the teacher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esper.cli.main import main
from esper.storage.rundir import read_jsonl

TINY = ["--max-train-samples", "256", "--max-val-samples", "128", "--no-tui", "--no-tensorboard", "--task",
        "synthetic"]
TEACHER = "grow:norm@late"
DEVIATION = f"deviate:2:germinate=conv_light@mid:{TEACHER}"


def test_a_deviation_runs_beside_its_teacher_and_the_report_scores_it_against_the_teacher(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "c"
    assert main(["compare", "--controllers", "static", TEACHER, DEVIATION, "--episodes", "2", "--max-epochs", "4",
                 "--charge", "compute", "--compute-cost", "1.5", "--run-dir", str(run), *TINY]) == 0
    steps = read_jsonl(run / "steps.jsonl")
    for episode in range(2):
        ops = {c: [(s["epoch"], s["op"], s["slot"]) for s in steps if s["episode"] == episode and s["controller"] == c]
               for c in (TEACHER, DEVIATION)}
        assert ops[DEVIATION][0] == ops[TEACHER][0]  # decisions come after each epoch but the last: 1, 2, 3
        assert ops[DEVIATION][1] == (2, "GERMINATE", "mid") != ops[TEACHER][1]
        curves = {e["controller"]: e["accuracy_curve"] for e in read_jsonl(run / "episodes.jsonl")
                  if e["episode"] == episode}
        assert curves[DEVIATION][:2] == curves[TEACHER][:2]  # the same host, data and decisions until epoch 2
    capsys.readouterr()
    assert main(["report", str(run), "--deviations"]) == 0
    table = (run / "report" / "deviations.md").read_text(encoding="utf-8")
    assert table in capsys.readouterr().out
    assert f"One-epoch deviations from {TEACHER} on 2 paired seeds" in table and "λ = 1.500" in table
    assert "| 2 | germinate=conv_light@mid | 2 of 2 |" in table
    results = json.loads((run / "results.json").read_text())
    assert results["controllers"] == ["static", TEACHER, DEVIATION]


def test_report_refuses_a_comparison_without_deviations_and_both_tables_at_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "c"
    assert main(["compare", "--controllers", "static", TEACHER, "--episodes", "1", "--max-epochs", "2",
                 "--charge", "compute", "--compute-cost", "1.0", "--run-dir", str(run), *TINY]) == 0
    capsys.readouterr()
    assert main(["report", str(run), "--deviations"]) == 2
    assert "ran no deviate:EPOCH:ACTION:TEACHER controller" in capsys.readouterr().err
    assert main(["report", str(run), "--deviations", "--ablation", f"x={run}"]) == 2
    assert "pass one of them" in capsys.readouterr().err
