"""Bad input exits 2 with one line; a fault of esper's exits 1 and names the file that holds its traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from esper.cli.main import main
from esper.env.env import MorphoEnv
from esper.leyline import UserInputError

TINY = ["--task", "synthetic", "--max-epochs", "2", "--max-train-samples", "64", "--max-val-samples", "32",
        "--no-tui", "--no-tensorboard", "--telemetry-level", "minimal", "--param-cost", "1.0"]


def _plant(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    def observe(*_: object, **__: object) -> None:
        raise error
    monkeypatch.setattr(MorphoEnv, "observe", observe)


def test_an_internal_value_error_exits_1_with_its_traceback_saved_in_the_run_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _plant(monkeypatch, ValueError("planted invariant failure"))
    run = tmp_path / "run"
    assert main(["train", "heuristic", "--run-dir", str(run), *TINY]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "ValueError: planted invariant failure" in err and "bug in esper" in err
    saved = run / "traceback.txt"
    assert str(saved) in err
    text = saved.read_text()
    assert "Traceback" in text and "in observe" in text and "planted invariant failure" in text


def test_an_internal_error_outside_a_run_directory_names_a_temporary_traceback_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def broken(*_: object, **__: object) -> None:
        raise ValueError("planted report failure")
    monkeypatch.setattr("esper.cli.report.render_report", broken, raising=True)
    run = tmp_path / "run"
    assert main(["train", "heuristic", "--run-dir", str(run), *TINY]) == 0
    capsys.readouterr()
    assert main(["report", str(run)]) == 1
    err = " ".join(capsys.readouterr().err.split())
    found = re.search(r"the traceback is in (\S+\.txt)", err)
    assert found, err
    saved = Path(found.group(1))
    assert "planted report failure" in saved.read_text()
    saved.unlink()


def test_a_user_input_error_raised_deep_inside_still_exits_2_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _plant(monkeypatch, UserInputError("planted bad input: pass --x to fix it"))
    run = tmp_path / "run"
    assert main(["train", "heuristic", "--run-dir", str(run), *TINY]) == 2
    err = capsys.readouterr().err
    assert "error: planted bad input: pass --x to fix it" in err and "Traceback" not in err
    assert not run.exists()  # nothing finished: the directory it created is removed, so the command can be rerun
