"""Live terminal dashboard, fed only by events emitted at level normal.

Events update plain state under a lock; `render()` builds the whole screen from that state, so tests can render to a
`Console(record=True)` without a `Live`, and `start()` drives the same method at 4 Hz. Data keys read:

* TRAINING_STARTED: command, task, topology, preset, reward, n_envs, env_devices {env_id: device}, total_batches,
  n_episodes.
* EPOCH_COMPLETED (per env): episode, epoch, max_epochs, val_accuracy, reward, op, slot, device,
  slots {slot: {stage, blueprint, alpha, contribution} | None}.
* EPISODE_COMPLETED: final_accuracy. BATCH_COMPLETED: batch, episodes_completed, rolling_accuracy, action_shares,
  reward_components, optional gpu_memory {device: [used_gib, total_gib]}. PPO_UPDATE_COMPLETED: the PPO update metrics.
* SEED_GERMINATED (blueprint_id), SEED_STAGE_CHANGED (to), SEED_FOSSILIZED, SEED_CULLED (blueprint_id) by slot_id;
  GOVERNOR_ROLLBACK marks the env. Without PPO or batch events (heuristic, compare) those panels show "—"; the
  action mix then comes from the ops of recent EPOCH_COMPLETED events and rolling accuracy from recent episodes.

The panels' own inputs (`always`) arrive at every telemetry level, so the dashboard works with `--telemetry-level
minimal` too. The header shows the command's progress bar and ETA (from a `ProgressBackend`). Below
`WIDE_COLUMNS` the env table drops the device and trend columns (the header lists devices) and draws each slot as
two short lines, so an 80-column terminal shows every slot instead of truncating them.
"""

from __future__ import annotations

import textwrap
import threading
import time
from collections import Counter, deque
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from esper.leyline.actions import LifecycleOp
from esper.leyline.constants import CANONICAL_SLOTS
from esper.leyline.telemetry import TelemetryEvent, TelemetryEventType
from esper.nissa.console import SEVERITY_STYLES, event_clock, op_name, stage_name, summarize
from esper.nissa.progress import ProgressBackend, format_duration
from esper.nissa.tui_state import DASH, PPO_ROWS, STAGES, EnvView, SlotView, fmt, num, severity, sparkline

__all__ = ["COMPACT_ENV_THRESHOLD", "WIDE_COLUMNS", "TuiBackend", "sparkline"]

_E = TelemetryEventType
COMPACT_ENV_THRESHOLD = 8
WIDE_COLUMNS = 110
_OPS_SHORT = {"WAIT": "WAIT", "GERMINATE": "GERM", "FOSSILIZE": "FOSS", "CULL": "CULL"}
_STATUS_SHORT = {"initializing": "init", "healthy": "ok", "stalled": "stall", "degraded": "drop",
                 "rolled back": "rollbk"}
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


def _footer(command: str) -> str:
    if "ppo" in command:
        return "Ctrl+C stops after the current step; the last batch checkpoint is kept."
    return "Ctrl+C stops the run; finished episodes stay in the run directory."


class _Screen:
    """The dashboard laid out for the width it is drawn at (a terminal can be resized while it runs)."""

    def __init__(self, tui: TuiBackend) -> None:
        self.tui = tui

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.tui.layout(options.max_width, console.height if console.is_terminal else None)


