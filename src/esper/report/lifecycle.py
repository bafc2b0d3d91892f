"""The seed-lifecycle timeline of `esper report`: per slot, a colour band per stage over the epochs of an episode.

An episode in which no seed was ever germinated says so in words: an empty timeline would look like missing data.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from esper.env.logs import SlotSummary, StepRow
from esper.report import plots as rp

STAGE_COLORS = {
    "GERMINATED": "#17becf", "TRAINING": "#f2c200", "BLENDING": "#d62ad6", "PROBATIONARY": "#3b6fd8",
    "FOSSILIZED": "#2ca02c", "DORMANT": "#dddddd", "UNKNOWN": "#dddddd", "CULLED": "#bbbbbb",
}
STAGE_ORDER = ("GERMINATED", "TRAINING", "BLENDING", "PROBATIONARY", "FOSSILIZED")
EMPTY_STAGES = frozenset({"DORMANT", "UNKNOWN"})  # a slot without a seed
GONE_STAGES = frozenset({"CULLED"}) | EMPTY_STAGES
NO_SEEDS = "no seeds were germinated"

# (label, rows sorted by epoch) for one env-episode; a panel is (title, tracks).
Track = tuple[str, list[StepRow]]


def _alive(state: SlotSummary | None) -> bool:
    return state is not None and state.stage not in GONE_STAGES


def germinated(rows: Sequence[StepRow]) -> bool:
    """Whether any slot held a seed at the end of any of these steps."""
    return any(s is not None and s.stage not in EMPTY_STAGES for r in rows for s in r.slots.values())


def _slot_names(rows: Sequence[StepRow]) -> list[str]:
    names: list[str] = []
    for r in rows:
        names += [s for s in r.slots if s not in names]
    return names


def _draw_slot_row(ax: Axes, rows: Sequence[StepRow], slot: str, y: float) -> tuple[set[str], bool]:
    """Stage bands of one slot across an episode; returns the stages drawn and whether a cull was marked."""
    stages: set[str] = set()
    culled = False
    prev: SlotSummary | None = None
    seg: list[int | str] | None = None  # [start_epoch, end_epoch, stage]

    def flush() -> None:
        if seg is not None:
            start, end, stage = int(seg[0]), int(seg[1]), str(seg[2])
            ax.broken_barh([(start - 0.5, end - start + 1)], (y - 0.38, 0.76),
                           facecolors=STAGE_COLORS.get(stage, "#7f7f7f"), edgecolor="white", linewidth=0.5)

    for r in rows:
        state = r.slots.get(slot)
        if prev is not None and _alive(prev) and prev.stage != "FOSSILIZED" and (
                not _alive(state) or state is None or state.blueprint != prev.blueprint):
            ax.plot([r.epoch], [y], marker="x", color="red", markersize=9, markeredgewidth=2.2, zorder=5)
            culled = True
        if state is not None and state.stage not in EMPTY_STAGES:
            stages.add(state.stage)
            if prev is None or not _alive(prev) or state.blueprint != prev.blueprint:
                ax.text(r.epoch - 0.42, y, state.blueprint, fontsize=7, va="center", ha="left", zorder=6,
                        clip_on=True)
            if seg is not None and seg[2] == state.stage and seg[1] == r.epoch - 1:
                seg[1] = r.epoch
            else:
                flush()
                seg = [r.epoch, r.epoch, state.stage]
        else:
            flush()
            seg = None
        prev = state
    flush()
    return stages, culled


def build_lifecycle(panels: Sequence[tuple[str, Sequence[Track]]]) -> Figure:
    """One panel per group of tracks, one row per slot per track; a track without any seed carries a note."""
    layout = [[(label, rows, _slot_names(rows) or [""]) for label, rows in tracks] for _, tracks in panels]
    n_rows = [max(1, sum(len(slots) for _, _, slots in tracks)) for tracks in layout]
    max_epoch = max((r.epoch for tracks in layout for _, rows, _ in tracks for r in rows), default=1)
    fig = Figure(figsize=(max(8.0, min(14.0, 5.0 + 0.3 * max_epoch)), 1.3 + 0.3 * sum(n_rows) + 0.6 * len(panels)),
                 dpi=rp.DPI, layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=n_rows)[:, 0]
    stages: set[str] = set()
    any_cull = False
    for ax, (title, _), tracks in zip(axes, panels, layout):
        y, ticks, labels = 0.0, [], []
        for i, (label, rows, slots) in enumerate(tracks):
            if i:
                ax.axhline(y + 0.5, color="black", linewidth=0.8)
            top, drawn_here = y, set()
            for slot in slots:
                drawn, culled = _draw_slot_row(ax, rows, slot, y)
                drawn_here |= drawn
                any_cull = any_cull or culled
                ticks.append(y)
                labels.append(f"{label} · {slot}" if slot else label)
                y -= 1.0
            stages |= drawn_here
            if not drawn_here:
                rp.note(ax, NO_SEEDS, (max_epoch + 1) / 2, (top + y + 1) / 2, data_coords=True)
        ax.set_yticks(ticks, labels, fontsize=8)
        ax.set_ylim(min(y + 0.5, -0.5), 0.5)
        ax.set_xlim(0.5, max_epoch + 0.5)
        rp.style(ax, title, "epoch", "")
        ax.grid(True, axis="x", alpha=0.3)
        ax.grid(False, axis="y")
    handles: list[Patch | Line2D] = [Patch(color=STAGE_COLORS[s], label=s) for s in STAGE_ORDER]
    handles += [Patch(color=STAGE_COLORS.get(s, "#7f7f7f"), label=s) for s in sorted(stages - set(STAGE_ORDER))]
    if any_cull:
        handles.append(Line2D([], [], marker="x", color="red", linestyle="none", markersize=9, markeredgewidth=2.2,
                              label="culled"))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.suptitle("Seed lifecycle per slot (text: blueprint at germination)", fontsize=12)
    return fig


def lifecycle_figure(panels: Sequence[tuple[str, Sequence[Track]]], path: Path) -> Path:
    return rp.save(build_lifecycle(panels), path)
