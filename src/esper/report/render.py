"""Render a run directory: the run type it holds picks the report module that draws it.

The run type comes from RUN_DIR/config.json ("command"): heuristic, compare, ppo, iql or study. Plots are read from
the run's artifacts only (steps.jsonl, episodes.jsonl, history.jsonl, results.json), never from debug-level
telemetry, and through the same typed rows their writers use: a file written under another schema is an error naming
file and line. An IQL run gets its learning curves (and its live evaluation's comparison plots, in eval/); a study
gets the plots of each of its phases (train/, selection/, eval/) beside its summary.md. A datagen directory (it holds
manifest.json) gets the dataset report: op mix, returns and seed outcomes per behaviour policy.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from esper.datagen.reader import MANIFEST_FILE
from esper.env.logs import EpisodeResult, StepRow
from esper.evaluation.comparison import ComparisonResult
from esper.leyline.errors import UserInputError
from esper.simic.iql.history import IQLHistoryRow
from esper.simic.ppo.history import PPOHistoryRow
from esper.storage.rows import LogFormatError, read_rows

RUN_TYPES = ("heuristic", "compare", "ppo", "iql", "study")
NEEDED = {"heuristic": (StepRow.FILE, EpisodeResult.FILE), "compare": (ComparisonResult.FILE, StepRow.FILE),
          "ppo": (PPOHistoryRow.FILE, StepRow.FILE, EpisodeResult.FILE), "iql": (IQLHistoryRow.FILE,),
          "study": ()}
STUDY_PHASES = ("selection", "train", "replay-source", "eval")
WHAT = {StepRow.FILE: "one line per env step", EpisodeResult.FILE: "one line per finished episode",
        PPOHistoryRow.FILE: "one line per PPO rollout batch or IQL epoch", ComparisonResult.FILE: "comparison results",
        "config.json": "run configuration"}


class LogRow(Protocol):
    """A typed line-log row class: it names its file."""

    FILE: ClassVar[str]


R = TypeVar("R", bound=LogRow)


def run_type(run_dir: Path) -> str:
    """The run type from config.json's "command" ("train heuristic" and "heuristic" both give "heuristic")."""
    path = run_dir / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: a run directory starts with config.json ({WHAT['config.json']}); "
                                f"pass the folder an esper command wrote")
    data = _json(path)
    if not isinstance(data, dict) or not isinstance(data.get("command"), str):
        raise LogFormatError(f"{path} has no \"command\" string: is this an esper run directory?")
    kind = data["command"].removeprefix("train ").strip()
    if kind not in RUN_TYPES:
        raise UserInputError(f"{path}: run type {data['command']!r} has no report: pass the run directory of one of "
                             f"{', '.join(RUN_TYPES)}")
    return kind


