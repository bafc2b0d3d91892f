"""Plot primitives for `esper report`: matplotlib Figures on the Agg canvas, no pyplot state.

Each helper draws one kind of panel from plain rows (steps.jsonl / episodes.jsonl / history.jsonl dicts), so the
heuristic, compare and PPO reports share the lifecycle, action-mix and reward renderers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import matplotlib

matplotlib.use("Agg")

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, MaxNLocator

DPI = 110
OPS = ("WAIT", "GERMINATE", "FOSSILIZE", "CULL")
OP_COLORS = {"WAIT": "#c7c7c7", "GERMINATE": "#1f77b4", "FOSSILIZE": "#2ca02c", "CULL": "#d62728"}
STAGE_COLORS = {
    "GERMINATED": "#17becf", "TRAINING": "#f2c200", "BLENDING": "#d62ad6", "PROBATIONARY": "#3b6fd8",
    "FOSSILIZED": "#2ca02c", "DORMANT": "#dddddd", "UNKNOWN": "#dddddd", "CULLED": "#bbbbbb",
    "EMBARGOED": "#bbbbbb", "RESETTING": "#bbbbbb",
}
STAGE_ORDER = ("GERMINATED", "TRAINING", "BLENDING", "PROBATIONARY", "FOSSILIZED")
GONE_STAGES = frozenset({"CULLED", "EMBARGOED", "RESETTING", "DORMANT", "UNKNOWN"})
# ShapedRewardComponents summed fields in a fixed order, so each keeps its colour across plots.
REWARD_FIELDS = ("attribution", "proxy", "blending_warning", "probation_warning", "pbrs", "rent", "action_shaping",
                 "terminal", "governor_penalty", "loss_primary", "sparse_terminal")
REWARD_DIAGNOSTICS = frozenset({"family", "attribution_discount", "ratio_penalty", "growth_ratio", "phi_prev",
                                "phi_next", "val_acc", "action_name", "action_success", "total"})
_TAB20 = matplotlib.colormaps["tab20"]
THOUSANDS = FuncFormatter(lambda v, _pos: f"{v:,.0f}")
MANY_BARS = 40  # above this many x positions, stacked bars become stacked areas / lines

# (label, rows sorted by epoch) for one env-episode; a panel is (title, tracks).
Track = tuple[str, list[dict[str, Any]]]


def num(value: Any) -> float:
    """A JSON number as float; None, strings and non-finite values become NaN."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


def new_figure(width: float, height: float, nrows: int = 1, ncols: int = 1, *,
               layout: Literal["constrained"] | None = "constrained", **kw: Any) -> tuple[Figure, Any]:
    fig = Figure(figsize=(width, height), dpi=DPI, layout=layout)
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=DPI)
    return path


def style(ax: Axes, title: str, xlabel: str, ylabel: str, *, int_x: bool = True) -> None:
    ax.set_title(title, fontsize=11)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.set_axisbelow(True)
    if int_x:
        lo, hi = ax.get_xlim()
        if hi - lo < 4:  # a single batch or epoch: MaxNLocator would fall back to fractional ticks
            ax.set_xticks(range(math.ceil(lo), math.floor(hi) + 1))
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def series_colors(n: int) -> list[Any]:
    if n <= 10:
        return [matplotlib.colormaps["tab10"](i) for i in range(n)]
    return [matplotlib.colormaps["viridis"](i / max(n - 1, 1)) for i in range(n)]


