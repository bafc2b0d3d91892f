"""Fixtures of the CLI tests: in-process `esper study` runs without their closing plots.

A study ends by rendering report/ (dozens of matplotlib PNGs: a sixth to a fifth of a tiny study's CPU time). Tests
of what a study computes, resumes or refuses skip that step; test_your_own.py checks that a study (run as a command
of its own) draws them, test_study_selection.py what `esper report` draws of a study directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

STUDY_PLOTS = "esper.cli.study.render_report"
"""Where `esper study` renders its report (raising=True: a move of that call fails these fixtures, not silently)."""


def _no_plots(run_dir: Path, *args: object, **kwargs: object) -> list[Path]:
    assert Path(run_dir).is_dir()  # called on the study directory it finished
    return []


@pytest.fixture
def no_study_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """For one test: `esper study` writes no report/ PNGs."""
    monkeypatch.setattr(STUDY_PLOTS, _no_plots)


@pytest.fixture(scope="module")
def no_study_plots_in_module() -> Iterator[None]:
    """For a module's tests and module-scoped fixtures: `esper study` writes no report/ PNGs."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(STUDY_PLOTS, _no_plots)
        yield
