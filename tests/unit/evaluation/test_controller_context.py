"""Controllers built for a comparison learn the task's lifecycle durations, so rules can plan around the episode end."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from esper.data.tasks import TASKS, get_task_spec
from esper.env.setting import EpisodeSetting
from esper.evaluation.comparison import parse_controllers
from esper.evaluation.episodes import EpisodePlan, build_controller
from esper.kasmina.state import LifecycleConfig
from esper.tamiyo import HeuristicTamiyo


def _plan(task: str) -> EpisodePlan:
    return EpisodePlan(episode=EpisodeSetting(task=task, batch_size=32), seed=0, devices=[torch.device("cpu")])


@pytest.mark.parametrize(("task", "training", "latest"), [("synthetic", 3, 15), ("synthetic_text", 5, 13)])
def test_heuristic_plans_with_the_task_lifecycle(task: str, training: int, latest: int) -> None:
    plan = _plan(task)
    heuristic = build_controller(parse_controllers(["heuristic"])[0], plan, episode=0, index=0)
    assert isinstance(heuristic, HeuristicTamiyo)
    assert heuristic.config.seed_training_epochs == training
    assert heuristic.latest_germination_epoch(25) == latest


def test_a_task_whose_seeds_need_no_training_epochs_still_gets_a_heuristic(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lifecycle may let a seed blend straight away (0 training epochs); the heuristic still counts the epoch it
    was germinated in, instead of refusing the task."""
    name = "synthetic_no_training_epochs"
    spec = dataclasses.replace(get_task_spec("synthetic"), name=name, lifecycle=LifecycleConfig(min_training_epochs=0))
    monkeypatch.setitem(TASKS._factories, name, lambda: spec)  # a task of this test alone
    monkeypatch.setitem(TASKS._built, name, spec)
    heuristic = build_controller(parse_controllers(["heuristic"])[0], _plan(name), episode=0, index=0)
    assert isinstance(heuristic, HeuristicTamiyo) and heuristic.config.seed_training_epochs == 1
