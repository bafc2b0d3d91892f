"""TensorBoard backend: tags and steps read back from the event files."""

from __future__ import annotations

from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from esper.leyline.telemetry import TelemetryEvent, TelemetryEventType
from esper.nissa import TensorBoardBackend
from esper.nissa.tensorboard import hparams_markdown

E = TelemetryEventType

PPO_METRICS = {
    "policy_loss": -0.02,
    "value_loss": 0.5,
    "entropy": 1.1,
    "approx_kl": 0.01,
    "clip_fraction": 0.1,
    "explained_variance": 0.4,
    "ratio_max": 1.8,
    "ratio_min": 0.6,
    "entropy_coef": 0.05,
    "grad_norm": 2.5,
    "n_minibatch_updates": 8,
    "ratio_diagnostic": {"n_exploded": 0},
}


def _load(log_dir: Path) -> EventAccumulator:
    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return acc


def test_writes_expected_tags_and_steps(tmp_path: Path) -> None:
    backend = TensorBoardBackend(tmp_path / "tb", hparams={"ppo": {"lr": 3e-4, "clip": 0.2}, "n_envs": 4})
    backend.emit(
        TelemetryEvent(
            E.BATCH_COMPLETED,
            data={
                "batch": 1,
                "episodes_completed": 4,
                "avg_accuracy": 60.0,
                "rolling_accuracy": 58.0,
                "avg_reward": 0.3,
                "action_shares": {"WAIT": 0.7, "GERMINATE": 0.2, "CULL": 0.05, "FOSSILIZE": 0.05},
                "reward_components": {"accuracy_delta": 0.4, "compute_rent": -0.1},
                "seeds_created": 3,
                "seeds_fossilized": 1,
                "seeds_culled": 1,
                "env_accuracies": [59.0, 61.0],
            },
        )
    )
    backend.emit(TelemetryEvent(E.PPO_UPDATE_COMPLETED, data={**PPO_METRICS, "episodes_completed": 4, "batch": 1}))
    backend.emit(
        TelemetryEvent(
            E.EPISODE_COMPLETED,
            env_id=0,
            data={"controller": "heuristic", "episode": 7, "final_accuracy": 71.5, "best_accuracy": 72.0},
        )
    )
    backend.close()

    acc = _load(tmp_path / "tb")
    tags = set(acc.Tags()["scalars"])
    expected = {
        "charts/avg_accuracy",
        "charts/rolling_accuracy",
        "charts/avg_reward",
        "losses/policy",
        "losses/value",
        "losses/entropy",
        "ppo/approx_kl",
        "ppo/clip_fraction",
        "ppo/explained_variance",
        "ppo/ratio_max",
        "ppo/ratio_min",
        "ppo/entropy_coef",
        "ppo/grad_norm",
        "actions/share_wait",
        "actions/share_germinate",
        "actions/share_cull",
        "actions/share_fossilize",
        "rewards/accuracy_delta",
        "rewards/compute_rent",
        "seeds/created",
        "seeds/fossilized",
        "seeds/culled",
        "episode/final_accuracy",
        "episode/best_accuracy",
    }
    assert expected <= tags
    (point,) = acc.Scalars("charts/avg_accuracy")
    assert (point.step, point.value) == (4, pytest.approx(60.0))
    assert acc.Scalars("losses/policy")[0].step == 4
    (episode,) = acc.Scalars("episode/final_accuracy")
    assert (episode.step, episode.value) == (7, pytest.approx(71.5))
    assert "hparams/text_summary" in acc.Tags()["tensors"]


def test_non_finite_values_are_skipped_and_step_key_required(tmp_path: Path) -> None:
    backend = TensorBoardBackend(tmp_path)
    backend.emit(
        TelemetryEvent(
            E.PPO_UPDATE_COMPLETED, data={"episodes_completed": 2, "policy_loss": float("nan"), "entropy": 1}
        )
    )
    with pytest.raises(KeyError, match="episodes_completed"):
        backend.emit(TelemetryEvent(E.BATCH_COMPLETED, data={"avg_accuracy": 50.0}))
    backend.close()
    tags = set(_load(tmp_path).Tags()["scalars"])
    assert "losses/entropy" in tags
    assert "losses/policy" not in tags


