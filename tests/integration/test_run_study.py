"""A study from Python: the README's `run_study` snippet runs the quick study end to end, and the same plan stopped by
its hook during a training run (a batch checkpointed) and called again finishes with the results of the study that was
never stopped."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from esper.evaluation import StudyHooks, StudyPhase, StudyPlan, StudyResult, StudyStatus, run_study
from esper.storage.rundir import read_jsonl
from study_results import untimed, untimed_results

pytestmark = pytest.mark.smoke

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def _snippet() -> str:
    """The Python block of the README's "A study from Python"."""
    section = README.split("### A study from Python", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


@pytest.fixture(scope="module")
def readme_study(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StudyPlan, StudyResult, Path]]:
    """The README's snippet, run as it is in a fresh directory: its plan, its result and that directory."""
    cwd, root = Path.cwd(), tmp_path_factory.mktemp("readme_study")
    os.chdir(root)
    try:
        namespace: dict[str, Any] = {}
        exec(compile(_snippet(), "README.md", "exec"), namespace)
    finally:
        os.chdir(cwd)
    yield namespace["plan"], namespace["result"], root


def test_the_readme_runs_the_quick_study_from_python(readme_study: tuple[StudyPlan, StudyResult, Path]) -> None:
    plan, result, root = readme_study
    path = root / "runs" / "quick-from-python"
    assert result.status == StudyStatus.COMPLETE and result.phase is None and result.path == plan.run_dir
    assert result.summary is not None and (path / "summary.md").is_file() and (path / "results.json").is_file()
    assert result.comparison is not None and result.results is not None and result.results.aggregate
    assert (path / "train" / "run-0" / "checkpoints" / "final.pt").is_file() and (path / "eval").is_dir()
    assert not (path / "eval" / "events.jsonl").exists()  # quiet: no telemetry unless the hooks give one


def test_a_study_stopped_by_its_hook_continues_to_the_results_of_an_uninterrupted_one(
        readme_study: tuple[StudyPlan, StudyResult, Path], tmp_path: Path) -> None:
    plan, _, root = readme_study
    reference, run = root / "runs" / "quick-from-python", tmp_path / "study"
    started: list[StudyPhase] = []

    def after_first_batch() -> bool:  # stop once run 0 has finished (and checkpointed) a batch
        return bool(read_jsonl(run / "train" / "run-0" / "history.jsonl"))

    stopping = StudyHooks(phase_started=started.append, should_stop=after_first_batch)
    stopped = run_study(dataclasses.replace(plan, run_dir=run, hooks=stopping))
    assert stopped.status == StudyStatus.STOPPED and stopped.phase == "training run 0"
    assert [p.name for p in started][-1] == "training run 0" and not (run / "eval").exists()
    assert len(read_jsonl(run / "train" / "run-0" / "history.jsonl")) == 1

    notes: list[str] = []
    resumed = run_study(dataclasses.replace(plan, run_dir=run, hooks=StudyHooks(note=notes.append)))
    assert resumed.status == StudyStatus.COMPLETE
    assert any(n.startswith("Resuming from") for n in notes)  # the training run continued from its checkpoint
    assert untimed_results(run) == untimed_results(reference)
    assert untimed(read_jsonl(run / "eval" / "episodes.jsonl")) == untimed(
        read_jsonl(reference / "eval" / "episodes.jsonl"))
    assert untimed(read_jsonl(run / "train" / "run-0" / "episodes.jsonl")) == untimed(
        read_jsonl(reference / "train" / "run-0" / "episodes.jsonl"))
