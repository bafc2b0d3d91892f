"""A teacher-residual PPO run, end to end: its initial policy plays its teacher's episodes, and it resumes exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from esper.data.tasks import DataCache, DataOptions
from esper.env.driver import EnvPool
from esper.env.logs import StepRow
from esper.env.setting import EpisodeSetting
from esper.evaluation.episodes import EpisodePlan, run_controller_episodes
from esper.evaluation.runs import RunLabels
from esper.evaluation.study import teacher_overrides
from esper.execution.workers import WorkerOptions
from esper.simic.ppo.checkpoint import trim_logs
from esper.simic.ppo.config import TrainingConfig
from esper.simic.ppo.controller import PPOPolicy, decides_as_its_teacher
from esper.simic.ppo.train import PPORun, train_ppo
from esper.storage.checkpoint import CheckpointFormatError
from esper.storage.rundir import RunDirectory, read_jsonl
from esper.tamiyo import CONTROLLERS

# 12 epochs at batch 32: the heuristic germinates at epoch 2, and its seed is fossilized within the episode.
SETTING: dict[str, Any] = {"task": "synthetic", "max_epochs": 12, "max_train_samples": 256, "max_val_samples": 128,
                           "batch_size": 32}
CONFIG = TrainingConfig.preset("quick").with_overrides(
    **SETTING, n_episodes=4, n_envs=2, group_size=1, device="cpu", param_cost=1.0, teacher="heuristic",
    critic_warmup_batches=1, minibatch_size=16, n_epochs=2)


def _plan() -> EpisodePlan:
    return EpisodePlan(episode=EpisodeSetting.from_dict(SETTING), seed=42, devices=[torch.device("cpu")],
                       max_test_samples=128, param_cost=1.0)


def _episodes(specs: list[str], run_dir: RunDirectory | None = None) -> dict[str, list[dict[str, Any]]]:
    """Each controller's paired episodes (results without their wall time and label) on 2 evaluation seeds."""
    with EnvPool(WorkerOptions(), DataCache(DataOptions())) as pool:
        results = run_controller_episodes([CONTROLLERS.parse(s) for s in specs], _plan(), 2, pool, run_dir=run_dir,
                                          labels=[str(i) for i in range(len(specs))])
    out: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        row = r.to_dict()
        for key in ("wall_seconds", "controller", "env_id"):
            row.pop(key, None)
        out.setdefault(r.controller, []).append(row)
    return out


@pytest.fixture(scope="module")
def init_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A residual run's initial policy, with ε = 0 (its training is not what these tests look at)."""
    run = tmp_path_factory.mktemp("residual")
    train_ppo(CONFIG.with_overrides(teacher_epsilon=0.0), PPORun(RunDirectory(run), should_stop=lambda: True))
    return run / "checkpoints" / "init.pt"


def test_the_initial_residual_policy_plays_its_teacher_s_episodes_bit_for_bit(init_checkpoint: Path) -> None:
    episodes = _episodes(["heuristic", f"ppo:{init_checkpoint}"])
    assert episodes["0"] == episodes["1"]
    assert sum(e["seeds_fossilized"] for e in episodes["0"]) > 0  # the teacher grew: the episodes are not all WAIT


def test_with_any_epsilon_the_initial_policy_s_mode_is_its_teacher_and_a_planted_residual_is_not(
        init_checkpoint: Path, tmp_path: Path) -> None:
    """Smoothed (ε = 0.1), the initial policy's mode is still the teacher; a residual that does not start at zero
    (planted: +50 on WAIT, past any smoothing) leaves it, and its decisions say where."""
    data = torch.load(init_checkpoint, weights_only=True)
    data["config"]["ppo"]["teacher_epsilon"] = 0.1
    smoothed, planted = tmp_path / "smoothed.pt", tmp_path / "planted.pt"
    torch.save(data, smoothed)
    data["agent"]["network"]["heads.op.2.bias"][0] += 50.0
    torch.save(data, planted)
    labels = {"1": RunLabels(0).final, "2": RunLabels(1).final}
    episodes = _episodes(["heuristic", f"ppo:{smoothed}", f"ppo:{planted}"], RunDirectory(tmp_path / "eval"))
    assert episodes["0"] == episodes["1"]
    assert episodes["0"] != episodes["2"]
    # a study copies the teacher's episodes for the smoothed policy and runs the planted one; also one restricted to
    # fewer blueprints than its teacher germinates on its own, and one on a teacher that samples (a behaviour policy
    # draws from a stream of its own, which differs between the policy's teacher and the teacher run on its own)
    data["agent"]["network"]["heads.op.2.bias"][0] -= 50.0
    restricted, sampling = tmp_path / "restricted.pt", tmp_path / "sampling.pt"
    torch.save({**data, "config": {**data["config"], "ppo": {**data["config"]["ppo"], "blueprints": ["norm"]}}},
               restricted)
    torch.save({**data, "config": {**data["config"], "ppo": {**data["config"]["ppo"],
                                                             "teacher": "behavior:aggressive"}}}, sampling)
    assert decides_as_its_teacher(smoothed) and not decides_as_its_teacher(planted)
    assert not decides_as_its_teacher(restricted) and not decides_as_its_teacher(sampling)
    steps = [{**row, "controller": labels.get(row["controller"], row["controller"])}
             for row in read_jsonl(tmp_path / "eval" / StepRow.FILE)]
    (tmp_path / "named.jsonl").write_text("".join(json.dumps(row) + "\n" for row in steps), encoding="utf-8")
    smoothed_share, planted_share = teacher_overrides(tmp_path / "named.jsonl", 2) or []
    assert smoothed_share == 0.0
    assert 0.0 < planted_share < 1.0  # it waits where the teacher germinates; where the teacher waits, it agrees