class TuiBackend:
    """Rich `Live` dashboard; `render()` is usable without `start()`."""

    always = frozenset({_E.TRAINING_STARTED, _E.EPOCH_COMPLETED, _E.EPISODE_COMPLETED, _E.BATCH_COMPLETED,
                        _E.PPO_UPDATE_COMPLETED})

    def __init__(self, console: Console | None = None, progress: ProgressBackend | None = None) -> None:
        self.console = console if console is not None else Console()
        self.progress = progress
        self._lock = threading.Lock()
        self._live: Live | None = None
        self._started_at = time.monotonic()
        self._run: dict[str, Any] = {}
        self._envs: dict[tuple[Any, int], EnvView] = {}  # (episode or None, env id) → its row
        self._batch: int | None = None
        self._batches_seen = 0
        self._episodes_done = 0
        self._rolling: float | None = None
        self._best_rolling: float | None = None
        self._finals: deque[float] = deque(maxlen=10)
        self._ppo: dict[str, Any] | None = None
        self._per_controller: dict[str, list[float]] = {}  # final accuracy of each finished episode, per controller
        self._shares: dict[str, float] | None = None
        self._rewards: dict[str, float] | None = None
        self._gpu: dict[str, Any] | None = None
        self._ops: deque[str] = deque(maxlen=200)
        self._epoch_times: deque[float] = deque(maxlen=256)
        self._log: deque[TelemetryEvent] = deque(maxlen=8)

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        if self._live is None:
            self._live = Live(get_renderable=self.render, console=self.console, refresh_per_second=4, screen=False)
            self._live.start()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    # ---------------------------------------------------------------- state updates
    def emit(self, event: TelemetryEvent) -> None:
        with self._lock:
            self._update(event)
            if event.event_type not in _UNLOGGED:
                self._log.append(event)

    def _by_episode(self) -> bool:
        """Rows per (episode, env): paired episodes (compare, study phases, heuristic runs) reuse env ids and may run
        side by side on workers. A PPO run's rows are its env slots, whose episodes change every batch."""
        return not self._run.get("total_batches")

    def _env(self, env_id: int, episode: Any = None) -> EnvView:
        key = (episode if self._by_episode() else None, env_id)
        if key not in self._envs:
            if key[0] is not None:
                self._envs.pop((None, env_id), None)  # the placeholder row of TRAINING_STARTED
            self._envs[key] = EnvView(env_id)
        return self._envs[key]

    def _retire(self, env_id: int, episode: Any) -> None:
        """A new episode of an env id started: drop the rows of its finished earlier episodes."""
        if not self._by_episode() or not isinstance(episode, int):
            return
        for key, env in list(self._envs.items()):
            if (key[1] == env_id and isinstance(key[0], int) and key[0] < episode and env.max_epochs
                    and env.epoch >= env.max_epochs):
                del self._envs[key]

    def _update(self, e: TelemetryEvent) -> None:
        d, t = e.data, e.event_type
        if t == _E.TRAINING_STARTED:  # a new phase (a study trains, then evaluates): its own envs and counters
            self._run = dict(d)
            self._started_at = time.monotonic()
            self._envs.clear()
            self._per_controller.clear()
            self._batch, self._batches_seen, self._episodes_done = None, 0, 0
            for i in range(int(d.get("n_envs") or 0)):
                self._env(i)
            for env_id, device in (d.get("env_devices") or {}).items():
                self._env(int(env_id)).device = str(device)
        elif t == _E.EPOCH_COMPLETED and e.env_id is not None:
            if d.get("epoch") == 1 or e.epoch == 1:
                self._retire(e.env_id, d.get("episode"))
            self._epoch(self._env(e.env_id, d.get("episode")), e)
        elif t == _E.EPISODE_COMPLETED:
            self._episodes_done += 1
            if (controller := d.get("controller")) is not None and (final := num(d.get("final_accuracy"))) is not None:
                self._per_controller.setdefault(str(controller), []).append(final)
            if (final := num(d.get("final_accuracy"))) is not None:
                self._finals.append(final)
            if self._batches_seen == 0 and self._finals:
                self._set_rolling(sum(self._finals) / len(self._finals))
        elif t == _E.BATCH_COMPLETED:
            if self._batches_seen == 0:  # batch rolling accuracy supersedes the episode-based estimate
                self._best_rolling = None
            self._batches_seen += 1
            if (index := num(d.get("batch"))) is not None:
                self._batch = int(index) + 1  # batches completed (the event carries the 0-based batch index)
            self._episodes_done = max(self._episodes_done, int(d.get("episodes_completed") or 0))
            if (rolling := num(d.get("rolling_accuracy"))) is not None:
                self._set_rolling(rolling)
            self._shares = {op_name(k): float(v) for k, v in (d.get("action_shares") or {}).items()} or None
            self._rewards = dict(d.get("reward_components") or {}) or None
            self._gpu = d.get("gpu_memory") or self._gpu
        elif t == _E.PPO_UPDATE_COMPLETED:
            self._ppo = dict(d)
        elif e.env_id is not None and t in (_E.GOVERNOR_ROLLBACK, *_SEED_EVENTS):
            self._seed_or_rollback(self._env(e.env_id, d.get("episode")), e)

    def _set_rolling(self, value: float) -> None:
        self._rolling = value
        self._best_rolling = value if self._best_rolling is None else max(self._best_rolling, value)

    def _epoch(self, env: EnvView, e: TelemetryEvent) -> None:
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
            self._ops.append(op)
            env.last_action = op + (f" {d['slot']}" if d.get("slot") and op != "WAIT" else "")
        env.flash = {s: (bp, n - 1) for s, (bp, n) in env.flash.items() if n > 1}
        env.rollback_left = max(env.rollback_left - 1, 0)
        self._epoch_times.append(time.monotonic())

    def _seed_or_rollback(self, env: EnvView, e: TelemetryEvent) -> None:
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

    # ---------------------------------------------------------------- rendering
    def render(self) -> RenderableType:
        """The whole screen, laid out for the width it is drawn at."""
        return _Screen(self)

    def layout(self, width: int, height: int | None = None) -> RenderableType:
        """The screen for a terminal of `width` × `height`: below `WIDE_COLUMNS` the compact forms, and the event
        log gets the rows left over (2 to 8), so the footer stays on an 80×30 screen with four envs."""
        wide = width >= WIDE_COLUMNS
        with self._lock:
            header = self._header()
            table = self._env_table(wide)
            health_rows = len(PPO_ROWS) if wide else sum(1 for row in PPO_ROWS if row[3] is not None
                                                         or row[4] is not None)
            wrapped = textwrap.wrap(self._header_text(), max(1, width - 4))  # rich wraps the header on words too
            header_lines = 2 + max(1, len(wrapped)) + (self.progress is not None)
            table_lines = 2 + len(self._envs) * (1 if wide else 2)
            log_lines = 8 if height is None else max(2, min(8, height - header_lines - table_lines
                                                            - (health_rows + 2) - 2 - 1))
            top = Table.grid(expand=True, padding=(0, 1))
            top.add_column(ratio=1)
            top.add_column(ratio=1)
            left = self._ppo_panel(wide) if not self._by_episode() else self._controllers_panel(health_rows)
            top.add_row(left, self._mix_panel(bar_width=20 if wide else 10, rows=health_rows))
            top.add_row(self._log_panel(log_lines), self._throughput_panel())
            footer = Text(_footer(str(self._run.get("command", ""))), style="dim")
            return Group(header, table, top, footer)

    def _header_text(self) -> str:
        r = self._run
        elapsed = int(time.monotonic() - self._started_at)
        devices = Counter(env.device for env in self._envs.values())
        rolling = fmt(self._rolling, ".1f") + "%" if self._rolling is not None else DASH
        best = fmt(self._best_rolling, ".1f") + "%" if self._best_rolling is not None else DASH
        parts = [
            f"task {r.get('task', '?')} ({r.get('topology', '?')})",
            *([f"preset {r['preset']}"] if r.get("preset") else []),
            *([f"batches {self._batch if self._batch is not None else DASH}/{r['total_batches']}"]
              if r.get("total_batches") else []),
            f"episodes {self._episodes_done}/{r.get('n_episodes') or DASH}",
            f"rolling {rolling} (best {best})",
            f"elapsed {format_duration(elapsed)}",
            "devices " + (", ".join(f"{dev}×{n}" for dev, n in sorted(devices.items())) or DASH),
        ]
        return " · ".join(parts)

    def _header(self) -> Panel:
        r = self._run
        body: list[RenderableType] = [Text(self._header_text())]
        if self.progress is not None and self.progress.snapshot().total > 0:
            body.append(self._progress_row())
        return Panel(Group(*body), title=f"esper {r.get('command', '')}".strip(), title_align="left")

    def _progress_row(self) -> Table:
        assert self.progress is not None
        p = self.progress.snapshot()
        row = Table.grid(padding=(0, 1), expand=True)
        row.add_column(no_wrap=True)
        row.add_column(ratio=1, min_width=10)
        row.add_column(no_wrap=True)
        row.add_row(Text(p.description, style="bold"), ProgressBar(total=p.total, completed=p.done),
                    Text(f"{p.done}/{p.total} env-epochs {100 * p.fraction:.0f}% · ETA {format_duration(p.eta_s)}"))
        return row

    def _slot_names(self) -> list[str]:
        seen = {s for env in self._envs.values() for s in (*env.slots, *env.flash)}
        known = [s for s in CANONICAL_SLOTS if s in seen]
        return (known + sorted(seen - set(known))) or list(CANONICAL_SLOTS)

    def _slot_cell(self, env: EnvView, slot: str, wide: bool) -> Text:
        info = env.slots.get(slot)
        if slot in env.flash and (info is None or info.stage == "CULLED"):
            return Text(f"Cull:{env.flash[slot][0]}" if wide else f"Cull\n{env.flash[slot][0]}", style="bold red")
        if info is None:
            return Text(DASH, style="dim")
        abbr, style = STAGES.get(info.stage, (info.stage.title(), ""))
        if not wide:  # stage and its one telling number, then the blueprint: two lines of at most 11 characters
            shown = f" α{info.alpha:.2f}" if info.stage == "BLENDING" else \
                "" if info.contribution is None else f" {info.contribution:+.1f}"
            return Text(f"{abbr}{shown}\n{info.blueprint}", style=style)
        text = f"{abbr}:{info.blueprint} α{info.alpha:.2f}"
        if info.contribution is not None:
            text += f" c{info.contribution:+.1f}"
        return Text(text, style=style)

    def _env_table(self, wide: bool = True) -> Table:
        trend = wide and len(self._envs) <= COMPACT_ENV_THRESHOLD
        slots = self._slot_names()
        table = Table(expand=True, box=None, header_style="bold", title="environments", title_justify="left",
                      padding=(0, 1) if wide else (0, 1, 0, 0))
        named = self._by_episode()
        for name in (*(("controller", "ep") if named else ("env",)), *(("device",) if wide else ()), "epoch",
                     "val acc" if wide else "acc%", *(("trend",) if trend else ())):
            table.add_column(name, no_wrap=True, min_width=len(name))
        for name in slots:  # slot cells are the widest: they wrap rather than squeeze the short columns
            table.add_column(name, min_width=0 if wide else 10)
        for name in ("action", "reward", "status"):
            table.add_column(name, no_wrap=True, min_width=len(name))
        for key in sorted(self._envs, key=lambda k: (k[0] if isinstance(k[0], int) else -1, k[1])):
            env = self._envs[key]
            epoch = f"{env.epoch}/{env.max_epochs or '?'}" if env.epoch else DASH
            acc = fmt(env.val_accuracy, ".1f") + ("%" if env.val_accuracy is not None and wide else "")
            episode = DASH if key[0] is None else str(key[0])
            row: list[RenderableType] = [env.controller or f"env {env.env_id}", episode] if named else [str(env.env_id)]
            row += [*((env.device,) if wide else ()), epoch, acc]
            if trend:
                row.append(Text(sparkline(env.curve), style="cyan"))
            row += [self._slot_cell(env, s, wide) for s in slots]
            status = env.status()
            if not wide:
                status = Text(_STATUS_SHORT.get(status.plain, status.plain), style=status.style)
            action = env.last_action if wide else " ".join(
                [_OPS_SHORT.get(part, part) if i == 0 else part for i, part in enumerate(env.last_action.split())])
            row += [action, fmt(env.reward, "+.2f"), status]
            table.add_row(*row)
        return table

    def _ppo_panel(self, wide: bool = True) -> Panel:
        """Every metric, or (narrow) the ones with health thresholds."""
        table = Table.grid(padding=(0, 2))
        for _ in range(3):
            table.add_column(no_wrap=True)
        for label, key, spec, crit, warn, direction in PPO_ROWS:
            if not wide and crit is None and warn is None:
                continue
            value = num((self._ppo or {}).get(key))
            badge, style = severity(value, crit, warn, direction) if value is not None else ("", "")
            table.add_row(label, Text(fmt(value, spec), style=style), Text(badge, style=style))
        title = "PPO health" + ("" if self._ppo is not None else f" ({DASH} no updates)")
        return Panel(table, title=title, title_align="left")

    def _controllers_panel(self, rows: int) -> Panel:
        """Runs without a learner: each controller's finished episodes and their mean final validation accuracy."""
        table = Table.grid(padding=(0, 2))
        for justify in ("left", "right", "right"):
            table.add_column(no_wrap=True, justify=justify)
        table.add_row(Text("controller", style="bold"), Text("episodes", style="bold"), Text("mean val", style="bold"))
        for name, finals in list(self._per_controller.items())[:max(1, rows - 1)]:
            table.add_row(name, str(len(finals)), fmt(sum(finals) / len(finals), ".2f") + "%")
        if not self._per_controller:
            table.add_row(Text(DASH, style="dim"), "", "")
        return Panel(table, title="finished episodes", title_align="left")

    def _mix_panel(self, bar_width: int = 20, rows: int = len(PPO_ROWS)) -> Panel:
        """Op shares, then the largest mean reward components that fit in `rows` lines."""
        shares = self._shares
        if shares is None and self._ops:
            counts = Counter(self._ops)
            shares = {op: n / len(self._ops) for op, n in counts.items()}
        lines = Text()
        for op in (o.name for o in LifecycleOp):
            share = (shares or {}).get(op)
            style = "bold yellow" if op == "WAIT" and share is not None and share > 0.7 else ""
            cell = DASH if share is None else f"{share:6.1%} " + "█" * round(share * bar_width)
            lines.append(f"{op:<10} {cell}\n", style=style)
        room = max(1, rows - len(LifecycleOp) - 1)
        rewards = sorted((self._rewards or {}).items(), key=lambda kv: -abs(num(kv[1]) or 0.0))[:room]
        lines.append("rewards" + (f" (top {room})" if len(self._rewards or {}) > room else "") + "\n", style="bold")
        for name, value in rewards:
            lines.append(f"  {name[:20]:<20} {fmt(value, '+.4f')}\n")
        if not rewards:
            lines.append(f"  {DASH}\n", style="dim")
        lines.rstrip()
        reward = self._run.get("reward")  # the family and its parameter cost, e.g. "gap, λ_p 3.918"
        return Panel(lines, title=f"action mix · reward {reward}" if reward else "action mix and rewards",
                     title_align="left")

    def _log_panel(self, lines_shown: int = 8) -> Panel:
        lines = Text(no_wrap=True, overflow="ellipsis")
        for event in list(self._log)[-lines_shown:]:
            env = f" env{event.env_id}" if event.env_id is not None else ""
            lines.append(f"{event_clock(event)}{env} ", style="dim")
            lines.append(summarize(event) + "\n", style=SEVERITY_STYLES.get(event.severity, ""))
        lines.rstrip()
        return Panel(lines if self._log else Text(DASH, style="dim"), title="events", title_align="left")

    def _throughput_panel(self) -> Panel:
        times = self._epoch_times
        rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else None
        hours = (time.monotonic() - self._started_at) / 3600
        per_hour = self._batches_seen / hours if self._batches_seen and hours > 0 else None
        lines = Text(f"env-epochs/s {fmt(rate, '.2f')}\nbatches/h    {fmt(per_hour, '.1f')}")
        for device, mem in sorted((self._gpu or {}).items()):
            used, total = mem
            lines.append(f"\n{device} {used:.1f}/{total:.1f} GiB")
        return Panel(lines, title="throughput", title_align="left")
