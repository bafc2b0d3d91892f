"""Console backend: line format, severity threshold, summaries of the documented payloads."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from rich.console import Console

from esper.leyline.stages import SeedStage
from esper.leyline.telemetry import TelemetryEvent, TelemetryEventType, TelemetryLevel
from esper.nissa import ConsoleBackend, summarize
from esper.nissa.console import DETAIL_TYPES

E = TelemetryEventType
LINE = re.compile(r"^\[\d\d:\d\d:\d\d\] (env\d+ )?(?P<summary>.+)$")

# Payloads as the producer contracts of esper.nissa.tensorboard / tui document them.
PAYLOADS: dict[TelemetryEventType, dict[str, Any]] = {
    E.TRAINING_STARTED: {"command": "ppo", "task": "cifar10", "topology": "cnn", "n_envs": 4},
    E.EPOCH_COMPLETED: {"epoch": 3, "max_epochs": 25, "val_accuracy": 61.2, "val_loss": 1.1, "op": 1, "slot": "mid"},
    E.EPISODE_COMPLETED: {"final_accuracy": 72.34, "best_accuracy": 73.0, "seeds_created": 2, "seeds_fossilized": 1},
    E.BATCH_COMPLETED: {"batch": 3, "avg_accuracy": 61.2, "rolling_accuracy": 60.8, "avg_reward": 0.42, "fps": 120},
    E.SEED_GERMINATED: {"blueprint_id": "conv_light", "blend_id": "linear", "params": 1000},
    E.SEED_STAGE_CHANGED: {"from": "TRAINING", "to": "BLENDING"},
    E.SEED_GATE_EVALUATED: {"gate": "G2", "passed": True, "target_stage": SeedStage.BLENDING},
    E.SEED_FOSSILIZED: {"blueprint_id": "conv_light", "improvement": 1.5, "params_added": 4321},
    E.SEED_CULLED: {"reason": "negative contribution", "blueprint_id": "attention"},
    E.HOST_STABILIZED: {"epoch": 5, "stable_count": 3, "val_loss": 1.0},
    E.COUNTERFACTUAL_COMPUTED: {"slot": "mid", "real_accuracy": 70.0, "ablated_accuracy": 68.8, "contribution": 1.2},
    E.ACTION_TAKEN: {"op": "GERMINATE", "slot": "mid", "blueprint": "conv_light", "blend": "linear", "success": True},
    E.PPO_UPDATE_COMPLETED: {
        "policy_loss": -0.01,
        "value_loss": 0.3,
        "entropy": 1.2,
        "approx_kl": 0.004,
        "clip_fraction": 0.08,
    },
    E.RATIO_EXPLOSION_DETECTED: {"detail": "ratio_max 7.1 > 5.0", "batch": 3, "episodes_completed": 12},
    E.TELEMETRY_ESCALATED: {"epochs": 5, "reason": "ratio_explosion"},
    E.GOVERNOR_PANIC: {"loss": 12.5, "consecutive_panics": 1, "reason": "spike"},
    E.GOVERNOR_ROLLBACK: {"reason": "nan loss", "loss_at_panic": float("nan"), "restored_epoch": 10},
    E.CHECKPOINT_SAVED: {"path": "runs/x/checkpoints/latest.pt", "kind": "latest", "batch": 3},
    E.COMPARISON_EPISODE_COMPLETED: {"controller": "heuristic", "episode": 2, "final_accuracy": 70.1},
}


def _backend(level: TelemetryLevel = TelemetryLevel.NORMAL) -> tuple[ConsoleBackend, io.StringIO]:
    out = io.StringIO()
    return ConsoleBackend(Console(file=out, width=200, color_system=None), level=level), out


def test_line_format_with_env_prefix() -> None:
    backend, out = _backend()
    backend.emit(TelemetryEvent(E.EPISODE_COMPLETED, env_id=3, data={"final_accuracy": 61.25}))
    line = out.getvalue().rstrip("\n")
    assert re.fullmatch(r"\[\d\d:\d\d:\d\d\] env3 episode done: final 61.2%", line)


def test_run_level_events_have_no_env_prefix() -> None:
    backend, out = _backend()
    backend.emit(TelemetryEvent(E.RUN_COMPLETED, message="run finished"))
    match = LINE.match(out.getvalue().rstrip("\n"))
    assert match is not None and match.group(1) is None
    assert match.group("summary") == "run finished"


@pytest.mark.parametrize(
    ("etype", "data", "slot", "expected"),
    [
        (
            E.SEED_STAGE_CHANGED,
            {"from": SeedStage.TRAINING, "to": SeedStage.BLENDING},
            "mid",
            "mid TRAINING → BLENDING",
        ),
        (E.SEED_STAGE_CHANGED, {"from": 4, "to": "probationary"}, "late", "late BLENDING → PROBATIONARY"),
        (E.EPISODE_COMPLETED, {"final_accuracy": 72.34}, None, "episode done: final 72.3%"),
        (E.GOVERNOR_ROLLBACK, {"restored_epoch": 10, "reason": "nan"}, None, "governor rollback to epoch 10: nan"),
        (E.ACTION_TAKEN, {"op": 0}, None, "WAIT"),
        (E.BATCH_COMPLETED, {"batch": 2, "avg_accuracy": 70.0, "rolling_accuracy": 69.5, "fps": 1.337}, None,
         "batch 2: avg 70.0% rolling 69.5% (1.34 env-epochs/s)"),
        (E.BATCH_COMPLETED, {"batch": 2, "avg_accuracy": 70.0, "rolling_accuracy": 69.5, "fps": 1234.5}, None,
         "batch 2: avg 70.0% rolling 69.5% (1,234 env-epochs/s)"),
    ],
)
def test_summaries(etype: TelemetryEventType, data: dict[str, Any], slot: str | None, expected: str) -> None:
    assert summarize(TelemetryEvent(etype, slot_id=slot, data=data)) == expected


@pytest.mark.parametrize("etype", list(PAYLOADS))
def test_documented_payloads_get_a_real_summary(etype: TelemetryEventType) -> None:
    event = TelemetryEvent(etype, data=PAYLOADS[etype], message="FALLBACK")
    text = summarize(event)
    assert text and text != "FALLBACK"


def test_missing_keys_fall_back_to_message_then_type() -> None:
    assert summarize(TelemetryEvent(E.BATCH_COMPLETED, data={}, message="batch 1 done")) == "batch 1 done"
    assert summarize(TelemetryEvent(E.GOVERNOR_SNAPSHOT)) == "governor_snapshot"


def test_debug_severity_only_at_debug_level() -> None:
    quiet, quiet_out = _backend(TelemetryLevel.NORMAL)
    loud, loud_out = _backend(TelemetryLevel.DEBUG)
    event = TelemetryEvent(E.GRADIENT_STATS, message="grads", severity="debug")
    quiet.emit(event)
    loud.emit(event)
    assert quiet_out.getvalue() == ""
    assert loud_out.getvalue().rstrip("\n").endswith("grads")


def test_markup_in_messages_is_printed_verbatim() -> None:
    backend, out = _backend()
    backend.emit(TelemetryEvent(E.RUN_COMPLETED, message="[bold]not markup[/bold]", severity="warning"))
    assert "[bold]not markup[/bold]" in out.getvalue()


@pytest.mark.parametrize("etype", sorted(DETAIL_TYPES, key=lambda t: t.name))
def test_per_epoch_and_per_seed_detail_is_printed_only_at_debug(etype: TelemetryEventType) -> None:
    """At level normal the console prints about one line per episode, not several per env-epoch."""
    normal, normal_out = _backend(TelemetryLevel.NORMAL)
    debug, debug_out = _backend(TelemetryLevel.DEBUG)
    event = TelemetryEvent(etype, env_id=0, data=PAYLOADS.get(etype, {}), message="detail")
    normal.emit(event)
    debug.emit(event)
    assert normal_out.getvalue() == "" and debug_out.getvalue() != ""


def test_warnings_about_detail_types_are_still_printed_at_normal() -> None:
    backend, out = _backend(TelemetryLevel.NORMAL)
    backend.emit(TelemetryEvent(E.DEGRADATION_DETECTED, message="rolling accuracy -3 pp", severity="warning"))
    assert "rolling accuracy -3 pp" in out.getvalue()


@pytest.mark.parametrize("level", [TelemetryLevel.NORMAL, TelemetryLevel.DEBUG])
def test_repeated_notices_print_once_per_kind_then_a_count(level: TelemetryLevel) -> None:
    """A run that keeps raising value collapse and escalations shows one line of each at the default level and
    their counts at the end; at DEBUG every one."""
    backend, out = _backend(level)
    for _ in range(5):
        backend.emit(TelemetryEvent(E.VALUE_COLLAPSE_DETECTED, message="value collapse",
                                    data={"detail": "explained_variance=-9.194 < 0.1"}, severity="warning"))
        backend.emit(TelemetryEvent(E.TELEMETRY_ESCALATED, data={"epochs": 5}, severity="warning"))
    backend.close()
    lines = out.getvalue().splitlines()
    collapse = [line for line in lines if "value collapse" in line and "notices during" not in line]
    escalated = [line for line in lines if "escalated" in line and "notices during" not in line]
    if level == TelemetryLevel.DEBUG:
        assert len(collapse) == len(escalated) == 5 and not any("notices during" in line for line in lines)
    else:
        assert len(collapse) == len(escalated) == 1 and "counted" in collapse[0]
        assert lines[-1].startswith("notices during the run: value collapse ×5, telemetry escalated ×5")
