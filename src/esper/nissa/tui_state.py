"""The live dashboard's state: telemetry events folded into one row per env plus the run's counters, and the value
formatting its panels share.

Kept apart from `esper.nissa.tui` (the `Live` display and the layout), so what the dashboard knows and how it is
drawn each read as one responsibility; `DashboardState` is plain data, testable without rich's console.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text

from esper.leyline.telemetry import TelemetryEvent, TelemetryEventType
from esper.nissa.console import op_name, stage_name

__all__ = ["DASH", "PPO_ROWS", "STAGES", "DashboardState", "EnvView", "SlotView", "fmt", "num", "severity",
           "sparkline"]

_E = TelemetryEventType
SPARK = "▁▂▃▄▅▆▇█"
STAGES: dict[str, tuple[str, str]] = {  # name → (abbreviation, style)
    "DORMANT": ("Dorm", "dim"),
    "GERMINATED": ("Germ", "cyan"),
    "TRAINING": ("Train", "yellow"),
    "BLENDING": ("Blend", "magenta"),
    "PROBATIONARY": ("Prob", "bright_blue"),
    "FOSSILIZED": ("Foss", "bright_green"),
    "CULLED": ("Cull", "bold red"),
}
# (label, metric key, format, CRIT threshold, WARN threshold, bad direction); ratio limits are the anomaly detector's.
PPO_ROWS: tuple[tuple[str, str, str, float | None, float | None, str], ...] = (
    ("entropy", "entropy", ".3f", 0.3, 0.5, "below"),
    ("clip fraction", "clip_fraction", ".3f", 0.3, 0.25, "above"),
    ("approx KL", "approx_kl", ".4f", None, 0.05, "above"),
    ("explained var", "explained_variance", ".3f", 0.0, 0.3, "below"),
    ("ratio max", "ratio_max", ".3f", 5.0, None, "above"),
    ("ratio min", "ratio_min", ".3f", 0.1, None, "below"),
    ("policy loss", "policy_loss", "+.4f", None, None, "above"),
    ("value loss", "value_loss", ".4f", None, None, "above"),
    ("grad norm", "grad_norm", ".3f", 10.0, 5.0, "above"),
    ("entropy coef", "entropy_coef", ".4f", None, None, "above"),
    ("early stop epoch", "early_stop_epoch", "g", None, None, "above"),
)
STALL_EPOCHS = 10
DROP_PP = 1.0
DASH = "—"
# Frequent per-epoch events stay out of the 8-line log so it shows what changed.
_UNLOGGED = frozenset(
    {
        _E.EPOCH_COMPLETED,
        _E.ACTION_TAKEN,
        _E.COUNTERFACTUAL_COMPUTED,
        _E.REWARD_COMPUTED,
        _E.GRADIENT_STATS,
        _E.SEED_GATE_EVALUATED,
        _E.GOVERNOR_SNAPSHOT,
    }
)
_SEED_EVENTS = (_E.SEED_GERMINATED, _E.SEED_STAGE_CHANGED, _E.SEED_FOSSILIZED, _E.SEED_CULLED)
_FLASH_EPOCHS = 2  # the epoch of the event plus the next one (the event precedes its own EPOCH_COMPLETED)


def sparkline(values: Iterable[float]) -> str:
    """One block character per value, scaled to the window's min..max (flat windows sit mid-height)."""
    vals = list(values)
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    if hi - lo < 1e-9:
        return SPARK[3] * len(vals)
    return "".join(SPARK[round((v - lo) / (hi - lo) * (len(SPARK) - 1))] for v in vals)


@dataclass(slots=True)
class SlotView:
    stage: str
    blueprint: str
    alpha: float = 0.0
    contribution: float | None = None


@dataclass(slots=True)
class EnvView:
    env_id: int
    device: str = "?"
    controller: str | None = None
    episode: Any = None
    epoch: int = 0
    max_epochs: int | None = None
    val_accuracy: float | None = None
    curve: deque[float] = field(default_factory=lambda: deque(maxlen=8))
    best: float = float("-inf")
    since_best: int = 0
    drop: float = 0.0
    reward: float | None = None
    last_action: str = DASH
    slots: dict[str, SlotView | None] = field(default_factory=dict)
    flash: dict[str, tuple[str, int]] = field(default_factory=dict)  # culled slot → (blueprint, epochs left)
    rollback_left: int = 0

    def status(self) -> Text:
        if self.epoch == 0:
            return Text("initializing", style="dim")
        if self.rollback_left > 0:
            return Text("rolled back", style="bold red")
        if self.drop > DROP_PP:
            return Text("degraded", style="red")
        if self.since_best > STALL_EPOCHS:
            return Text("stalled", style="yellow")
        return Text("healthy", style="green")


