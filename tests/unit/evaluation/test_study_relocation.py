"""A study directory copied elsewhere continues there: its phases name the files of the study directory (a tuning
candidate, the tuned teacher) from $STUDY_DIR, so every finished phase resumes instead of running again. A phase
whose arguments truly differ is refused, naming the difference, and keeps its episodes; one that compares other
controllers (a study rerun with other runs) starts over and says so. Real episodes at a tiny size: seconds."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from esper.data.tasks import DataCache, DataOptions
from esper.env.setting import EpisodeSetting
from esper.evaluation.episodes import EpisodePlan
from esper.evaluation.phases import Phase, PhaseRunner
from esper.evaluation.studies import StudyHooks, StudyPlan
from esper.evaluation.studies.paired import STUDY_DIR, phase_runner
from esper.evaluation.studies.task_config import _teacher_moved
from esper.evaluation.tuning import tune_heuristic
from esper.evaluation.tuning_space import SearchSpace
from esper.leyline.seeding import SeedStream
from esper.simic.ppo.config import TrainingConfig
from esper.storage.rundir import RunDirectoryError
from esper.storage.rundirs import check_same_arguments
from esper.tamiyo import HeuristicRecord, TunedSetting

MAX_EPOCHS = 12  # the shortest episodes a heuristic threshold matters in, so the heuristic can be tuned
QUICK = TrainingConfig.preset("quick")


@pytest.fixture(scope="module")
def cache() -> DataCache:
    return DataCache(DataOptions())


def _plan() -> EpisodePlan:
    episode = EpisodeSetting(task="synthetic", max_epochs=MAX_EPOCHS, batch_size=64, max_train_samples=64,
                             max_val_samples=32)
    return EpisodePlan(episode=episode, seed=42, devices=[torch.device("cpu")], max_test_samples=32, param_cost=1.0,
                       stream=SeedStream.SELECTION)


def _runner(root: Path, cache: DataCache, notes: list[str], config: TrainingConfig | None = None) -> PhaseRunner:
    """The phase runner of a study in `root` (the command line's, without its console)."""
    plan = StudyPlan(run_dir=root, tie_threshold=0.1, hooks=StudyHooks(note=notes.append))
    return phase_runner(plan, config or QUICK, {"preset": "quick"}, cache, root)


def _episodes(root: Path) -> dict[str, str]:
    """Every phase's episodes.jsonl, as written (wall times included: a rerun episode differs)."""
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("episodes.jsonl"))}


def _recorded(path: Path) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((path / "config.json").read_text())["config"]
    return config


def _teacher(root: Path) -> TrainingConfig:
    """A policies' setting taught by the study's tuned heuristic, named (as a study names it) by its resolved path."""
    return QUICK.with_overrides(**{"ppo.teacher": f"heuristic:{(root / 'tuned.json').resolve()}"})


def _tuning_and_evaluation(root: Path, cache: DataCache, notes: list[str]) -> None:
    """A two-trial tuning of the heuristic in `root`/tuning, then an evaluation in `root`/eval of a policy setting
    taught by the tuned heuristic."""
    plan = _plan()
    tuned = tune_heuristic(plan, root / "tuning", 1, 3 * MAX_EPOCHS, _runner(root, cache, notes),
                           record_path=root / "tuned.json")
    evaluation = Phase("evaluation", root / "eval", dataclasses.replace(plan, tuned_heuristic=tuned.path),
                       ["static", "heuristic:tuned"], ["static", "heuristic:tuned"], 1)
    _runner(root, cache, notes, _teacher(root))(evaluation)


def test_a_copied_study_resumes_every_finished_phase_its_tuning_trials_too(tmp_path: Path, cache: DataCache) -> None:
    first, notes = tmp_path / "study", []
    _tuning_and_evaluation(first, cache, notes)
    trials = sorted((first / "tuning" / "trials").iterdir())
    assert len(trials) == 2 and not any("Resuming" in n for n in notes)
    for trial in trials:  # each trial names its candidate from the study directory, wherever that is
        assert _recorded(trial)["specs"] == [f"heuristic:{STUDY_DIR}/tuning/candidates/{trial.name}.json"]
    assert _recorded(first / "eval")["training"]["ppo"]["teacher"] == f"heuristic:{STUDY_DIR}/tuned.json"
    finished = _episodes(first)
    assert len(finished) == 4  # static, two trials, the evaluation

    copy = tmp_path / "elsewhere" / "study"
    shutil.copytree(first, copy)
    notes.clear()
    _tuning_and_evaluation(copy, cache, notes)
    assert _episodes(copy) == finished  # not one episode run again
    assert sum(n.startswith(f"Resuming {copy}") for n in notes) == 4, notes
    assert json.loads((copy / "tuned.json").read_text())["thresholds"] == json.loads(
        (first / "tuned.json").read_text())["thresholds"]


