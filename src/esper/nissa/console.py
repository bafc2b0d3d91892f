"""Console backend: one human-readable line per event, `[HH:MM:SS] env{i} <summary>`.

`summarize(event)` is shared with the TUI event log. Summaries read only the `data` keys documented in
`leyline.telemetry`; an event whose payload lacks them (or any type without a summary) falls back to its `message`,
then to its type name, so a producer change can degrade a line but never break the console.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console
from rich.text import Text

from esper.leyline.actions import LifecycleOp
from esper.leyline.stages import SeedStage
from esper.leyline.telemetry import SEVERITIES, TelemetryEvent, TelemetryEventType, TelemetryLevel

__all__ = ["DETAIL_TYPES", "NOTICE_TYPES", "SEVERITY_STYLES", "ConsoleBackend", "event_clock", "op_name",
           "stage_name", "summarize"]

_E = TelemetryEventType

SEVERITY_STYLES: dict[str, str] = {
    "debug": "dim",
    "info": "",
    "warning": "yellow",
    "error": "red",
    "critical": "bold red",
}


def stage_name(value: Any) -> str:
    """A stage given as SeedStage, int value or name → its name."""
    if isinstance(value, str):
        return value.upper()
    return SeedStage(int(value)).name


def op_name(value: Any) -> str:
    """An op given as LifecycleOp, int value or name → its name."""
    if isinstance(value, str):
        return value.upper()
    return LifecycleOp(int(value)).name


def _where(event: TelemetryEvent) -> str:
    slot = event.slot_id if event.slot_id is not None else event.data.get("slot")
    return f" in {slot}" if slot is not None else ""


def _training_started(e: TelemetryEvent) -> str:
    d = e.data
    reward = f", reward {d['reward']}" if d.get("reward") else ""
    augmentation = f", augmentation {d['augmentation']}" if d.get("augmentation") else ""
    return (f"{d['command']} started: task {d['task']} ({d.get('topology', '?')}), {d.get('n_envs', 1)} env(s)"
            f"{augmentation}{reward}")


def _epoch(e: TelemetryEvent) -> str:
    d = e.data
    epoch = e.epoch if e.epoch is not None else d["epoch"]
    text = f"epoch {epoch}/{d.get('max_epochs', '?')} val {d['val_accuracy']:.1f}% loss {d['val_loss']:.3f}"
    if d.get("op") is not None:
        slot = d.get("slot")
        text += f" · {op_name(d['op'])}" + (f" {slot}" if slot else "")
    return text


def _episode(e: TelemetryEvent) -> str:
    d = e.data
    who = f"{d['controller']} " if d.get("controller") else ""
    text = f"{who}episode done: final {d['final_accuracy']:.1f}%"
    if d.get("best_accuracy") is not None:
        text += f" (best {d['best_accuracy']:.1f}%)"
    if "seeds_fossilized" in d:
        text += f", seeds +{d.get('seeds_created', 0)} foss {d['seeds_fossilized']} cull {d.get('seeds_culled', 0)}"
    return text


def _batch(e: TelemetryEvent) -> str:
    d = e.data
    text = f"batch {d['batch']}: avg {d['avg_accuracy']:.1f}% rolling {d['rolling_accuracy']:.1f}%"
    if d.get("avg_reward") is not None:
        text += f" reward {d['avg_reward']:+.3f}"
    if d.get("fps") is not None:
        rate = d["fps"]  # env-epochs per second
        text += f" ({rate:.3g} env-epochs/s)" if rate < 100 else f" ({rate:,.0f} env-epochs/s)"
    return text


def _germinated(e: TelemetryEvent) -> str:
    return f"germinated {e.data['blueprint_id']}{_where(e)}"


def _stage_changed(e: TelemetryEvent) -> str:
    slot = e.slot_id or e.data.get("slot") or "seed"
    return f"{slot} {stage_name(e.data['from'])} → {stage_name(e.data['to'])}"


def _gate(e: TelemetryEvent) -> str:
    d = e.data
    verdict = "passed" if d["passed"] else "failed"
    return f"gate {d['gate']} {verdict}{_where(e)} → {stage_name(d['target_stage'])}"


def _fossilized(e: TelemetryEvent) -> str:
    d = e.data
    params = d.get("params_added", 0)
    return f"fossilized {d['blueprint_id']}{_where(e)} ({d['improvement']:+.2f} pp, {params:,} params)"


def _culled(e: TelemetryEvent) -> str:
    d = e.data
    return f"culled {d.get('blueprint_id', 'seed')}{_where(e)}{_reason(e)}"


def _counterfactual(e: TelemetryEvent) -> str:
    return f"{e.data['slot']} contribution {e.data['contribution']:+.2f} pp"


def _action(e: TelemetryEvent) -> str:
    d = e.data
    parts = [op_name(d["op"]), *(str(d[k]) for k in ("slot", "blueprint", "blend") if d.get(k) is not None)]
    return " ".join(parts) + ("" if d.get("success", True) else " (failed)")


def _ppo(e: TelemetryEvent) -> str:
    d = e.data
    return (
        f"PPO update: policy {d['policy_loss']:+.4f} value {d['value_loss']:.4f} entropy {d['entropy']:.3f} "
        f"kl {d['approx_kl']:.4f} clip {d['clip_fraction']:.3f}"
    )


def _anomaly(e: TelemetryEvent) -> str:
    label = e.event_type.name.removesuffix("_DETECTED").replace("_", " ").lower()
    return f"{label}: {e.data.get('detail') or e.message}"


def _escalated(e: TelemetryEvent) -> str:
    return f"telemetry escalated to DEBUG for {e.data['epochs']} epochs{_reason(e)}"


def _reason(e: TelemetryEvent) -> str:
    reason = e.data.get("reason")
    return f": {reason}" if reason else ""


def _panic(e: TelemetryEvent) -> str:
    return f"governor panic: loss {e.data['loss']:.4g}{_reason(e)}"


def _rollback(e: TelemetryEvent) -> str:
    return f"governor rollback to epoch {e.data['restored_epoch']}{_reason(e)}"


def _checkpoint(e: TelemetryEvent) -> str:
    verb = "saved" if e.event_type == _E.CHECKPOINT_SAVED else "loaded"
    line = f"checkpoint {verb} ({e.data.get('kind', '?')}): {e.data['path']}"
    agreement = e.data.get("agreement")
    return line if agreement is None else f"{line}, greedy agreement {100 * float(agreement):.1f} %"


def _comparison(e: TelemetryEvent) -> str:
    d = e.data
    return f"{d['controller']} episode {d['episode']}: final {d['final_accuracy']:.1f}%"


def _stabilized(e: TelemetryEvent) -> str:
    epoch = e.data.get("epoch", e.epoch)
    return f"host stabilized at epoch {epoch}"


_SUMMARIES: Mapping[TelemetryEventType, Callable[[TelemetryEvent], str]] = {
    _E.TRAINING_STARTED: _training_started,
    _E.EPOCH_COMPLETED: _epoch,
    _E.EPISODE_COMPLETED: _episode,
    _E.BATCH_COMPLETED: _batch,
    _E.SEED_GERMINATED: _germinated,
    _E.SEED_STAGE_CHANGED: _stage_changed,
    _E.SEED_GATE_EVALUATED: _gate,
    _E.SEED_FOSSILIZED: _fossilized,
    _E.SEED_CULLED: _culled,
    _E.HOST_STABILIZED: _stabilized,
    _E.COUNTERFACTUAL_COMPUTED: _counterfactual,
    _E.ACTION_TAKEN: _action,
    _E.PPO_UPDATE_COMPLETED: _ppo,
    _E.RATIO_EXPLOSION_DETECTED: _anomaly,
    _E.RATIO_COLLAPSE_DETECTED: _anomaly,
    _E.VALUE_COLLAPSE_DETECTED: _anomaly,
    _E.NUMERICAL_INSTABILITY_DETECTED: _anomaly,
    _E.TELEMETRY_ESCALATED: _escalated,
    _E.GOVERNOR_PANIC: _panic,
    _E.GOVERNOR_ROLLBACK: _rollback,
    _E.CHECKPOINT_SAVED: _checkpoint,
    _E.CHECKPOINT_LOADED: _checkpoint,
    _E.COMPARISON_EPISODE_COMPLETED: _comparison,
}


def summarize(event: TelemetryEvent) -> str:
    """Human summary of an event (without time or env prefix)."""
    summary = _SUMMARIES.get(event.event_type)
    if summary is not None:
        try:
            return summary(event)
        except (KeyError, TypeError, ValueError):  # payload not as documented: degrade to the message
            pass
    return event.message or event.event_type.name.lower()


def event_clock(event: TelemetryEvent) -> str:
    """The event's time as local `HH:MM:SS`."""
    return event.timestamp.astimezone().strftime("%H:%M:%S")


