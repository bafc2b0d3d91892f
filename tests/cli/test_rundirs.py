"""The run-directory rules every command shares: create, reuse what holds nothing finished, resume, refuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esper.cli.main import build_parser
from esper.cli.options import run_settings
from esper.storage.rundir import RunDirectory, RunDirectoryError, default_run_dir, holds_results
from esper.storage.rundirs import check_same_arguments, discard_on_error, prepare_run_dir


def _never(path: Path) -> bool:
    return False


def _always(path: Path) -> bool:
    return True


def _esper_dir(path: Path, command: str, **files: str) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"command": command, "config": {}}))
    for name, text in files.items():
        target = path / name.replace("__", "/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return path


def test_missing_and_empty_directories_are_new(tmp_path: Path) -> None:
    assert prepare_run_dir(tmp_path / "missing", command="compare", overwrite=False, resumable=_always) == "new"
    (tmp_path / "empty").mkdir()
    assert prepare_run_dir(tmp_path / "empty", command="compare", overwrite=False, resumable=_always) == "new"


def test_leftovers_of_an_early_death_are_cleared(tmp_path: Path) -> None:
    run = _esper_dir(tmp_path / "r", "ppo", **{"events.jsonl": "{}\n", "checkpoints__init.pt": "x"})
    assert not holds_results(run)
    assert prepare_run_dir(run, command="ppo", overwrite=False, resumable=_never) == "new"
    assert list(run.iterdir()) == []


def test_resumable_work_of_the_same_command_is_existing(tmp_path: Path) -> None:
    run = _esper_dir(tmp_path / "r", "compare", **{"episodes.jsonl": '{"episode": 0}\n'})
    assert prepare_run_dir(run, command="compare", overwrite=False, resumable=_always) == "existing"
    assert (run / "episodes.jsonl").exists()


def test_finished_work_of_another_command_is_refused_unless_overwritten(tmp_path: Path) -> None:
    run = _esper_dir(tmp_path / "r", "ppo", **{"checkpoints__latest.pt": "x"})
    with pytest.raises(RunDirectoryError, match="'ppo' run"):
        prepare_run_dir(run, command="compare", overwrite=False, resumable=_always)
    assert prepare_run_dir(run, command="compare", overwrite=True, resumable=_always) == "new"
    assert list(run.iterdir()) == []


def test_a_users_directory_is_never_cleared(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    for overwrite in (False, True):
        with pytest.raises(RunDirectoryError, match="not an esper run directory"):
            prepare_run_dir(mine, command="compare", overwrite=overwrite, resumable=_always)
    assert (mine / "thesis.tex").read_text() == "precious"


def test_check_same_arguments_names_the_differences() -> None:
    check_same_arguments(Path("r"), {"seed": 1, "episodes": 2}, {"seed": 1, "episodes": 5}, may_differ=("episodes",))
    with pytest.raises(RunDirectoryError, match=r"seed: 1 then, 2 now; slots: \['a'\] then, \['b'\] now"):
        check_same_arguments(Path("r"), {"seed": 1, "slots": ["a"]}, {"seed": 2, "slots": ("b",)})


def test_discard_on_error_removes_a_fresh_directory_and_the_parents_it_created(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path / "runs" / "new")
    with pytest.raises(ValueError), discard_on_error(run, fresh=True, errors=(ValueError,)):
        (run.path / "config.json").write_text("{}")
        raise ValueError("bad input")
    assert not (tmp_path / "runs").exists()


def test_discard_on_error_keeps_resumed_and_finished_work(tmp_path: Path) -> None:
    resumed = RunDirectory(tmp_path / "a")
    with pytest.raises(ValueError), discard_on_error(resumed, fresh=False, errors=(ValueError,)):
        raise ValueError("bad input")
    finished = RunDirectory(tmp_path / "b")
    with pytest.raises(ValueError), discard_on_error(finished, fresh=True, errors=(ValueError,)):
        (finished.path / "episodes.jsonl").write_text('{"episode": 0}\n')
        raise ValueError("bad input")
    with pytest.raises(KeyboardInterrupt), discard_on_error(RunDirectory(tmp_path / "c"), fresh=True,
                                                            errors=(ValueError,)):
        raise KeyboardInterrupt  # an interrupted start stays: the rerun reuses it
    assert (tmp_path / "a").is_dir() and (tmp_path / "b" / "episodes.jsonl").exists() and (tmp_path / "c").is_dir()


def _default_dir(*argv: str) -> Path:
    args = build_parser().parse_args(["compare", "--controllers", "static", "heuristic", *argv])
    return default_run_dir(args.runs_root, "compare", args.task, args.seed, run_settings(args))


def test_the_same_command_names_the_same_default_directory() -> None:
    """Settings that change what is computed change the name; how it is shown or where it runs do not."""
    base = _default_dir()
    assert base == _default_dir() and base.name.startswith("compare_synthetic_s42_")
    assert _default_dir("--no-tui", "--telemetry-level", "debug", "--workers", "2", "--overwrite") == base
    for other in (["--seed", "7"], ["--episodes", "6"], ["--max-train-samples", "100"], ["--threads", "2"]):
        assert _default_dir(*other) != base, other
    assert _default_dir("--runs-root", "elsewhere").parent == Path("elsewhere")