def _record(path: Path) -> Path:
    """The default heuristic's thresholds as a record at `path` (a tuning candidate)."""
    plan = _plan()
    space = SearchSpace.of(plan)
    record = HeuristicRecord(thresholds=space.thresholds(space.default_params()),
                             setting=TunedSetting.model_validate(plan.episode.controller_setting()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record.to_dict()))
    return path


def test_a_phase_of_another_setting_is_refused_naming_the_difference_and_keeps_its_episodes(
        tmp_path: Path, cache: DataCache) -> None:
    root, notes = tmp_path / "study", []
    phase = Phase("a phase", root / "phase", _plan(), ["static"], ["static"], 1)
    _runner(root, cache, notes)(phase)
    finished = _episodes(root)
    lr = QUICK.with_overrides(**{"ppo.lr": 0.01})
    with pytest.raises(RunDirectoryError, match=r"training\.ppo\.lr: 0\.0003 then, 0\.01 now\): rerun the study with "
                                                r"the arguments this phase ran with .* remove .* --overwrite"):
        _runner(root, cache, notes, lr)(phase)
    assert _episodes(root) == finished and not any("over" in n for n in notes)

    # a phase of other controllers (a study rerun with other runs) is another comparison: it starts over, saying so
    wider = dataclasses.replace(phase, specs=["static", "heuristic"], labels=["static", "heuristic"])
    _runner(root, cache, notes)(wider)
    assert notes[-1].startswith(f"Starting a phase over in {root / 'phase'}: it compared ['static']")
    assert [json.loads(line)["controller"] for line in _episodes(root)["phase/episodes.jsonl"].splitlines()] == [
        "static", "heuristic"]


def test_a_phase_recorded_with_absolute_paths_resumes_in_place_and_is_refused_elsewhere(
        tmp_path: Path, cache: DataCache) -> None:
    """A record that names the study's files by absolute path (as esper did before $STUDY_DIR) resumes where it was
    written, recorded study-relative from then on; copied elsewhere, it names the old place and is refused."""
    root, notes = tmp_path / "study", []
    candidate = _record(root / "candidates" / "default.json")
    phase = Phase("a trial", root / "trial", _plan(), [f"heuristic:{candidate}"], ["heuristic:default"], 1)
    _runner(root, cache, notes)(phase)
    absolute = json.loads((root / "trial" / "config.json").read_text())
    absolute["config"]["specs"] = [f"heuristic:{candidate.resolve()}"]
    (root / "trial" / "config.json").write_text(json.dumps(absolute))
    finished = _episodes(root)
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)

    _runner(root, cache, notes)(phase)
    assert notes[-1].startswith(f"Resuming {root / 'trial'}") and _episodes(root) == finished
    assert _recorded(root / "trial")["specs"] == [f"heuristic:{STUDY_DIR}/candidates/default.json"]

    moved = dataclasses.replace(phase, path=copy / "trial", specs=[f"heuristic:{copy / 'candidates' / 'default.json'}"])
    changed = f"specs: ['heuristic:{candidate.resolve()}'] then, ['heuristic:{STUDY_DIR}/candidates/default.json'] now"
    with pytest.raises(RunDirectoryError, match=re.escape(changed)):
        _runner(copy, cache, notes)(moved)
    assert _episodes(copy) == finished


def test_arguments_are_compared_by_dotted_key() -> None:
    recorded = {"training": {"ppo": {"lr": 0.1, "gamma": 0.9}}, "episodes": 2, "config": {"a": 1}}
    check_same_arguments(Path("run"), recorded, {**recorded, "episodes": 3, "config": {"a": 2}},
                         may_differ=("episodes", "config"))
    with pytest.raises(RunDirectoryError, match=r"\(training\.ppo\.lr: 0\.1 then, 0\.2 now\): fix it$"):
        check_same_arguments(Path("run"), recorded, {**recorded, "training": {"ppo": {"lr": 0.2, "gamma": 0.9}}},
                             fix="fix it")


def test_a_training_run_taught_by_the_same_tuned_heuristic_elsewhere_continues_with_its_new_path(
        tmp_path: Path) -> None:
    """A copied study's training run names the tuned heuristic by its old path: the same thresholds for the same
    setting at the new path are the same teacher; other thresholds are another one (resume_config refuses it)."""
    old, new = _record(tmp_path / "study" / "tuned.json"), _record(tmp_path / "copy" / "tuned.json")
    saved = QUICK.with_overrides(**{"ppo.teacher": f"heuristic:{old}"})
    assert _teacher_moved(saved, f"heuristic:{new}").ppo.teacher == f"heuristic:{new}"
    record = json.loads(new.read_text())
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**record, "thresholds": {**record["thresholds"], "embargo_epochs_after_cull": 9}}))
    assert _teacher_moved(saved, f"heuristic:{other}") == saved
    assert _teacher_moved(saved, "heuristic") == saved
