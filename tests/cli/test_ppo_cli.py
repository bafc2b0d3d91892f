"""`esper train ppo` end to end on tiny budgets: run directory, checkpoints,
partial batches, exact resume, strict config, missing data, reward families, AMP on CPU, and PPO in `esper compare`.

Every run is in-process (`main(argv)`) on CPU; runs that several tests inspect are module-scoped fixtures.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from esper.cli import train_ppo as ppo_cmd
from esper.cli.main import build_parser, main
from esper.cli.train_ppo import effective_config
from esper.simic.ppo.config import TrainingConfig
from esper.storage.rundir import read_jsonl

pytestmark = pytest.mark.smoke

OUTPUT = ["--no-tui", "--no-tensorboard", "--telemetry-level", "minimal", "--device", "cpu"]
TINY = ["--set", "max_train_samples=256", "--set", "max_val_samples=128", "--set", "max_epochs=3", "--set", "n_envs=2",
        "--set", "group_size=1", "--reward-family", "contribution"]
QUICK = ["train", "ppo", "--preset", "quick", *TINY, *OUTPUT]
TIME_KEYS = {"rollout_seconds", "update_seconds", "env_epochs_per_second", "time", "timestamp", "wall_time",
             "wall_seconds"}


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_cli(argv: list[str]) -> Result:
    """main(argv) with stdout/stderr captured (usable from module-scoped fixtures, unlike capsys)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return Result(code, out.getvalue(), err.getvalue())


def ppo(run_dir: Path, *extra: str) -> Result:
    return run_cli([*QUICK, *extra, "--run-dir", str(run_dir)])


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = torch.load(path, weights_only=True)
    return data


def without_time(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k not in TIME_KEYS} for row in rows]


def assert_same_state(a: Any, b: Any, where: str = "") -> None:
    """Bit-identical nested state (tensors by torch.equal, everything else by ==)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for k in a:
            assert_same_state(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def is_finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


# ------------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def mini_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("ppo") / "mini"
    result = ppo(run, "--set", "n_episodes=2")
    assert result.code == 0, result.err
    first, second = result.out.splitlines()[:2]
    assert first == f"Run directory: {run}" and second.startswith("Config: preset quick;")  # where, before any work
    return run


@pytest.fixture(scope="module")
def partial_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("ppo") / "partial"
    result = ppo(run, "--set", "n_episodes=3")
    assert result.code == 0, result.err
    return run


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run A: two batches in one go."""
    run = tmp_path_factory.mktemp("ppo") / "straight"
    result = ppo(run, "--set", "n_episodes=4")
    assert result.code == 0, result.err
    return run


# ------------------------------------------------------------------------------------------------- mini-run


def test_mini_run_writes_a_complete_run_dir(mini_run: Path) -> None:
    config = json.loads((mini_run / "config.json").read_text())
    assert config["command"] == "ppo"
    assert set(config) >= {"argv", "config", "runtime", "versions", "started_at"}
    recorded = TrainingConfig.from_record(config["config"], where="config.json", fix="").dotted_dict()
    assert {k: recorded[k] for k in ("episode.task", "ppo.n_episodes", "ppo.n_envs", "episode.max_epochs",
                                     "episode.max_train_samples", "episode.max_val_samples", "execution.device")} == {
        "episode.task": "synthetic", "ppo.n_episodes": 2, "ppo.n_envs": 2, "episode.max_epochs": 3,
        "episode.max_train_samples": 256, "episode.max_val_samples": 128, "execution.device": "cpu"}
    assert (mini_run / "events.jsonl").stat().st_size > 0
    assert len(read_jsonl(mini_run / "history.jsonl")) == 1
    episodes = read_jsonl(mini_run / "episodes.jsonl")
    assert len(episodes) == 2 and {e["controller"] for e in episodes} == {"ppo"}


def test_mini_run_steps_log_every_env_epoch_with_its_reward(mini_run: Path) -> None:
    steps = read_jsonl(mini_run / "steps.jsonl")
    assert len(steps) == 2 * 2  # decisions after epochs 1 .. T-1
    assert sorted((s["env"], s["epoch"]) for s in steps) == [(e, k) for e in range(2) for k in (1, 2)]
    for s in steps:
        assert s["batch"] == 0
        assert s["reward"] == s["reward_components"]["total"]
        assert s["reward_components"]["family"] == "contribution"