def reward_color(name: str) -> Any:
    if name in REWARD_FIELDS:
        return _TAB20(REWARD_FIELDS.index(name) * 2 % 20 + (REWARD_FIELDS.index(name) * 2 // 20))
    return _TAB20(19)


def reward_names(component_dicts: Sequence[Mapping[str, Any]]) -> list[str]:
    """Summed reward components that are non-zero somewhere, known fields first."""
    seen: dict[str, bool] = {}
    for comps in component_dicts:
        for k, v in comps.items():
            if k in REWARD_DIAGNOSTICS or math.isnan(num(v)):
                continue
            seen[k] = seen.get(k, False) or num(v) != 0.0
    known = [k for k in REWARD_FIELDS if seen.get(k)]
    return known + sorted(k for k, nonzero in seen.items() if nonzero and k not in REWARD_FIELDS)


def mark_markers(n: int) -> dict[str, Any]:
    return {"marker": "o", "markersize": 4} if n <= 50 else {}


# ---------------------------------------------------------------------------------------------- stacked panels


def stacked_shares(ax: Axes, x: Sequence[float], shares: Mapping[str, Sequence[float]], *, labels: bool = True,
                   width: float = 0.8) -> None:
    """Op shares (or counts) stacked per x: bars for a few x (with % labels), stacked areas for many."""
    ops = [op for op in OPS if op in shares] + [op for op in shares if op not in OPS]
    values = [[num(v) if not math.isnan(num(v)) else 0.0 for v in shares[op]] for op in ops]
    colors = [OP_COLORS.get(op, "#7f7f7f") for op in ops]
    if len(x) > MANY_BARS:
        ax.stackplot(list(x), values, labels=ops, colors=colors, alpha=0.9)
        return
    bottom = [0.0] * len(x)
    totals = [sum(col) for col in zip(*values)] if values else []
    for op, vals, color in zip(ops, values, colors):
        ax.bar(list(x), vals, width, bottom=bottom, label=op, color=color, edgecolor="white", linewidth=0.5)
        if labels and len(x) <= 12:
            for xi, v, b, t in zip(x, vals, bottom, totals):
                if t > 0 and v / t >= 0.08:
                    ax.text(xi, b + v / 2, f"{100 * v / t:.0f}%", ha="center", va="center", fontsize=8)
        bottom = [b + v for b, v in zip(bottom, vals)]


def reward_panel(ax: Axes, x: Sequence[float], comps: Mapping[str, Sequence[float]], total: Sequence[float],
                 xlabel: str, title: str) -> None:
    """Reward components per x: diverging stacked bars (positive up, negative down) or lines; total in black."""
    if len(x) <= MANY_BARS:
        pos, neg = [0.0] * len(x), [0.0] * len(x)
        for name, vals in comps.items():
            clean = [0.0 if math.isnan(v) else v for v in vals]
            base = [p if v >= 0 else n for v, p, n in zip(clean, pos, neg)]
            ax.bar(list(x), clean, 0.7, bottom=base, label=name, color=reward_color(name), edgecolor="white",
                   linewidth=0.4)
            pos = [p + max(v, 0.0) for v, p in zip(clean, pos)]
            neg = [n + min(v, 0.0) for v, n in zip(clean, neg)]
    else:
        for name, vals in comps.items():
            ax.plot(list(x), list(vals), label=name, color=reward_color(name), linewidth=1.2)
    ax.plot(list(x), list(total), color="black", linewidth=1.8, label="total", marker="D",
            markersize=5 if len(x) <= MANY_BARS else 0)
    ax.axhline(0.0, color="black", linewidth=0.6)
    style(ax, title, xlabel, "mean reward per step")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)


# ---------------------------------------------------------------------------------------------- lifecycle


def _alive(state: Any) -> bool:
    return isinstance(state, dict) and state.get("stage") not in GONE_STAGES


def _slot_names(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    names: list[str] = []
    for r in rows:
        for s in (r.get("slots") or {}):
            if s not in names:
                names.append(s)
    return names


def _draw_slot_row(ax: Axes, rows: Sequence[Mapping[str, Any]], slot: str, y: float) -> tuple[set[str], bool]:
    """Stage bands of one slot across an episode; returns the stages drawn and whether a cull was marked."""
    stages: set[str] = set()
    culled = False
    prev: Any = None
    seg: list[Any] | None = None  # [start_epoch, end_epoch, stage]

    def flush() -> None:
        if seg is not None:
            ax.broken_barh([(seg[0] - 0.5, seg[1] - seg[0] + 1)], (y - 0.38, 0.76),
                           facecolors=STAGE_COLORS.get(seg[2], "#7f7f7f"), edgecolor="white", linewidth=0.5)

    for r in rows:
        epoch = int(num(r.get("epoch")))
        state = (r.get("slots") or {}).get(slot)
        cur: dict[str, Any] = state if isinstance(state, dict) else {}
        if _alive(prev) and prev.get("stage") != "FOSSILIZED" and (
                not _alive(state) or cur.get("blueprint") != prev.get("blueprint")):
            ax.plot([epoch], [y], marker="x", color="red", markersize=9, markeredgewidth=2.2, zorder=5)
            culled = True
        if isinstance(state, dict) and state.get("stage") not in (None, "DORMANT", "UNKNOWN"):
            stage = str(state["stage"])
            stages.add(stage)
            if not _alive(prev) or state.get("blueprint") != prev.get("blueprint"):
                ax.text(epoch - 0.42, y, str(state.get("blueprint") or ""), fontsize=7, va="center", ha="left",
                        zorder=6, clip_on=True)
            if seg is not None and seg[2] == stage and seg[1] == epoch - 1:
                seg[1] = epoch
            else:
                flush()
                seg = [epoch, epoch, stage]
        else:
            flush()
            seg = None
        prev = state
    flush()
    return stages, culled


def lifecycle_figure(panels: Sequence[tuple[str, Sequence[Track]]], path: Path) -> Path:
    """Per slot, stage colour bands over epochs: one row per slot per track, one panel per group of tracks."""
    panels = [(title, tracks) for title, tracks in panels if tracks] or [("no steps recorded", [])]
    layout = [[(label, rows, _slot_names(rows)) for label, rows in tracks] for _, tracks in panels]
    n_rows = [max(1, sum(len(slots) for _, _, slots in tracks)) for tracks in layout]
    max_epoch = max((int(num(r.get("epoch"))) for tracks in layout for _, rows, _ in tracks for r in rows),
                    default=1)
    fig = Figure(figsize=(max(8.0, min(14.0, 5.0 + 0.3 * max_epoch)), 1.3 + 0.3 * sum(n_rows) + 0.6 * len(panels)),
                 dpi=DPI, layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=n_rows)[:, 0]
    stages: set[str] = set()
    any_cull = False
    for ax, (title, _), tracks in zip(axes, panels, layout):
        y, ticks, labels = 0.0, [], []
        for i, (label, rows, slots) in enumerate(tracks):
            if i:
                ax.axhline(y + 0.5, color="black", linewidth=0.8)
            for slot in slots:
                drawn, culled = _draw_slot_row(ax, rows, slot, y)
                stages |= drawn
                any_cull |= culled
                ticks.append(y)
                labels.append(f"{label} · {slot}")
                y -= 1.0
        ax.set_yticks(ticks, labels, fontsize=8)
        ax.set_ylim(y + 0.5, 0.5)
        ax.set_xlim(0.5, max_epoch + 0.5)
        style(ax, title, "epoch", "")
        ax.grid(True, axis="x", alpha=0.3)
        ax.grid(False, axis="y")
    handles: list[Any] = [Patch(color=STAGE_COLORS[s], label=s) for s in STAGE_ORDER]
    handles += [Patch(color=STAGE_COLORS[s], label=s) for s in sorted(stages - set(STAGE_ORDER))]
    handles.append(Line2D([], [], marker="x", color="red", linestyle="none", markersize=9, markeredgewidth=2.2,
                          label="culled"))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.suptitle("Seed lifecycle per slot (text: blueprint at germination)", fontsize=12)
    return save(fig, path)


def group_tracks(steps: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> dict[tuple[Any, ...], list[dict]]:
    """Step rows grouped by `keys` (e.g. controller, episode, env), each group sorted by epoch, insertion-ordered."""
    groups: dict[tuple[Any, ...], list[dict]] = {}
    for r in steps:
        if not math.isnan(num(r.get("epoch"))):
            groups.setdefault(tuple(r.get(k) for k in keys), []).append(dict(r))
    for rows in groups.values():
        rows.sort(key=lambda r: num(r.get("epoch")))
    return groups


def loss_figure(groups: Mapping[str, Sequence[Mapping[str, Any]]], title: str, path: Path) -> Path:
    """Per group, the mean validation loss (solid) and training loss (dashed) at each epoch over the group's rows."""
    fig, axes = new_figure(10, 5.2)
    ax = axes[0, 0]
    for (label, rows), color in zip(groups.items(), series_colors(len(groups))):
        for key, dash, what in (("val_loss", "-", "val"), ("train_loss", "--", "train")):
            per_epoch: dict[float, list[float]] = {}
            for r in rows:
                value = num(r.get(key))
                if not math.isnan(value):
                    per_epoch.setdefault(num(r.get("epoch")), []).append(value)
            epochs = sorted(e for e in per_epoch if not math.isnan(e))
            ax.plot(epochs, [sum(per_epoch[e]) / len(per_epoch[e]) for e in epochs], linestyle=dash, color=color,
                    linewidth=1.6 if dash == "-" else 1.1, label=f"{label} · {what}")
    style(ax, title, "epoch", "loss")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return save(fig, path)


def final_acc(rows: Sequence[Mapping[str, Any]]) -> str:
    acc = num(rows[-1].get("val_acc")) if rows else math.nan
    return "" if math.isnan(acc) else f" ({acc:.1f}%)"


HEALTH_PANELS = (
    ("Entropy", "nats", ("entropy", "entropy_op", "entropy_slot", "entropy_blueprint", "entropy_blend")),
    ("Approximate KL", "KL (nats)", ("approx_kl",)),
    ("Clip fraction", "fraction of samples clipped", ("clip_fraction",)),
    ("Explained variance", "explained variance (1 = perfect)", ("explained_variance",)),
    ("Probability ratio extremes", "ratio new / old policy", ("ratio_max", "ratio_min")),
    ("Policy loss", "loss", ("policy_loss",)),
    ("Value loss", "loss", ("value_loss",)),
    ("Gradient norm (pre-clip)", "norm", ("grad_norm",)),
)


def ppo_health_figure(hist: Sequence[Mapping[str, Any]], x: Sequence[float], path: Path) -> Path:
    """Small multiples of the PPO update metrics per rollout batch; a metric never recorded says so."""
    # Fixed margins instead of constrained layout: eight panels make the layout solver the slowest part of the report.
    fig, axes = new_figure(15, 7.5, 2, 4, layout=None, sharex=True)
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.08, top=0.9, wspace=0.32, hspace=0.25)
    mk = mark_markers(len(x))
    for ax, (title, ylabel, keys) in zip(axes.flat, HEALTH_PANELS):
        drawn = []
        for i, key in enumerate(keys):
            ys = [num(h.get(key)) for h in hist]
            if not all(math.isnan(y) for y in ys):
                ax.plot(list(x), ys, label=key, linewidth=2.0 if i == 0 else 1.0, **mk)
                drawn.append(key)
        if not drawn:
            ax.text(0.5, 0.5, "not recorded", transform=ax.transAxes, ha="center", va="center", color="#7f7f7f")
            ax.set_yticks([])
        if keys[0] == "ratio_max":
            ax.axhline(1.0, color="black", linewidth=0.6)
        if keys[0] in ("explained_variance", "policy_loss"):
            ax.axhline(0.0, color="black", linewidth=0.6)
        style(ax, title, "rollout batch" if ax in axes[-1] else "", ylabel)
        if len(drawn) > 1 or (drawn and drawn[0] != keys[0]):
            ax.legend(fontsize=7)
    fig.suptitle("PPO update health per rollout batch", fontsize=12)
    return save(fig, path)
