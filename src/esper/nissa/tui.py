"""Live terminal dashboard, fed only by events emitted at level normal.

Events are folded into a `DashboardState` (`esper.nissa.tui_state`, which lists the data keys read) under a lock;
`render()` builds the whole screen from that state, so tests can render to a `Console(record=True)` without a `Live`,
and `start()` drives the same method at 4 Hz.

The panels' own inputs (`always`) arrive at every telemetry level, so the dashboard works with `--telemetry-level
minimal` too. The header shows the command's progress bar and ETA (from a `ProgressBackend`). Below
`WIDE_COLUMNS` the env table drops the device and trend columns (the header lists devices) and draws each slot as
two short lines, so an 80-column terminal shows every slot instead of truncating them.
"""

from __future__ import annotations

import textwrap
import threading
import time
from collections import Counter

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from esper.leyline.actions import LifecycleOp
from esper.leyline.constants import CANONICAL_SLOTS
from esper.leyline.telemetry import TelemetryEvent, TelemetryEventType
from esper.nissa.console import SEVERITY_STYLES, event_clock, summarize
from esper.nissa.progress import ProgressBackend, format_duration
from esper.nissa.tui_state import DASH, PPO_ROWS, STAGES, DashboardState, EnvView, fmt, num, severity, sparkline

__all__ = ["COMPACT_ENV_THRESHOLD", "WIDE_COLUMNS", "TuiBackend", "sparkline"]