def test_mini_run_checkpoints_are_plain_ppo_checkpoints(mini_run: Path) -> None:
    for name in ("latest", "best", "final"):
        data = load(mini_run / "checkpoints" / f"{name}.pt")
        assert data["format"] == "esper-ppo-v2", name
        assert data["batches_completed"] == 1 and data["episodes_completed"] == 2, name
        assert data["obs_normalizer"]["update_count"] == 1 == data["batches_completed"], name
        assert data["reward_normalizer"]["count"] == 4, name
        assert data["config"]["ppo"]["n_episodes"] == 2 and data["config"]["episode"]["max_epochs"] == 3, name
        assert len(data["rolling_window"]) == 1
        assert {"python", "numpy", "torch", "action_generator", "minibatch_generator"} <= set(data["rng"])


def test_mini_run_config_records_the_telemetry_level(mini_run: Path) -> None:
    runtime = json.loads((mini_run / "config.json").read_text())["runtime"]
    assert runtime["telemetry_level"] == "minimal"


# ------------------------------------------------------------------------------------------------- partial batch


def test_partial_last_batch_runs_one_env_and_updates(partial_run: Path) -> None:
    history = read_jsonl(partial_run / "history.jsonl")
    assert [h["batch"] for h in history] == [0, 1]
    assert [h["n_envs"] for h in history] == [2, 1]
    assert [h["episodes_completed"] for h in history] == [2, 3]
    assert history[1]["n_minibatch_updates"] > 0 and not history[1].get("skipped_update")
    assert len(history[1]["env_accuracies"]) == 1
    steps = read_jsonl(partial_run / "steps.jsonl")
    assert len([s for s in steps if s["batch"] == 1]) == 2 and len(steps) == 6
    assert len(read_jsonl(partial_run / "episodes.jsonl")) == 3
    final = load(partial_run / "checkpoints" / "final.pt")
    assert final["batches_completed"] == 2 and final["episodes_completed"] == 3
    assert final["obs_normalizer"]["update_count"] == 2


# ------------------------------------------------------------------------------------------------- resume


def assert_same_as_straight(run: Path, straight: Path) -> None:
    a, b = load(straight / "checkpoints" / "final.pt"), load(run / "checkpoints" / "final.pt")
    assert set(a["agent"]["network"]) == set(b["agent"]["network"])
    for name, tensor in a["agent"]["network"].items():
        assert torch.equal(tensor, b["agent"]["network"][name]), name
    assert_same_state(a["obs_normalizer"], b["obs_normalizer"], "obs_normalizer")
    assert_same_state(a["reward_normalizer"], b["reward_normalizer"], "reward_normalizer")
    assert_same_state(a["agent"]["optimizer"], b["agent"]["optimizer"], "optimizer")
    assert (a["batches_completed"], a["episodes_completed"]) == (b["batches_completed"], b["episodes_completed"])
    assert a["rolling_window"] == b["rolling_window"]
    assert a["agent"]["train_steps"] == b["agent"]["train_steps"]
    # The anomaly detector's thresholds follow training progress (episodes done / n_episodes), so a first batch run
    # with n_episodes=2 is judged in another phase than the same batch of a 4-episode run: compare the rest.
    def comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in row.items() if k != "anomalies"} for row in without_time(rows)]

    assert comparable(read_jsonl(run / "history.jsonl")) == comparable(read_jsonl(straight / "history.jsonl"))
    assert read_jsonl(run / "steps.jsonl") == read_jsonl(straight / "steps.jsonl")
    assert without_time(read_jsonl(run / "episodes.jsonl")) == without_time(read_jsonl(straight / "episodes.jsonl"))


