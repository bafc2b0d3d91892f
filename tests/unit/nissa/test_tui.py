"""TUI: renders from normal-level events for 1 and 12 envs, PPO and heuristic runs."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from esper.leyline.telemetry import TelemetryEvent, TelemetryEventType
from esper.nissa import ProgressBackend, TuiBackend
from esper.nissa.tui import sparkline

E = TelemetryEventType
MAX_EPOCHS = 25


def _slots(epoch: int) -> dict[str, Any]:
    """early: empty; mid: conv_light walks TRAINING → BLENDING → PROBATIONARY; late: a fossilized seed."""
    stage = "TRAINING" if epoch < 5 else "BLENDING" if epoch < 10 else "PROBATIONARY"
    alpha = 0.0 if epoch < 5 else min(1.0, (epoch - 4) / 5)
    return {
        "early": None,
        "mid": {"stage": stage, "blueprint": "conv_light", "alpha": alpha, "contribution": 0.8 if alpha else None},
        "late": {"stage": "FOSSILIZED", "blueprint": "norm", "alpha": 1.0, "contribution": 2.1},
    }


def _epoch(env: int, episode: int, epoch: int, acc: float, op: str = "WAIT", slot: str | None = None) -> TelemetryEvent:
    data = {
        "batch": 1,
        "episode": episode,
        "epoch": epoch,
        "max_epochs": MAX_EPOCHS,
        "train_loss": 1.2,
        "val_loss": 1.3,
        "train_accuracy": acc + 2,
        "val_accuracy": acc,
        "slots": _slots(epoch),
        "op": op,
        "slot": slot,
        "reward": 0.1,
        "device": f"cuda:{env % 2}",
    }
    return TelemetryEvent(E.EPOCH_COMPLETED, env_id=env, epoch=epoch, data=data)


def _started(n_envs: int, command: str = "ppo") -> TelemetryEvent:
    data = {
        "command": command,
        "task": "cifar10",
        "topology": "cnn",
        "preset": "cifar10",
        "reward": "gap, λ_p 3.918",
        "n_envs": n_envs,
        "env_devices": {i: f"cuda:{i % 2}" for i in range(n_envs)},
        "total_batches": 10,
        "n_episodes": 10 * n_envs,
        "obs_dim": 50,
    }
    return TelemetryEvent(E.TRAINING_STARTED, data=data)


def _ppo_run(tui: TuiBackend, n_envs: int) -> None:
    tui.emit(_started(n_envs))
    for env in range(n_envs):
        tui.emit(TelemetryEvent(E.SEED_GERMINATED, env_id=env, slot_id="mid", data={"blueprint_id": "conv_light"}))
    for epoch in range(1, MAX_EPOCHS + 1):
        for env in range(n_envs):
            tui.emit(_epoch(env, env, epoch, 30 + epoch * 1.5, "GERMINATE" if epoch == 1 else "WAIT", "mid"))
    tui.emit(TelemetryEvent(E.GOVERNOR_ROLLBACK, env_id=0, severity="critical", data={"restored_epoch": 20}))
    for env in range(n_envs):
        tui.emit(TelemetryEvent(E.EPISODE_COMPLETED, env_id=env, data={"controller": "ppo", "final_accuracy": 67.5}))
    tui.emit(
        TelemetryEvent(
            E.BATCH_COMPLETED,
            data={
                "batch": 1,
                "episodes_completed": n_envs,
                "avg_accuracy": 67.5,
                "rolling_accuracy": 66.0,
                "avg_reward": 0.4,
                "action_shares": {"WAIT": 0.8, "GERMINATE": 0.2},
                "reward_components": {"accuracy_delta": 0.3, "compute_rent": -0.05},
                "gpu_memory": {"cuda:0": [3.2, 80.0]},
            },
        )
    )
    ppo = {"policy_loss": -0.01, "value_loss": 0.2, "entropy": 0.2, "approx_kl": 0.01, "clip_fraction": 0.27}
    tui.emit(TelemetryEvent(E.PPO_UPDATE_COMPLETED, data={**ppo, "grad_norm": 6.0, "episodes_completed": n_envs}))


def _text(tui: TuiBackend, width: int = 220) -> str:
    console = Console(record=True, width=width, file=io.StringIO())
    console.print(tui.render())
    return console.export_text()


def test_single_env_ppo_run_renders_all_panels() -> None:
    tui = TuiBackend()
    _ppo_run(tui, 1)
    text = _text(tui)
    for expected in (
        "esper ppo",
        "task cifar10 (cnn)",
        "action mix · reward gap, λ_p 3.918",
        "batches 2/10",
        "episodes 1/10",
        "rolling 66.0% (best 66.0%)",
        "Prob:conv_light α1.00 c+0.8",
        "Foss:norm α1.00 c+2.1",
        "25/25",
        "trend",
        "rolled back",
        "PPO health",
        "CRIT",  # entropy 0.2 < 0.3
        "WARN",  # clip 0.27 > 0.25, grad norm 6 > 5
        "accuracy_delta",
        "governor rollback to epoch 20",
        "cuda:0 3.2/80.0 GiB",
        "Ctrl+C stops after the current step",
    ):
        assert expected in text, expected
    assert "█" in text and "▁" in text  # sparkline of a rising curve


def test_twelve_envs_render_in_compact_mode() -> None:
    tui = TuiBackend()
    _ppo_run(tui, 12)
    text = _text(tui)
    assert "trend" not in text
    assert all(f"\n {i} " in text or f"\n{i} " in text for i in range(12))
    assert "cuda:0×6" in text and "cuda:1×6" in text
    assert "episodes 12/120" in text


def test_heuristic_run_without_ppo_or_batches_shows_dashes() -> None:
    tui = TuiBackend()
    tui.emit(_started(2, command="heuristic"))
    for epoch in range(1, 4):
        for env in range(2):
            tui.emit(_epoch(env, 0, epoch, 40.0 + epoch, op="WAIT"))
    tui.emit(TelemetryEvent(E.EPISODE_COMPLETED, env_id=0, data={"final_accuracy": 50.0}))
    text = _text(tui)
    assert "PPO health (— no updates)" in text
    assert "entropy           —" in text
    assert "100.0%" in text  # action mix derived from the epochs' ops
    assert "rolling 50.0%" in text
    assert "batches —/10" in text


def test_empty_backend_renders() -> None:
    text = _text(TuiBackend(), width=120)
    assert "early" in text and "finished episodes" in text  # no learner announced: no PPO health panel


def _status_of(tui: TuiBackend, env: int = 0) -> str:
    return tui.state.envs[(None, env)].status().plain  # a PPO run: one row per env slot


def test_status_badges() -> None:
    tui = TuiBackend()
    tui.emit(_started(1))
    assert _status_of(tui) == "initializing"
    tui.emit(_epoch(0, 0, 1, 50.0))
    assert _status_of(tui) == "healthy"
    tui.emit(_epoch(0, 0, 2, 48.5))
    assert _status_of(tui) == "degraded"
    for epoch in range(3, 14):
        tui.emit(_epoch(0, 0, epoch, 49.0))
    assert _status_of(tui) == "stalled"
    tui.emit(TelemetryEvent(E.GOVERNOR_ROLLBACK, env_id=0, data={"restored_epoch": 10}))
    tui.emit(_epoch(0, 0, 14, 49.0))
    assert _status_of(tui) == "rolled back"
    tui.emit(_epoch(0, 0, 15, 49.0))
    assert _status_of(tui) == "stalled"
    tui.emit(_epoch(0, 1, 1, 20.0))  # a new episode resets the per-episode state
    assert _status_of(tui) == "healthy"
    assert list(tui.state.envs[(None, 0)].curve) == [20.0]


def test_culled_seed_flashes_for_one_epoch() -> None:
    tui = TuiBackend()
    tui.emit(_started(1))
    tui.emit(_epoch(0, 0, 6, 50.0))
    tui.emit(TelemetryEvent(E.SEED_CULLED, env_id=0, slot_id="mid", data={"blueprint_id": "conv_light"}))
    empty_mid = _epoch(0, 0, 7, 50.0)
    empty_mid.data["slots"]["mid"] = None
    tui.emit(empty_mid)
    assert "Cull:conv_light" in _text(tui)
    later = _epoch(0, 0, 8, 50.0)
    later.data["slots"]["mid"] = None
    tui.emit(later)
    assert "Cull:conv_light" not in _text(tui)


def test_seed_events_update_cells_between_epochs() -> None:
    tui = TuiBackend()
    tui.emit(TelemetryEvent(E.SEED_GERMINATED, env_id=0, slot_id="early", data={"blueprint_id": "attention"}))
    assert "Germ:attention α0.00" in _text(tui)
    tui.emit(TelemetryEvent(E.SEED_STAGE_CHANGED, env_id=0, slot_id="early", data={"from": 2, "to": 3}))
    assert "Train:attention" in _text(tui)


def test_two_backends_share_no_state() -> None:
    first, second = TuiBackend(), TuiBackend()
    _ppo_run(first, 1)
    assert "conv_light" not in _text(second)


@pytest.mark.parametrize(
    ("values", "expected"),
    [([], ""), ([5.0, 5.0], "▄▄"), ([0.0, 50.0, 100.0], "▁▅█")],
)
def test_sparkline(values: list[float], expected: str) -> None:
    assert sparkline(values) == expected


def test_live_start_and_close() -> None:
    """The live display draws the dashboard while it runs, leaves it on screen when closed, and a second close is
    harmless."""
    out = io.StringIO()
    tui = TuiBackend(Console(file=out, width=160, force_terminal=True))
    tui.start()
    _ppo_run(tui, 2)
    tui.close()
    drawn = out.getvalue()
    assert "environments" in drawn and "PPO health" in drawn and "esper ppo" in drawn
    tui.close()
    assert out.getvalue() == drawn


def test_eighty_columns_show_every_slot_and_the_progress_eta() -> None:
    """At 80 columns the slot columns used to collapse to "…": now each slot shows its stage and blueprint."""
    progress = ProgressBackend("none")
    progress.start("training", 400, round_size=4)
    tui = TuiBackend(progress=progress)
    _ppo_run(tui, 4)
    for _ in range(4):
        progress.emit(_epoch(0, 0, 1, 50.0))
    text = _text(tui, width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text.split("PPO health")[0]  # header and env table are never truncated
    for expected in ("Prob +0.8", "conv_light", "Foss +2.1", "norm", "rollbk", "4/400 env-epochs 1%", "ETA"):
        assert expected in text, expected
    assert "device" not in text.split("PPO health")[0].split("environments")[1]  # the header lists the devices
    wide = _text(tui, width=160)
    assert "Prob:conv_light α1.00 c+0.8" in wide and "trend" in wide


def test_an_80_by_30_terminal_shows_the_whole_screen_with_four_envs() -> None:
    progress = ProgressBackend("none")
    progress.start("training", 400, round_size=4)
    tui = TuiBackend(progress=progress)
    _ppo_run(tui, 4)
    console = Console(record=True, width=80, height=30, file=io.StringIO(), force_terminal=True, color_system=None)
    console.print(tui.render())
    lines = console.export_text().splitlines()
    assert len(lines) <= 30 and lines[-1].startswith("Ctrl+C stops")
    assert any("grad norm" in line and "WARN" in line for line in lines)


def test_a_comparison_shows_controllers_and_episodes_side_by_side_not_ppo_health() -> None:
    """compare (no rollout batches): each row names its controller and episode, paired episodes that run side by
    side on workers (same env ids) get rows of their own, finished episodes give way to new ones, and the PPO
    health panel gives way to the controllers' finished episodes."""
    tui = TuiBackend()
    started = _started(2, command="compare")
    del started.data["total_batches"]
    tui.emit(started)
    controllers = ("static", "heuristic")

    def epoch(env: int, episode: int, n: int, acc: float) -> TelemetryEvent:
        event = _epoch(env, episode, n, acc)
        event.data["controller"] = controllers[env]
        return event

    for n in range(1, MAX_EPOCHS + 1):
        for episode in (0, 1):
            for env in (0, 1):
                tui.emit(epoch(env, episode, n, 40.0 + episode + env))
    for episode in (0, 1):
        for env in (0, 1):
            tui.emit(TelemetryEvent(E.EPISODE_COMPLETED, env_id=env, data={
                "controller": controllers[env], "episode": episode, "final_accuracy": 40.0 + episode + env}))
    text = _text(tui, width=80)
    assert "PPO health" not in text and "finished episodes" in text
    rows = [line for line in text.splitlines() if line.startswith(("static ", "heuristic "))]
    assert len(rows) == 4 and all(line.rstrip().endswith("stall") for line in rows)  # 2 controllers × 2 episodes
    assert sorted(tui.state.envs) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    tui.emit(epoch(0, 2, 1, 30.0))  # the next round starts: env 0's finished rows make way
    assert sorted(tui.state.envs) == [(0, 1), (1, 1), (2, 0)]