_E = TelemetryEventType
COMPACT_ENV_THRESHOLD = 8
WIDE_COLUMNS = 110
_OPS_SHORT = {"WAIT": "WAIT", "GERMINATE": "GERM", "FOSSILIZE": "FOSS", "CULL": "CULL"}
_STATUS_SHORT = {"initializing": "init", "healthy": "ok", "stalled": "stall", "degraded": "drop",
                 "rolled back": "rollbk"}


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
    """Rich `Live` dashboard; `render()` is usable without `start()`. Emitting threads and the `Live` refresh share
    `state` through one lock, so a frame never shows an event half folded in."""

    always = frozenset({_E.TRAINING_STARTED, _E.EPOCH_COMPLETED, _E.EPISODE_COMPLETED, _E.BATCH_COMPLETED,
                        _E.PPO_UPDATE_COMPLETED})

    def __init__(self, console: Console | None = None, progress: ProgressBackend | None = None) -> None:
        self.console = console if console is not None else Console()
        self.progress = progress
        self.state = DashboardState()
        self._lock = threading.Lock()
        self._live: Live | None = None

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        if self._live is None:
            self._live = Live(get_renderable=self.render, console=self.console, refresh_per_second=4, screen=False)
            self._live.start()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def emit(self, event: TelemetryEvent) -> None:
        with self._lock:
            self.state.update(event)

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
            table_lines = 2 + len(self.state.envs) * (1 if wide else 2)
            log_lines = 8 if height is None else max(2, min(8, height - header_lines - table_lines
                                                            - (health_rows + 2) - 2 - 1))
            top = Table.grid(expand=True, padding=(0, 1))
            top.add_column(ratio=1)
            top.add_column(ratio=1)
            left = self._ppo_panel(wide) if not self.state.rows_by_episode else self._controllers_panel(health_rows)
            top.add_row(left, self._mix_panel(bar_width=20 if wide else 10, rows=health_rows))
            top.add_row(self._log_panel(log_lines), self._throughput_panel())
            footer = Text(_footer(str(self.state.run.get("command", ""))), style="dim")
            return Group(header, table, top, footer)

    def _header_text(self) -> str:
        state, r = self.state, self.state.run
        elapsed = int(time.monotonic() - state.started_at)
        devices = Counter(env.device for env in state.envs.values())
        rolling = fmt(state.rolling, ".1f") + "%" if state.rolling is not None else DASH
        best = fmt(state.best_rolling, ".1f") + "%" if state.best_rolling is not None else DASH
        batches = state.batches_completed
        parts = [
            f"task {r.get('task', '?')} ({r.get('topology', '?')})",
            *([f"preset {r['preset']}"] if r.get("preset") else []),
            *([f"batches {batches if batches is not None else DASH}/{r['total_batches']}"]
              if r.get("total_batches") else []),
            f"episodes {state.episodes_done}/{r.get('n_episodes') or DASH}",
            f"rolling {rolling} (best {best})",
            f"elapsed {format_duration(elapsed)}",
            "devices " + (", ".join(f"{dev}×{n}" for dev, n in sorted(devices.items())) or DASH),
        ]
        return " · ".join(parts)

    def _header(self) -> Panel:
        r = self.state.run
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
        seen = {s for env in self.state.envs.values() for s in (*env.slots, *env.flash)}
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
        trend = wide and len(self.state.envs) <= COMPACT_ENV_THRESHOLD
        slots = self._slot_names()
        table = Table(expand=True, box=None, header_style="bold", title="environments", title_justify="left",
                      padding=(0, 1) if wide else (0, 1, 0, 0))
        named = self.state.rows_by_episode
        for name in (*(("controller", "ep") if named else ("env",)), *(("device",) if wide else ()), "epoch",
                     "val acc" if wide else "acc%", *(("trend",) if trend else ())):
            table.add_column(name, no_wrap=True, min_width=len(name))
        for name in slots:  # slot cells are the widest: they wrap rather than squeeze the short columns
            table.add_column(name, min_width=0 if wide else 10)
        for name in ("action", "reward", "status"):
            table.add_column(name, no_wrap=True, min_width=len(name))
        envs = self.state.envs
        for key in sorted(envs, key=lambda k: (k[0] if isinstance(k[0], int) else -1, k[1])):
            env = envs[key]
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
            value = num((self.state.ppo or {}).get(key))
            badge, style = severity(value, crit, warn, direction) if value is not None else ("", "")
            table.add_row(label, Text(fmt(value, spec), style=style), Text(badge, style=style))
        title = "PPO health" + ("" if self.state.ppo is not None else f" ({DASH} no updates)")
        return Panel(table, title=title, title_align="left")

    def _controllers_panel(self, rows: int) -> Panel:
        """Runs without a learner: each controller's finished episodes and their mean final validation accuracy."""
        table = Table.grid(padding=(0, 2))
        for justify in ("left", "right", "right"):
            table.add_column(no_wrap=True, justify=justify)
        table.add_row(Text("controller", style="bold"), Text("episodes", style="bold"), Text("mean val", style="bold"))
        per_controller = self.state.finals_per_controller
        for name, finals in list(per_controller.items())[:max(1, rows - 1)]:
            table.add_row(name, str(len(finals)), fmt(sum(finals) / len(finals), ".2f") + "%")
        if not per_controller:
            table.add_row(Text(DASH, style="dim"), "", "")
        return Panel(table, title="finished episodes", title_align="left")

    def _mix_panel(self, bar_width: int = 20, rows: int = len(PPO_ROWS)) -> Panel:
        """Op shares, then the largest mean reward components that fit in `rows` lines."""
        state = self.state
        shares = state.action_shares
        if shares is None and state.recent_ops:
            counts = Counter(state.recent_ops)
            shares = {op: n / len(state.recent_ops) for op, n in counts.items()}
        lines = Text()
        for op in (o.name for o in LifecycleOp):
            share = (shares or {}).get(op)
            style = "bold yellow" if op == "WAIT" and share is not None and share > 0.7 else ""
            cell = DASH if share is None else f"{share:6.1%} " + "█" * round(share * bar_width)
            lines.append(f"{op:<10} {cell}\n", style=style)
        room = max(1, rows - len(LifecycleOp) - 1)
        components = state.reward_components or {}
        rewards = sorted(components.items(), key=lambda kv: -abs(num(kv[1]) or 0.0))[:room]
        lines.append("rewards" + (f" (top {room})" if len(components) > room else "") + "\n", style="bold")
        for name, value in rewards:
            lines.append(f"  {name[:20]:<20} {fmt(value, '+.4f')}\n")
        if not rewards:
            lines.append(f"  {DASH}\n", style="dim")
        lines.rstrip()
        reward = state.run.get("reward")  # the family and its parameter cost, e.g. "gap, λ_p 3.918"
        return Panel(lines, title=f"action mix · reward {reward}" if reward else "action mix and rewards",
                     title_align="left")

    def _log_panel(self, lines_shown: int = 8) -> Panel:
        lines = Text(no_wrap=True, overflow="ellipsis")
        log = self.state.log
        for event in list(log)[-lines_shown:]:
            env = f" env{event.env_id}" if event.env_id is not None else ""
            lines.append(f"{event_clock(event)}{env} ", style="dim")
            lines.append(summarize(event) + "\n", style=SEVERITY_STYLES.get(event.severity, ""))
        lines.rstrip()
        return Panel(lines if log else Text(DASH, style="dim"), title="events", title_align="left")

    def _throughput_panel(self) -> Panel:
        state, times = self.state, self.state.epoch_times
        rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else None
        hours = (time.monotonic() - state.started_at) / 3600
        per_hour = state.batch_events / hours if state.batch_events and hours > 0 else None
        lines = Text(f"env-epochs/s {fmt(rate, '.2f')}\nbatches/h    {fmt(per_hour, '.1f')}")
        for device, mem in sorted((state.gpu_memory or {}).items()):
            used, total = mem
            lines.append(f"\n{device} {used:.1f}/{total:.1f} GiB")
        return Panel(lines, title="throughput", title_align="left")