DETAIL_TYPES: frozenset[TelemetryEventType] = frozenset({
    _E.EPOCH_COMPLETED, _E.SEED_GERMINATED, _E.SEED_STAGE_CHANGED, _E.SEED_GATE_EVALUATED, _E.SEED_FOSSILIZED,
    _E.SEED_CULLED, _E.HOST_STABILIZED, _E.COUNTERFACTUAL_COMPUTED, _E.ACTION_TAKEN, _E.REWARD_COMPUTED,
    _E.PPO_UPDATE_COMPLETED, _E.GRADIENT_STATS, _E.GOVERNOR_SNAPSHOT, _E.PLATEAU_DETECTED, _E.IMPROVEMENT_DETECTED,
    _E.DEGRADATION_DETECTED, _E.CHECKPOINT_SAVED, _E.COMPARISON_EPISODE_COMPLETED,
})
"""Per-epoch and per-seed detail: printed at level DEBUG only. Below DEBUG the console prints episode and batch
summaries (which count the seeds), warnings and run milestones, so it stays well under one line per env-epoch and
a log stays readable; events.jsonl keeps every event of the level."""


NOTICE_TYPES: frozenset[TelemetryEventType] = frozenset({
    _E.RATIO_EXPLOSION_DETECTED, _E.RATIO_COLLAPSE_DETECTED, _E.VALUE_COLLAPSE_DETECTED, _E.TELEMETRY_ESCALATED,
})
"""Training-health notices a run can raise again and again: below DEBUG the console prints the first of each kind
and counts the rest (the count comes at the end of the run); events.jsonl and DEBUG keep every one."""


