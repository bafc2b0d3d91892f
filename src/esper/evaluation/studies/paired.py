"""A study's directory and its paired-episode phases: each phase runs (or continues) in a run directory of its own,
with its own telemetry, recording the setting it measured so that a rerun continues it, and refuses it (naming the
difference) in another setting. A phase names files of the study directory (a tuning candidate, a policy's checkpoint,
a replay source, the tuned teacher) from `STUDY_DIR`, so a study copied or moved elsewhere continues there."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from esper.data.tasks import DataCache, get_task_spec
from esper.env.rewards import resolved_cost
from esper.env.setting import EpisodeSetting
from esper.evaluation.comparison import comparison_phases, parse_controllers
from esper.evaluation.episodes import one_test_sample
from esper.evaluation.phases import Phase, PhaseRunner
from esper.evaluation.results import ComparisonResult
from esper.evaluation.resume import episode_event_kept, open_episode_dir, resume_line
from esper.evaluation.run_data import data_record
from esper.evaluation.studies.plan import StudyPlan
from esper.evaluation.study import run_evaluation
from esper.leyline import TelemetryEventType, emit_if_wanted
from esper.leyline.errors import UserInputError
from esper.simic.ppo.config import TrainingConfig
from esper.storage.rundir import RunDirectory, holds_results, json_safe, recorded_config, write_json_atomic
from esper.storage.rundirs import check_same_arguments, prepare_run_dir

__all__ = ["STUDY_DIR", "WORKER_FIELDS", "measured_setting", "open_study", "phase_runner", "runs_already"]

WORKER_FIELDS = ("workers", "executor", "ray_address")
"""The `WorkerOptions` fields (a TrainingConfig's `execution`, and the flags that set them) that choose where the work
runs, never what it computes; --threads sets `threads` too, but the numbers depend on it."""
STUDY_DIR = "$STUDY_DIR"
"""How a phase's record names the study directory: where the study lives is no argument of its phases."""


def open_study(path: Path, plan: StudyPlan, settings: dict[str, Any], episode: EpisodeSetting
               ) -> tuple[RunDirectory, bool]:
    """The study directory, new or (same settings; more seeds or runs allowed) continued; True when new. Its
    config.json records the data of the study's base `episode` setting: its augmentation and validation split."""
    if prepare_run_dir(path, command="study", overwrite=plan.overwrite, resumable=holds_results) == "new":
        study = RunDirectory(path)
        study.write_config("study", list(plan.argv), settings, {"data_dir": str(plan.data.data_dir),
                                                                **data_record(get_task_spec(episode.task),
                                                                              episode.augment)})
        return study, True
    check_same_arguments(path, recorded_config(path), settings, may_differ=("seeds", "runs"))
    return RunDirectory(path, resume=True), False


def measured_setting(config: TrainingConfig) -> dict[str, Any]:
    """The training config (nested, as it records itself) without where its envs ran (workers change the wall time,
    not a single number), with the λ its reward charged in place of the null that means "the task's" (`not charged`
    where only logged: a family type's selection episodes, which no policy learns from)."""
    setting = config.to_dict()
    setting["execution"] = {k: v for k, v in setting["execution"].items() if k not in WORKER_FIELDS}
    episode, reward = config.episode, config.reward
    setting["reward"].update(resolved_cost(reward.reward_family, get_task_spec(episode.task),
                                           reward.charged_param_cost(), charge=reward.charge,
                                           compute_cost=reward.charged_compute_cost(),
                                           max_train_samples=episode.max_train_samples, logged_only=True))
    return setting


def _with_new_fields(path: Path, recorded: dict[str, Any]) -> dict[str, Any]:
    """A phase recorded before the training config had some of today's settings ran as their defaults do: a setting
    only describes one its phase could have run in once it exists, and a new setting defaults to what the code did
    before it. So a phase stays valid across such a change instead of being rerun (hours of a study). A phase recorded
    before the config had sections is refused, naming the fix."""
    training = recorded.get("training")
    if not isinstance(training, dict):
        return recorded
    defaults = measured_setting(TrainingConfig())
    flat = sorted(k for k in training if k not in defaults)
    if flat:
        raise UserInputError(f"{path / 'config.json'} records the training setting of an esper whose config had no "
                             f"sections ({', '.join(flat[:3])}, ... outside {', '.join(TrainingConfig.sections())}): "
                             f"continue this study with that esper version, or start it over with --overwrite")
    complete = {k: ({**v, **training[k]} if isinstance(v, dict) and isinstance(training.get(k), dict) else
                    training.get(k, v)) for k, v in defaults.items()}
    return {**recorded, "training": complete}


def _study_relative(value: Any, root: Path) -> Any:
    """`value` as JSON, with each path inside the study directory `root` (alone, or a spec's argument: `ppo:PATH`),
    however it was spelled (as given, absolute or resolved), written from `STUDY_DIR`."""
    spellings = sorted({str(root), str(root.absolute()), str(root.resolve())} - {"."}, key=len, reverse=True)
    inside = re.compile(f"(^|:)(?:{'|'.join(map(re.escape, spellings))})(?=/|$)")

    def relative(item: Any) -> Any:
        if isinstance(item, str):
            return inside.sub(lambda m: m.group(1) + STUDY_DIR, item)
        if isinstance(item, dict):
            return {k: relative(v) for k, v in item.items()}
        if isinstance(item, list):
            return [relative(v) for v in item]
        return item

    return relative(json_safe(value))


def runs_already(path: Path, spec: str, root: Path) -> bool:
    """Whether the phase in `path` has finished episodes and runs `spec` (a study's phases record their specs
    relative to the study directory `root`)."""
    if not _holds_finished_work(path):
        return False
    specs = recorded_config(path).get("specs")
    return isinstance(specs, list) and _study_relative(spec, root) in specs


def _holds_finished_work(path: Path) -> bool:
    """Whether the phase directory `path` has a record of its setting and finished episodes."""
    return (path / "config.json").exists() and holds_results(path)


def _phase_config(path: Path, phase: Phase, config: TrainingConfig, settings: dict[str, Any], root: Path,
                  note: Callable[[str], None]) -> tuple[dict[str, Any], bool]:
    """A phase's arguments (study-relative), and whether a stored phase compared other controllers (a study rerun
    with more or fewer training runs): then it starts over, and says so. A stored phase of the same controllers in
    another setting is refused, naming the difference: its finished episodes are never thrown away unasked."""
    phase_config = _study_relative(
        {"controllers": phase.labels, "specs": phase.specs, "episodes": phase.seeds,
         "seed_stream": phase.plan.stream.value, "training": measured_setting(config),
         **{k: v for k, v in settings.items() if k not in ("seeds", "selection_seeds", "runs", "controllers")}}, root)
    if not _holds_finished_work(path):
        return phase_config, False  # nothing finished to keep: it starts (over) in any case
    recorded = recorded_config(path)
    complete = _study_relative(_with_new_fields(path, recorded), root)
    if complete.get("specs") == phase_config["specs"]:  # an earlier esper recorded the study's extra specs there
        complete["controllers"] = phase_config["controllers"]
    compared = complete.get("controllers")
    if compared != phase_config["controllers"]:
        note(f"Starting {phase.name} over in {path}: it compared {compared}, the study now compares {phase.labels}")
        return phase_config, True
    check_same_arguments(path, complete, phase_config, may_differ=("episodes",), fix=(
        f"rerun the study with the arguments this phase ran with to resume it, remove {path} to run the phase again, "
        f"or pass --overwrite (or another --run-dir) to start the study over"))
    if complete != recorded:  # from now on the phase's record names every field of its setting, study-relative
        record = json.loads((path / "config.json").read_text(encoding="utf-8"))
        write_json_atomic(path / "config.json", {**record, "config": complete})
    return phase_config, False


def phase_runner(plan: StudyPlan, config: TrainingConfig, settings: dict[str, Any], cache: DataCache, root: Path
                 ) -> PhaseRunner:
    """Runs (or continues) a paired-episode phase of the study in directory `root` in the setting of `config`, with
    its own telemetry."""
    return lambda phase: _run_phase(plan, phase, config, settings, cache, root)


def _run_phase(plan: StudyPlan, phase: Phase, config: TrainingConfig, settings: dict[str, Any], cache: DataCache,
               root: Path) -> ComparisonResult:
    phases = comparison_phases(parse_controllers(phase.specs), phase.labels)
    phase_config, stale = _phase_config(phase.path, phase, config, settings, root, plan.hooks.note)
    task, data = phase.plan.task, data_record(phase.plan.task, phase.plan.episode.augment)
    charged = {k: phase_config["training"]["reward"][k] for k in ("param_cost", "charge", "compute_cost")}
    run_dir, resume = open_episode_dir(phase.path, "compare", overwrite=stale, argv=list(plan.argv),
                                       config=phase_config, phases=phases, plan=phase.plan,
                                       runtime={"data_dir": str(plan.data.data_dir), **data, **charged})
    if resume is not None:
        plan.hooks.note(resume_line(phase.path, resume, phase.seeds))
    tie = plan.tie_threshold if plan.tie_threshold is not None else one_test_sample(phase.plan, cache)
    kept = None if resume is None else episode_event_kept(resume)
    with closing(run_dir), plan.hooks.telemetry(run_dir, phase_config, kept) as telemetry:
        emit_if_wanted(telemetry.sink, TelemetryEventType.TRAINING_STARTED, f"study {phase.name} on {task.name}", {
            "command": f"study {phase.name}", "task": task.name, "topology": task.topology,
            "n_envs": len(phase.specs), "controllers": phase.labels, "n_episodes": phase.seeds,
            "config": phase_config, "reward": phase.plan.describe_reward(), "augmentation": data["augmentation"]})
        if telemetry.progress is not None:
            max_epochs = phase.plan.episode.max_epochs
            telemetry.progress.start(phase.name, phase.seeds * len(phase.specs) * max_epochs,
                                     round_size=len(phases[0]),
                                     done=(resume.episodes_done if resume is not None else 0) * max_epochs)
        return run_evaluation(phase.plan, phase.specs, phase.labels, phase.seeds, cache, run_dir=run_dir,
                              sink=telemetry.sink, resume=resume, match=phase.match, tie_threshold=tie)