def test_a_policy_whose_teacher_record_is_gone_says_so(init_checkpoint: Path, tmp_path: Path) -> None:
    data = torch.load(init_checkpoint, weights_only=True)
    gone = tmp_path / "moved-study" / "tuned-heuristic.json"
    data["config"]["ppo"]["teacher"] = f"heuristic:{gone}"
    torch.save(data, tmp_path / "orphan.pt")
    with pytest.raises(CheckpointFormatError, match=r"gone \(was its study directory moved\?\)") as error:
        PPOPolicy.from_checkpoint(tmp_path / "orphan.pt")
    assert str(gone) in str(error.value) and "another esper version" not in str(error.value)


def test_a_policy_whose_teacher_record_was_named_relative_says_where_it_looked(
        init_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = torch.load(init_checkpoint, weights_only=True)
    data["config"]["ppo"]["teacher"] = "heuristic:records/tuned.json"
    torch.save(data, tmp_path / "relative.pt")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointFormatError, match="relative to the directory its run started in") as error:
        PPOPolicy.from_checkpoint(tmp_path / "relative.pt")
    assert str(tmp_path) in str(error.value) and "moved" not in str(error.value)


SHORT = CONFIG.with_overrides(max_epochs=4, max_train_samples=128, max_val_samples=64)


def _train(run: Path, stop_after_steps: int | None = None, resume: bool = False) -> None:
    calls = {"n": 0}

    def should_stop() -> bool:
        calls["n"] += 1
        return stop_after_steps is not None and calls["n"] > stop_after_steps

    checkpoint = run / "checkpoints" / "latest.pt" if resume else None
    if checkpoint is not None:
        saved = torch.load(checkpoint, weights_only=True)
        trim_logs(run, checkpoint, int(saved["batches_completed"]), int(saved["episodes_completed"]))
    run_dir = RunDirectory(run, resume=resume)
    if not resume:
        run_dir.write_config("ppo", [], SHORT.to_dict(), {})
    train_ppo(SHORT, PPORun(run_dir, resume_from=checkpoint, should_stop=should_stop))


def test_a_resumed_residual_run_writes_the_same_bits(tmp_path: Path) -> None:
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    _train(straight)
    _train(resumed, stop_after_steps=10)  # past the warm-up and the first actor batch, inside the second
    saved = torch.load(resumed / "checkpoints" / "latest.pt", weights_only=True)
    assert saved["batches_completed"] == 2 and saved["agent"]["train_steps"] == 1  # the actor has moved and has state
    _train(resumed, resume=True)
    a, b = (torch.load(r / "checkpoints" / "final.pt", weights_only=True) for r in (straight, resumed))
    assert a["batches_completed"] == b["batches_completed"] == 3
    for name, tensor in a["agent"]["network"].items():
        assert torch.equal(tensor, b["agent"]["network"][name]), name
    for log in ("episodes.jsonl", "history.jsonl", "steps.jsonl"):
        rows_a, rows_b = read_jsonl(straight / log), read_jsonl(resumed / log)
        for row in (*rows_a, *rows_b):
            for key in ("wall_seconds", "rollout_seconds", "update_seconds", "env_epochs_per_second"):
                row.pop(key, None)
        assert rows_a == rows_b, log
    history = read_jsonl(straight / "history.jsonl")
    assert history[0]["critic_warmup"] == 1.0 and "critic_warmup" not in history[1]