class ConsoleBackend:
    """Prints events of severity ≥ "info" outside `DETAIL_TYPES`, each kind of `NOTICE_TYPES` once (then counted);
    at level DEBUG every event."""

    def __init__(self, console: Console | None = None, level: TelemetryLevel = TelemetryLevel.NORMAL) -> None:
        self.console = console if console is not None else Console()
        self._debug = level >= TelemetryLevel.DEBUG
        self._min_severity = SEVERITIES.index("debug" if self._debug else "info")
        self._notices: dict[TelemetryEventType, int] = {}

    def emit(self, event: TelemetryEvent) -> None:
        if SEVERITIES.index(event.severity) < self._min_severity:
            return
        if not self._debug and event.event_type in DETAIL_TYPES and event.severity in ("debug", "info"):
            return
        text = summarize(event)
        if not self._debug and event.event_type in NOTICE_TYPES:
            seen = self._notices.get(event.event_type, 0)
            self._notices[event.event_type] = seen + 1
            if seen:
                return
            text += " (further notices of this kind are counted; every one at --telemetry-level debug)"
        line = Text(f"[{event_clock(event)}] ", style="dim")
        if event.env_id is not None:
            line.append(f"env{event.env_id} ", style="cyan")
        line.append(text, style=SEVERITY_STYLES.get(event.severity, ""))
        self.console.print(line, soft_wrap=True)

    def close(self) -> None:
        """The count of each notice kind the run raised more than once (rich writes everything else at once)."""
        repeated = {t: n for t, n in self._notices.items() if n > 1}
        if repeated:
            counts = ", ".join(f"{t.name.lower().removesuffix('_detected').replace('_', ' ')} ×{n}"
                               for t, n in repeated.items())
            self.console.print(Text(f"notices during the run: {counts} (events.jsonl has each)", style="yellow"),
                               soft_wrap=True)
        self._notices = {}
