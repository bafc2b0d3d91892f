"""Continuing an interrupted episode run (`esper train heuristic`, `esper compare`, a study's evaluation).

Paired episodes are independent given their index (every env, controller and data order is seeded from the run's
seed, its seed stream and the episode index), so a rerun can keep the episodes every controller finished and run the
rest: the result equals an uninterrupted run's. An episode counts as finished only when its result and every one of
its steps are logged (`esper.env.episode_logs`): one whose rows were torn or lost is run again, like an interrupted
one, so the logs never have a gap. A comparison runs in phases (the controllers side by side, then
`static:matched`, whose width depends on the first phase's results); a later phase's episodes only count once every
earlier phase is complete, because its setting would otherwise change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esper.env import EpisodeResult
from esper.env.episode_logs import EpisodeLogs
from esper.evaluation.episodes import EpisodePlan, paired_seeds
from esper.storage.rundir import RunDirectory, RunDirectoryError, read_jsonl, recorded_config
from esper.storage.rundirs import check_same_arguments, prepare_run_dir

__all__ = ["EPISODE_COUNT_KEY", "EventFilter", "ResumePoint", "episode_event_kept", "open_episode_dir", "resume_line",
           "resume_point"]

EPISODE_COUNT_KEY = "episodes"
"""The one argument a rerun may change: more paired episodes extend the run (each episode is seeded by its index)."""
EventFilter = Callable[[dict[str, Any]], bool | None]
"""Whether an event of a resumed run's log belongs to the work the resume keeps (None: it names no such work)."""


@dataclass(frozen=True)
class ResumePoint:
    """The episodes kept per phase (a prefix of episode indices each) and their results, in file order."""

    phases: tuple[tuple[str, ...], ...]
    completed: tuple[int, ...]  # per phase: episodes 0 .. completed − 1 are finished by every controller
    results: list[EpisodeResult]

    def phase_of(self, label: str | None) -> int:
        """The phase running `label` (a label of no phase, such as a static twin, runs with the first)."""
        return next((i for i, labels in enumerate(self.phases) if label in labels), 0)

    def keeps(self, label: str | None, episode: int) -> bool:
        return episode < self.completed[self.phase_of(label)]

    def done(self, phase: int) -> list[EpisodeResult]:
        return [r for r in self.results if r.controller in self.phases[phase]]

    @property
    def episodes_done(self) -> int:
        """Finished env-episodes (one controller's episode each), the unit progress counts in."""
        return len(self.results)


def _complete_prefix(results: Sequence[EpisodeResult], labels: Sequence[str]) -> int:
    """How many leading episode indices every label has a result for."""
    seen = {(r.controller, r.episode) for r in results}
    k = 0
    while all((label, k) in seen for label in labels):
        k += 1
    return k


def resume_point(run_dir: RunDirectory, phases: Sequence[Sequence[str]], episodes: int,
                 host_seed: Callable[[int], int]) -> ResumePoint:
    """What `run_dir` already holds of a run of `episodes` paired episodes in `phases` (its whole episodes);
    steps.jsonl and episodes.jsonl are cut back to it, so the rerun appends where the finished work ends. A phase may
    hold more than `episodes` (the run was asked for fewer this time): callers refuse that. Episodes that ran on
    another host seed than `host_seed(episode)` (another esper's seed rule) are refused before anything is cut."""
    logs = EpisodeLogs.read(run_dir.path)
    foreign = next((r for r in logs.rows if r.env_seed != host_seed(r.episode)), None)
    if foreign is not None:
        raise RunDirectoryError(
            f"{run_dir.path} holds episode {foreign.episode} on host seed {foreign.env_seed}, not the seed this run "
            f"draws ({host_seed(foreign.episode)}): it was made by an esper with another seed rule. Pass --overwrite "
            f"to start over, or use another --run-dir")
    stored = logs.whole()
    completed: list[int] = []
    for labels in phases:
        earlier_complete = all(k >= episodes for k in completed)
        completed.append(_complete_prefix(stored, labels) if earlier_complete else 0)
    point = ResumePoint(tuple(tuple(p) for p in phases), tuple(completed), [])
    point.results.extend(r for r in stored if r.controller in {c for p in phases for c in p}
                         and point.keeps(r.controller, r.episode))
    logs.cut({(r.controller, r.episode) for r in point.results})
    return point


def _has_episodes(path: Path) -> bool:
    return bool(read_jsonl(path / "episodes.jsonl"))


def open_episode_dir(path: Path, command: str, *, overwrite: bool, argv: list[str], config: dict[str, Any],
                     runtime: dict[str, Any], phases: Sequence[Sequence[str]], plan: EpisodePlan
                     ) -> tuple[RunDirectory, ResumePoint | None]:
    """A new run directory (config.json written), or the same command's interrupted run continued: the finished
    paired episodes are kept, their logs cut back to them, and the resume recorded. The event log is its telemetry's
    to cut (`episode_event_kept`), before the telemetry opens it again."""
    if prepare_run_dir(path, command=command, overwrite=overwrite, resumable=_has_episodes) == "new":
        run_dir = RunDirectory(path)
        run_dir.write_config(command, argv, config, runtime)
        return run_dir, None
    check_same_arguments(path, recorded_config(path), config, may_differ=(EPISODE_COUNT_KEY,))
    run_dir = RunDirectory(path, resume=True)
    episodes = int(config[EPISODE_COUNT_KEY])
    point = resume_point(run_dir, phases, episodes, lambda episode: paired_seeds(plan, episode)[0])
    finished = max(point.completed)
    if episodes < finished:
        raise RunDirectoryError(f"{path} already holds {finished} paired episodes: pass --episodes {finished} or "
                                f"more to continue it, or --overwrite to start over")
    run_dir.record_resume(argv, config, {"from_episodes": list(point.completed)})
    return run_dir, point


def resume_line(path: Path, point: ResumePoint, episodes: int) -> str:
    """What a resumed episode run kept, in one line."""
    return (f"Resuming {path}: {point.episodes_done} finished episode(s) kept "
            f"({', '.join(f'{k}/{episodes}' for k in point.completed)} paired episodes per phase)")


def episode_event_kept(point: ResumePoint) -> EventFilter:
    """Whether an event of the run's log belongs to an episode the resume keeps (None: it names no episode)."""

    def kept(event: dict[str, Any]) -> bool | None:
        data = event.get("data")
        if not isinstance(data, dict):
            return None
        episode = data.get("episode")
        if not isinstance(episode, int) or isinstance(episode, bool):
            return None
        return point.keeps(data.get("controller"), episode)

    return kept