def num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def fmt(value: Any, spec: str) -> str:
    number = num(value)
    return DASH if number is None else format(number, spec)


def severity(value: float, crit: float | None, warn: float | None, direction: str) -> tuple[str, str]:
    def bad(limit: float | None) -> bool:
        return limit is not None and (value < limit if direction == "below" else value > limit)

    if bad(crit):
        return "CRIT", "bold red"
    if bad(warn):
        return "WARN", "yellow"
    return ("ok", "green") if crit is not None or warn is not None else ("", "")


class DashboardState:
    """What the dashboard shows, folded from events by `update` (the caller holds the lock that rendering takes too).

    Data keys read:

    * TRAINING_STARTED: command, task, topology, preset, reward, n_envs, env_devices {env_id: device}, total_batches,
      n_episodes.
    * EPOCH_COMPLETED (per env): episode, epoch, max_epochs, val_accuracy, reward, op, slot, device,
      slots {slot: {stage, blueprint, alpha, contribution} | None}.
    * EPISODE_COMPLETED: final_accuracy. BATCH_COMPLETED: batch, episodes_completed, rolling_accuracy, action_shares,
      reward_components, optional gpu_memory {device: [used_gib, total_gib]}. PPO_UPDATE_COMPLETED: the PPO update
      metrics.
    * SEED_GERMINATED (blueprint_id), SEED_STAGE_CHANGED (to), SEED_FOSSILIZED, SEED_CULLED (blueprint_id) by slot_id;
      GOVERNOR_ROLLBACK marks the env. Without PPO or batch events (heuristic, compare) those panels show "—"; the
      action mix then comes from the ops of recent EPOCH_COMPLETED events and rolling accuracy from recent episodes.
    """

    def __init__(self) -> None:
        self.started_at = time.monotonic()
        self.run: dict[str, Any] = {}  # the TRAINING_STARTED data of the current phase
        self.envs: dict[tuple[Any, int], EnvView] = {}  # (episode or None, env id) → its row
        self.batches_completed: int | None = None
        self.batch_events = 0
        self.episodes_done = 0
        self.rolling: float | None = None
        self.best_rolling: float | None = None
        self.recent_finals: deque[float] = deque(maxlen=10)
        self.ppo: dict[str, Any] | None = None
        self.finals_per_controller: dict[str, list[float]] = {}  # final accuracy of each finished episode
        self.action_shares: dict[str, float] | None = None
        self.reward_components: dict[str, float] | None = None
        self.gpu_memory: dict[str, Any] | None = None
        self.recent_ops: deque[str] = deque(maxlen=200)
        self.epoch_times: deque[float] = deque(maxlen=256)
        self.log: deque[TelemetryEvent] = deque(maxlen=8)

    @property
    def rows_by_episode(self) -> bool:
        """Rows per (episode, env): paired episodes (compare, study phases, heuristic runs) reuse env ids and may run
        side by side on workers. A PPO run's rows are its env slots, whose episodes change every batch."""
        return not self.run.get("total_batches")

    def update(self, e: TelemetryEvent) -> None:
        d, t = e.data, e.event_type
        if t == _E.TRAINING_STARTED:  # a new phase (a study trains, then evaluates): its own envs and counters
            self.run = dict(d)
            self.started_at = time.monotonic()
            self.envs.clear()
            self.finals_per_controller.clear()
            self.batches_completed, self.batch_events, self.episodes_done = None, 0, 0
            for i in range(int(d.get("n_envs") or 0)):
                self._row(i)
            for env_id, device in (d.get("env_devices") or {}).items():
                self._row(int(env_id)).device = str(device)
        elif t == _E.EPOCH_COMPLETED and e.env_id is not None:
            if d.get("epoch") == 1 or e.epoch == 1:
                self._retire_finished_rows(e.env_id, d.get("episode"))
            self._fold_epoch(self._row(e.env_id, d.get("episode")), e)
        elif t == _E.EPISODE_COMPLETED:
            self.episodes_done += 1
            if (controller := d.get("controller")) is not None and (final := num(d.get("final_accuracy"))) is not None:
                self.finals_per_controller.setdefault(str(controller), []).append(final)
            if (final := num(d.get("final_accuracy"))) is not None:
                self.recent_finals.append(final)
            if self.batch_events == 0 and self.recent_finals:
                self._set_rolling(sum(self.recent_finals) / len(self.recent_finals))
        elif t == _E.BATCH_COMPLETED:
            if self.batch_events == 0:  # batch rolling accuracy supersedes the episode-based estimate
                self.best_rolling = None
            self.batch_events += 1
            if (index := num(d.get("batch"))) is not None:
                self.batches_completed = int(index) + 1  # the event carries the 0-based batch index
            self.episodes_done = max(self.episodes_done, int(d.get("episodes_completed") or 0))
            if (rolling := num(d.get("rolling_accuracy"))) is not None:
                self._set_rolling(rolling)
            self.action_shares = {op_name(k): float(v) for k, v in (d.get("action_shares") or {}).items()} or None
            self.reward_components = dict(d.get("reward_components") or {}) or None
            self.gpu_memory = d.get("gpu_memory") or self.gpu_memory
        elif t == _E.PPO_UPDATE_COMPLETED:
            self.ppo = dict(d)
        elif e.env_id is not None and t in (_E.GOVERNOR_ROLLBACK, *_SEED_EVENTS):
            self._fold_seed_or_rollback(self._row(e.env_id, d.get("episode")), e)
        if t not in _UNLOGGED:
            self.log.append(e)

    def _row(self, env_id: int, episode: Any = None) -> EnvView:
        key = (episode if self.rows_by_episode else None, env_id)
        if key not in self.envs:
            if key[0] is not None:
                self.envs.pop((None, env_id), None)  # the placeholder row of TRAINING_STARTED
            self.envs[key] = EnvView(env_id)
        return self.envs[key]

    def _retire_finished_rows(self, env_id: int, episode: Any) -> None:
        """A new episode of an env id started: drop the rows of its finished earlier episodes."""
        if not self.rows_by_episode or not isinstance(episode, int):
            return
        for key, env in list(self.envs.items()):
            if (key[1] == env_id and isinstance(key[0], int) and key[0] < episode and env.max_epochs
                    and env.epoch >= env.max_epochs):
                del self.envs[key]

    def _set_rolling(self, value: float) -> None:
        self.rolling = value
        self.best_rolling = value if self.best_rolling is None else max(self.best_rolling, value)

    def _fold_epoch(self, env: EnvView, e: TelemetryEvent) -> None:
        d = e.data
        epoch = int(e.epoch if e.epoch is not None else d.get("epoch", env.epoch + 1))
        episode = d.get("episode", env.episode)
        if episode != env.episode or epoch <= env.epoch:  # a new episode: per-episode state restarts
            env.curve.clear()
            env.best, env.since_best, env.drop, env.reward, env.val_accuracy = float("-inf"), 0, 0.0, None, None
        env.episode, env.epoch = episode, epoch
        env.max_epochs = d.get("max_epochs", env.max_epochs)
        env.device = str(d.get("device", env.device))
        env.controller = str(d["controller"]) if d.get("controller") is not None else env.controller
        if (acc := num(d.get("val_accuracy"))) is not None:
            env.drop = env.val_accuracy - acc if env.val_accuracy is not None else 0.0
            env.since_best = 0 if acc > env.best else env.since_best + 1
            env.best = max(env.best, acc)
            env.val_accuracy = acc
            env.curve.append(acc)
        if (reward := num(d.get("reward"))) is not None:
            env.reward = (env.reward or 0.0) + reward
        for slot, info in (d.get("slots") or {}).items():
            env.slots[slot] = (
                None
                if info is None
                else SlotView(
                    stage_name(info["stage"]),
                    str(info.get("blueprint") or "?"),
                    num(info.get("alpha")) or 0.0,
                    num(info.get("contribution")),
                )
            )
        if d.get("op") is not None:
            op = op_name(d["op"])
            self.recent_ops.append(op)
            env.last_action = op + (f" {d['slot']}" if d.get("slot") and op != "WAIT" else "")
        env.flash = {s: (bp, n - 1) for s, (bp, n) in env.flash.items() if n > 1}
        env.rollback_left = max(env.rollback_left - 1, 0)
        self.epoch_times.append(time.monotonic())

    def _fold_seed_or_rollback(self, env: EnvView, e: TelemetryEvent) -> None:
        if e.event_type == _E.GOVERNOR_ROLLBACK:
            env.rollback_left = _FLASH_EPOCHS
            return
        slot = e.slot_id or e.data.get("slot")
        if slot is None:
            return
        current = env.slots.get(slot)
        if e.event_type == _E.SEED_GERMINATED:
            env.slots[slot] = SlotView("GERMINATED", str(e.data.get("blueprint_id", "?")))
            env.flash.pop(slot, None)
        elif e.event_type == _E.SEED_CULLED:
            blueprint = e.data.get("blueprint_id") or (current.blueprint if current else "?")
            env.flash[slot] = (str(blueprint), _FLASH_EPOCHS)
        elif current is not None:
            to = e.data.get("to") if e.event_type == _E.SEED_STAGE_CHANGED else "FOSSILIZED"
            if to is not None:
                current.stage = stage_name(to)