def test_resume_is_exact(straight_run: Path, tmp_path: Path) -> None:
    """2 batches straight == 1 batch + --resume --episodes 4 + 1 batch (CPU, bit-identical)."""
    run = tmp_path / "b"
    assert ppo(run, "--set", "n_episodes=2").code == 0
    resumed = run_cli(["train", "ppo", "--resume", str(run), "--episodes", "4", *OUTPUT])
    assert resumed.code == 0, resumed.err
    assert "Config: preset quick;" in resumed.out  # the preset it started from, not the default for no --preset
    assert len(read_jsonl(straight_run / "history.jsonl")) == 2
    assert_same_as_straight(run, straight_run)
    assert load(run / "checkpoints" / "final.pt")["config"]["ppo"]["n_episodes"] == 4
    config = json.loads((run / "config.json").read_text())
    assert config["config"]["ppo"]["n_episodes"] == 4 and config["argv"][:2] == ["train", "ppo"]
    [resume] = config["resumes"]
    assert resume["from_batch"] == 1 and resume["changed"] == {"ppo.n_episodes": [2, 4]}
    assert "--resume" in resume["argv"]


def test_rerunning_an_interrupted_command_resumes_it(straight_run: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl+C in the middle of the second batch, then the identical command again: auto-resume from the first
    batch's checkpoint, same result as straight, and the second batch's events recorded once."""
    run = tmp_path / "c"

    class StopInSecondBatch(ppo_cmd.StopAfterStep):
        @property  # type: ignore[override]
        def requested(self) -> bool:
            events = run / "events.jsonl"
            return events.exists() and any(e["event_type"] == "EPOCH_COMPLETED" and e["data"]["batch"] == 1
                                           for e in read_jsonl(events))

        @requested.setter
        def requested(self, value: bool) -> None:
            pass

    with monkeypatch.context() as m:
        m.setattr(ppo_cmd, "StopAfterStep", StopInSecondBatch)
        interrupted = ppo(run, "--set", "n_episodes=4", "--telemetry-level", "normal")
    assert interrupted.code == 130, interrupted.err
    assert len(read_jsonl(run / "history.jsonl")) == 1 and not (run / "checkpoints" / "final.pt").exists()

    events_before = read_jsonl(run / "events.jsonl")
    assert any(e["data"].get("batch") == 1 for e in events_before if e["event_type"] == "EPOCH_COMPLETED")
    rerun = ppo(run, "--set", "n_episodes=4", "--telemetry-level", "normal")
    assert rerun.code == 0, rerun.err
    assert "Resuming from" in rerun.out
    assert_same_as_straight(run, straight_run)
    assert_events_once(run)


def assert_events_once(run: Path) -> None:
    """After a resume events.jsonl holds the interrupted batch once: every (batch, env, epoch) once, each batch's
    completion and latest checkpoint once."""
    events = read_jsonl(run / "events.jsonl")
    epochs = Counter((e["data"]["batch"], e["env_id"], e["epoch"]) for e in events
                     if e["event_type"] == "EPOCH_COMPLETED")
    assert epochs == Counter([(b, env, k) for b in range(2) for env in range(2) for k in (1, 2, 3)])
    assert [e["data"]["batch"] for e in events if e["event_type"] == "BATCH_COMPLETED"] == [0, 1]
    assert [e["data"]["batch"] for e in events if e["event_type"] == "CHECKPOINT_SAVED"
            and e["data"]["kind"] == "latest"] == [1, 2]
    assert [e["event_type"] for e in events if e["event_type"] == "CHECKPOINT_LOADED"] == ["CHECKPOINT_LOADED"]


def test_resume_refuses_a_changed_field(mini_run: Path) -> None:
    before = (mini_run / "history.jsonl").read_text()
    result = run_cli(["train", "ppo", "--resume", str(mini_run), "--set", "lr=0.001", "--episodes", "4", *OUTPUT])
    assert result.code == 2
    assert "lr" in result.err and "Traceback" not in result.err
    assert (mini_run / "history.jsonl").read_text() == before


def test_resume_refuses_a_checkpoint_saved_under_another_seed_rule(mini_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "old"
    shutil.copytree(mini_run, run)
    latest = run / "checkpoints" / "latest.pt"
    data = torch.load(latest, weights_only=True)
    data["seed_rule"] = "seed+10000*batch+1000*group"
    torch.save(data, latest)
    before = (run / "history.jsonl").read_text()
    result = run_cli(["train", "ppo", "--resume", str(run), "--episodes", "4", *OUTPUT])
    assert result.code == 2 and "another seed rule" in result.err and "Traceback" not in result.err
    assert (run / "history.jsonl").read_text() == before


def test_rerunning_a_finished_run_says_there_is_nothing_to_train(mini_run: Path) -> None:
    before = (mini_run / "history.jsonl").read_text()
    result = ppo(mini_run, "--set", "n_episodes=2")
    assert result.code == 0 and "Nothing to train" in result.out and "--episodes" in result.out
    assert (mini_run / "history.jsonl").read_text() == before


def test_rerun_with_a_changed_field_is_refused_too(mini_run: Path) -> None:
    """Auto-resume (same --run-dir, no --resume) applies the same rule."""
    result = ppo(mini_run, "--set", "n_episodes=2", "--set", "gamma=0.9")
    assert result.code == 2 and "gamma" in result.err


# ------------------------------------------------------------------------------------------------- config errors


def test_config_json_with_unknown_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"n_envs": 2, "learning_rate": 0.01}))
    result = run_cli([*QUICK, "--config-json", str(path), "--run-dir", str(tmp_path / "r")])
    assert result.code == 2 and "learning_rate" in result.err and "Unknown training config keys" in result.err
    assert not (tmp_path / "r").exists()


def test_set_with_unknown_key_is_refused(tmp_path: Path) -> None:
    result = ppo(tmp_path / "r", "--set", "no_such_key=1")
    assert result.code == 2 and "no_such_key" in result.err
    assert not (tmp_path / "r").exists()


def test_set_with_invalid_value_is_refused(tmp_path: Path) -> None:
    result = ppo(tmp_path / "r", "--set", "gamma=1.5")
    assert result.code == 2 and "gamma" in result.err


def test_missing_dataset_names_the_path_and_download(tmp_path: Path) -> None:
    data = tmp_path / "empty"
    data.mkdir()
    run = tmp_path / "r"
    result = run_cli(["train", "ppo", "--preset", "cifar10", "--data-dir", str(data), "--run-dir", str(run),
                      *OUTPUT])
    assert result.code == 2
    assert str(data) in result.err and "--download" in result.err and "Traceback" not in result.err
    assert not run.exists()


# ------------------------------------------------------------------------------------------------- variants


def test_loss_reward_family(tmp_path: Path) -> None:
    run = tmp_path / "loss"
    result = ppo(run, "--set", "n_episodes=2", "--reward-family", "loss")
    assert result.code == 0, result.err
    steps = read_jsonl(run / "steps.jsonl")
    assert len(steps) == 4
    assert {s["reward_components"]["family"] for s in steps} == {"loss"}
    assert all(is_finite_number(s["reward_components"]["loss_primary"]) for s in steps)
    assert any(s["reward_components"]["loss_primary"] != 0 for s in steps)
    assert all(s["reward"] == s["reward_components"]["total"] for s in steps)
    assert json.loads((run / "config.json").read_text())["config"]["reward"]["reward_family"] == "loss"


def test_amp_on_cpu_completes_with_finite_losses(tmp_path: Path) -> None:
    run = tmp_path / "amp"
    result = ppo(run, "--set", "n_episodes=2", "--amp")
    assert result.code == 0, result.err
    assert load(run / "checkpoints" / "final.pt")["config"]["episode"]["amp"] is True
    [row] = read_jsonl(run / "history.jsonl")
    for key in ("policy_loss", "value_loss", "entropy", "approx_kl"):
        assert is_finite_number(row[key]), key
    steps = read_jsonl(run / "steps.jsonl")
    assert len(steps) == 4
    for s in steps:
        assert is_finite_number(s["train_loss"]) and is_finite_number(s["val_loss"]), s
        assert is_finite_number(s["reward"])


# ------------------------------------------------------------------------------------------------- compare


@pytest.fixture
def compare_args() -> Iterator[list[str]]:
    yield ["compare", "--task", "synthetic", "--episodes", "1", "--max-epochs", "3", "--max-train-samples", "256",
           "--max-val-samples", "128", "--param-cost", "1.0", *OUTPUT]


def test_compare_runs_a_ppo_checkpoint(mini_run: Path, tmp_path: Path, compare_args: list[str]) -> None:
    checkpoint = mini_run / "checkpoints" / "final.pt"
    run = tmp_path / "cmp"
    result = run_cli([*compare_args, "--controllers", "static", "heuristic", f"ppo:{checkpoint}",
                      "--run-dir", str(run)])
    assert result.code == 0, result.err
    results = json.loads((run / "results.json").read_text())
    label = "ppo:final"  # labels never carry paths
    assert results["controllers"] == ["static", "heuristic", label]
    assert results["per_controller"][label]["episodes"] == 1
    assert len(results["per_controller"][label]["accuracy_curve_mean"]) == 3
    episodes = read_jsonl(run / "episodes.jsonl")
    assert sorted(e["controller"] for e in episodes) == sorted(["static", "heuristic", label])


def test_compare_rejects_a_ppo_checkpoint_trained_on_other_slots(tmp_path: Path, compare_args: list[str]) -> None:
    trained = tmp_path / "two_slots"
    result = ppo(trained, "--set", "n_episodes=2", "--set", 'slots=["early","mid"]')
    assert result.code == 0, result.err
    assert load(trained / "checkpoints" / "final.pt")["config"]["episode"]["slots"] == ["early", "mid"]
    compared = run_cli([*compare_args, "--controllers", "static", f"ppo:{trained / 'checkpoints' / 'final.pt'}",
                        "--run-dir", str(tmp_path / "cmp")])
    assert compared.code == 2
    assert "slots" in compared.err and "Traceback" not in compared.err
    assert not (tmp_path / "cmp" / "results.json").exists()


# ------------------------------------------------------------------------------------------------- run directories


def test_a_run_killed_before_its_first_batch_is_reused(tmp_path: Path) -> None:
    """Only config.json, events and init.pt: nothing to resume, so the same command starts over in place."""
    run = tmp_path / "r"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"command": "ppo", "argv": [], "config": {"lr": 0.5}}))
    (run / "checkpoints" / "init.pt").write_bytes(b"stale")
    (run / "events.jsonl").write_text('{"event_type": "TRAINING_STARTED"}\n')
    result = ppo(run, "--set", "n_episodes=2")
    assert result.code == 0, result.err
    config = json.loads((run / "config.json").read_text())
    assert "resumes" not in config and config["config"]["ppo"]["lr"] != 0.5
    assert len(read_jsonl(run / "history.jsonl")) == 1
    assert load(run / "checkpoints" / "init.pt")["batches_completed"] == 0


def test_overwrite_replaces_a_finished_run(tmp_path: Path) -> None:
    run = tmp_path / "r"
    assert ppo(run, "--set", "n_episodes=2").code == 0
    assert ppo(run, "--set", "n_episodes=2", "--set", "lr=0.001").code == 2  # a changed field is refused ...
    result = ppo(run, "--set", "n_episodes=2", "--set", "lr=0.001", "--overwrite")  # ... unless replaced
    assert result.code == 0, result.err
    assert "Resuming" not in result.out
    assert load(run / "checkpoints" / "final.pt")["config"]["ppo"]["lr"] == 0.001
    assert len(read_jsonl(run / "history.jsonl")) == 1
    assert "resumes" not in json.loads((run / "config.json").read_text())


def test_a_task_without_a_preset_takes_the_task_s_preset() -> None:
    """`--task synthetic` alone must not inherit the cifar10 preset's hyperparameters."""
    def config(*argv: str) -> TrainingConfig:
        return effective_config(build_parser().parse_args(["train", "ppo", *argv]))

    charged = ("--set", "compute_cost=1.0")  # the reference presets measure λ_c ("auto"): name one instead
    assert config("--task", "synthetic", *charged) == TrainingConfig.preset("synthetic").with_overrides(
        compute_cost=1.0)
    assert config("--task", "fashion_mnist", *charged).ppo == TrainingConfig.preset("fashion_mnist").ppo
    assert config() == TrainingConfig.preset("cifar10")
    assert config("--preset", "quick", "--task", "synthetic") == TrainingConfig.preset("quick")
    assert config("--task", "synthetic_text") == TrainingConfig.preset("cifar10").with_overrides(task="synthetic_text")