def test_hparams_markdown_flattens_and_escapes() -> None:
    table = hparams_markdown({"ppo": {"lr": 0.001}, "name": "a|b"})
    assert table.splitlines() == ["| parameter | value |", "|---|---|", "| name | a\\|b |", "| ppo.lr | 0.001 |"]


def _epoch_event(env: int, controller: str, *, batch: int, episode: int, epoch: int, acc: float) -> TelemetryEvent:
    return TelemetryEvent(E.EPOCH_COMPLETED, env_id=env, epoch=epoch, data={
        "batch": batch, "episode": episode, "epoch": epoch, "max_epochs": 4, "val_accuracy": acc, "val_loss": 1.5,
        "train_accuracy": acc + 1, "train_loss": 1.4, "seed_params": 1000 * epoch, "reward": 0.1 * epoch,
        "controller": controller})


def test_per_epoch_curves_per_controller_use_labels_never_paths(tmp_path: Path) -> None:
    backend = TensorBoardBackend(tmp_path)
    backend.emit(TelemetryEvent(E.TRAINING_STARTED, data={"command": "compare", "n_envs": 2}))
    for episode in range(2):
        for epoch in range(1, 5):
            backend.emit(_epoch_event(0, "static", batch=episode, episode=episode, epoch=epoch, acc=50.0 + epoch))
            backend.emit(_epoch_event(1, "ppo (init)", batch=episode, episode=episode, epoch=epoch, acc=40.0))
    backend.emit(TelemetryEvent(E.EPISODE_COMPLETED, env_id=1, data={"controller": "ppo:runs/x/final.pt",
                                                                      "episode": 0, "final_accuracy": 41.0}))
    backend.close()
    acc = _load(tmp_path)
    tags = set(acc.Tags()["scalars"])
    for metric in ("val_accuracy", "val_loss", "train_accuracy", "train_loss", "seed_params", "episode_reward"):
        assert {f"epoch/{metric}/static", f"epoch/{metric}/ppo_init"} <= tags, metric
    assert "episode/ppo:runs_x_final.pt/final_accuracy" in tags  # separators of a path never reach a tag
    assert not any("/runs/" in t or " " in t or "(" in t for t in tags)
    points = acc.Scalars("epoch/val_accuracy/static")
    assert [p.step for p in points] == [1, 2, 3, 4, 5, 6, 7, 8]  # episode·T + epoch: episodes follow each other
    assert points[5].value == pytest.approx(52.0)


def test_per_epoch_curves_of_a_ppo_run_are_per_env_and_batch(tmp_path: Path) -> None:
    backend = TensorBoardBackend(tmp_path)
    backend.emit(TelemetryEvent(E.TRAINING_STARTED, data={"command": "train ppo", "n_envs": 2}))
    for batch in range(2):
        for env in range(2):
            backend.emit(_epoch_event(env, "ppo", batch=batch, episode=2 * batch + env, epoch=1, acc=30.0 + env))
    backend.close()
    acc = _load(tmp_path)
    assert {"epoch/val_accuracy/env0", "epoch/val_accuracy/env1"} <= set(acc.Tags()["scalars"])
    assert [p.step for p in acc.Scalars("epoch/seed_params/env1")] == [1, 5]  # batch·T + epoch


def test_events_without_their_indices_are_skipped(tmp_path: Path) -> None:
    backend = TensorBoardBackend(tmp_path)
    backend.emit(TelemetryEvent(E.EPOCH_COMPLETED, env_id=0, data={"val_accuracy": 50.0}))
    backend.close()
    assert not any(t.startswith("epoch/") for t in _load(tmp_path).Tags()["scalars"])