def render_report(run_dir: Path, out: Path | None = None, warn: Callable[[str], None] = print) -> list[Path]:
    """Write the report PNGs for `run_dir` into `out` (default RUN_DIR/report); returns the files written.

    Every input is read and checked before the first plot, so a bad run directory leaves no partial report. `warn`
    receives what the plots cannot show, such as a comparison that is still unfinished.
    """
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise UserInputError(f"{run_dir} is a file, not a run directory: pass the folder that holds config.json")
    if not run_dir.is_dir():
        raise FileNotFoundError(f"Run directory {run_dir} does not exist: pass the folder an esper command wrote "
                                f"(its last lines name it)")
    out = Path(out) if out is not None else run_dir / "report"
    if out.exists() and not out.is_dir():
        raise UserInputError(f"--out {out} is a file, not a directory: pass a folder for the PNGs")
    if (run_dir / MANIFEST_FILE).is_file():
        from esper.report.datagen import datagen_report

        _make_dir(out)
        return datagen_report(run_dir, out)
    kind = run_type(run_dir)
    for name in NEEDED[kind]:
        if not (run_dir / name).is_file():
            raise FileNotFoundError(f"{run_dir / name} not found: a {kind} report needs {name} ({WHAT[name]})")
    if kind == "study":
        phases = _phases_report(run_dir, _study_phases(run_dir), out, warn)
        if not (run_dir / ComparisonResult.FILE).is_file():
            return phases  # unfinished: each finished phase's plots only
        from esper.report.study import compute_figure

        # the study's results, not its eval phase's: they also hold the controllers whose episodes were copied
        return [*phases, compute_figure(load_results(run_dir), out / "accuracy_vs_compute.png")]
    if kind == "iql":
        from esper.report.iql import iql_report

        history = load_rows(run_dir, IQLHistoryRow)
        _make_dir(out)
        live_eval = (run_dir / "eval" / ComparisonResult.FILE).is_file()
        live = _phases_report(run_dir, ["eval"], out, warn) if live_eval else []
        return iql_report(history, out) + live
    from esper.report.compare import compare_report
    from esper.report.heuristic import heuristic_report
    from esper.report.ppo import ppo_report

    steps = load_rows(run_dir, StepRow)
    draw: Callable[[Path], list[Path]]
    if kind == "heuristic":
        draw = partial(heuristic_report, steps, load_rows(run_dir, EpisodeResult))
    elif kind == "compare":
        results = load_results(run_dir)
        note = results.incomplete_note()
        if note is not None:
            warn(f"{run_dir / ComparisonResult.FILE}: {note}")
        draw = partial(compare_report, results, steps)
    else:
        draw = partial(ppo_report, load_rows(run_dir, PPOHistoryRow), steps, load_rows(run_dir, EpisodeResult))
    _make_dir(out)
    return draw(out)


def _numbered(parent: Path, prefix: str) -> list[str]:
    """`parent`'s subdirectories `<prefix><n>` in numeric order, as paths relative to parent's parent."""
    names = sorted((p.name for p in parent.glob(f"{prefix}*")), key=lambda name: int(name.removeprefix(prefix)))
    return [f"{parent.name}/{name}" for name in names]


def _study_phases(run_dir: Path) -> list[str]:
    """A study's phase directories that hold a run: each selection round, each training run and its replay source in
    order, then eval/."""
    phases = [*_numbered(run_dir / "selection", "round-"), *_numbered(run_dir / "train", "run-"),
              *_numbered(run_dir / "replay-source", "run-"), "eval"]
    return [p for p in phases if (run_dir / p / "config.json").is_file()]


def _phases_report(run_dir: Path, phases: list[str], out: Path, warn: Callable[[str], None]) -> list[Path]:
    """The reports of the run directories inside `run_dir` (a study's phases, an IQL run's live evaluation), each
    into its own folder of `out`."""
    if not phases:
        raise FileNotFoundError(f"{run_dir} holds none of {', '.join(STUDY_PHASES)} yet: nothing to plot")
    return [path for phase in phases for path in render_report(run_dir / phase, out / phase, warn)]


def load_rows(run_dir: Path, cls: type[R]) -> list[R]:
    """The typed rows of `cls`'s line log (its FILE); an empty log is an error, there is nothing to plot yet."""
    path = run_dir / cls.FILE
    rows = read_rows(path, cls)
    if not rows:
        raise UserInputError(f"{path} has no complete rows: nothing to plot yet")
    return rows


def load_results(run_dir: Path) -> ComparisonResult:
    """A comparison's results.json, or a study's (its comparison, the study's own results beside it left out)."""
    path = run_dir / ComparisonResult.FILE
    data = _json(path)
    if not isinstance(data, dict):
        raise LogFormatError(f"{path} is not a JSON object")
    return ComparisonResult.from_written(data, source=str(path))[0]


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LogFormatError(f"{path} is not valid JSON: {exc}") from exc


def _make_dir(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserInputError(f"Cannot create the report folder {out} ({exc.strerror or exc}): pass a writable --out"
                             ) from exc
