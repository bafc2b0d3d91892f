"""Plot primitives for `esper report`: matplotlib Figures on the Agg canvas, no pyplot state.

Each helper draws one kind of panel from typed rows (`StepRow`, `PPOHistoryRow`) or from plain number series, so the
heuristic, compare and PPO reports share the action-mix, reward, loss, interval and health renderers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import matplotlib

matplotlib.use("Agg")

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from esper.env.logs import StepRow
from esper.env.step_record import SUMMED_FIELDS
from esper.simic.ppo.history import PPOHistoryRow

DPI = 110
OPS = ("WAIT", "GERMINATE", "FOSSILIZE", "CULL")
OP_COLORS = {"WAIT": "#c7c7c7", "GERMINATE": "#1f77b4", "FOSSILIZE": "#2ca02c", "CULL": "#d62728"}
# The reward's summed fields in a fixed order, so each keeps a colour of its own across plots.
REWARD_FIELDS = SUMMED_FIELDS
REWARD_DIAGNOSTICS = frozenset({"family", "attribution_discount", "ratio_penalty", "growth_ratio", "phi_prev",
                                "phi_next", "val_accuracy", "action_name", "action_success", "total"})
_TAB20 = matplotlib.colormaps["tab20"]
THOUSANDS = FuncFormatter(lambda v, _pos: f"{v:,.0f}")
MANY_BARS = 40  # above this many x positions, stacked bars become stacked areas / lines
LEGEND_ROW_INCHES = 0.16  # one side-legend entry at font size 8
BAND_ALPHA = 0.18  # shaded spread bands; low enough that overlapping bands stay readable
MAX_PIXELS = 2000
"""No report image is wider or taller than this, however many controllers a run compares: per-controller figures
draw one row per controller, at most MAX_ROWS of them, and line plots at most MAX_LINES controllers."""
MAX_ROWS = 36
MAX_LINES = 12
ROW_INCHES = 0.3  # one controller's row of bars
K = TypeVar("K", bound=Hashable)


def accuracy_interval(low: float, high: float) -> tuple[float, float]:
    """A t-interval on a mean accuracy, cut to [0, 100]: over a few episodes near a bound the symmetric interval
    reaches past it, where no accuracy can lie (results.json keeps the interval as computed)."""
    return max(low, 0.0), min(high, 100.0)


def pp_text(value: float) -> str:
    """A small quantity in pp (a tie threshold such as one sample's worth, 100/300) at a precision worth reading: at
    most two decimals, or two significant digits below 0.1."""
    return f"{round(value, 2):g}" if value >= 0.1 or value == 0 else f"{value:.2g}"


def as_float(value: float | str | None) -> float:
    """A logged number as a float for plotting; NaN where there is none.

    None is a metric that was not recorded (a skipped PPO update); a string is the marker the run directory writes
    for a non-finite number ("NaN", "Infinity"), which no plot can place either.
    """
    if value is None or isinstance(value, str):
        return math.nan
    return float(value) if math.isfinite(value) else math.nan


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


def side_legend(ax: Axes, fontsize: float = 8) -> None:
    ax.legend(fontsize=fontsize, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)


def note(ax: Axes, text: str, x: float = 0.5, y: float = 0.5, *, data_coords: bool = False) -> None:
    """A boxed remark in the middle of a panel: says in words why the panel has nothing to show."""
    ax.text(x, y, text, transform=ax.transData if data_coords else ax.transAxes, ha="center", va="center",
            fontsize=10, style="italic", color="#555555", zorder=7,
            bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "#aaaaaa"})


def footnote(fig: Figure, text: str) -> None:
    """A remark under the whole figure (e.g. which controllers it leaves out); nothing when `text` is empty."""
    if text:
        fig.supxlabel(text, fontsize=8, style="italic", color="#555555")


def series_colors(n: int) -> list[Any]:
    if n <= 10:
        return [matplotlib.colormaps["tab10"](i) for i in range(n)]
    return [matplotlib.colormaps["viridis"](i / max(n - 1, 1)) for i in range(n)]


# tab20's saturated colours first, then its light ones; grey (14, 15) is left out, it reads as "no data".
_REWARD_PALETTE = [i for i in range(0, 20, 2) if i != 14] + [i for i in range(1, 20, 2) if i != 15]


def reward_color(name: str) -> Any:
    if name in REWARD_FIELDS:
        return _TAB20(_REWARD_PALETTE[REWARD_FIELDS.index(name)])
    return _TAB20(15)


def reward_value(components: Mapping[str, Any], name: str) -> float:
    """One summed reward component; absent means it did not apply (0), a non-number is not a component (NaN)."""
    value = components.get(name, 0.0)
    if isinstance(value, bool) or not isinstance(value, float | int | str):
        return math.nan
    return as_float(value)


def reward_names(component_dicts: Sequence[Mapping[str, Any]]) -> list[str]:
    """Summed reward components that are non-zero somewhere, known fields first (diagnostics and labels skipped)."""
    seen: dict[str, bool] = {}
    for comps in component_dicts:
        for k in comps:
            v = reward_value(comps, k)
            if k not in REWARD_DIAGNOSTICS and not math.isnan(v):
                seen[k] = seen.get(k, False) or v != 0.0
    known = [k for k in REWARD_FIELDS if seen.get(k)]
    return known + sorted(k for k, nonzero in seen.items() if nonzero and k not in REWARD_FIELDS)


def mark_markers(n: int) -> dict[str, Any]:
    return {"marker": "o", "markersize": 4} if n <= 50 else {}


def mean(values: Sequence[float]) -> float:
    """Mean of the finite values (NaN when there are none)."""
    clean = [v for v in values if not math.isnan(v)]
    return sum(clean) / len(clean) if clean else math.nan


def group_tracks(steps: Sequence[StepRow], key: Callable[[StepRow], K]) -> dict[K, list[StepRow]]:
    """Step rows grouped by `key` (e.g. controller, episode, env), each group sorted by epoch, insertion-ordered."""
    groups: dict[K, list[StepRow]] = {}
    for r in steps:
        groups.setdefault(key(r), []).append(r)
    for rows in groups.values():
        rows.sort(key=lambda r: r.epoch)
    return groups


def final_acc(accuracy: float | None) -> str:
    """An episode's final validation accuracy for a track label (the number episodes.jsonl and the tables give; a
    step row holds the accuracy the last decision saw, one epoch earlier)."""
    acc = as_float(accuracy)
    return "" if math.isnan(acc) else f" (final {acc:.1f}%)"


# ---------------------------------------------------------------------------------------------- stacked panels


def stacked_shares(ax: Axes, x: Sequence[float], shares: Mapping[str, Sequence[float]], *, labels: bool = True,
                   width: float = 0.8) -> None:
    """Op shares (or counts) stacked per x: bars for a few x (with % labels), stacked areas for many."""
    ops = [op for op in OPS if op in shares] + [op for op in shares if op not in OPS]
    values = [[0.0 if math.isnan(v) else v for v in shares[op]] for op in ops]
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


def op_names(mappings: Sequence[Mapping[str, Any]]) -> list[str]:
    """The lifecycle ops in canonical order, then any other op a log names."""
    return list(OPS) + sorted({op for m in mappings for op in m if op not in OPS})


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
    side_legend(ax)


def mean_components(groups: Sequence[Sequence[StepRow]]) -> tuple[dict[str, list[float]], list[float]]:
    """Per group of steps: the mean of each summed reward component, and the mean total reward."""
    names = reward_names([r.reward_components for rows in groups for r in rows])
    comps = {n: [mean([reward_value(r.reward_components, n) for r in rows]) for rows in groups] for n in names}
    return comps, [mean([as_float(r.reward) for r in rows]) for rows in groups]


# ---------------------------------------------------------------------------------------------- lines and intervals


def loss_figure(groups: Mapping[str, Sequence[StepRow]], title: str, path: Path, *, note: str = "") -> Path:
    """Per group, the mean validation loss (solid) and training loss (dashed) at each epoch over the group's rows
    (`note`: a footnote, e.g. which groups were left out)."""
    fig, axes = new_figure(10, max(5.2, 1.0 + LEGEND_ROW_INCHES * 2 * len(groups)))  # the legend must fit beside
    ax = axes[0, 0]
    for (label, rows), color in zip(groups.items(), series_colors(len(groups))):
        for pick, dash, what in ((lambda r: r.val_loss, "-", "val"), (lambda r: r.train_loss, "--", "train")):
            per_epoch: dict[int, list[float]] = {}
            for r in rows:
                per_epoch.setdefault(r.epoch, []).append(as_float(pick(r)))
            epochs = sorted(per_epoch)
            ax.plot(epochs, [mean(per_epoch[e]) for e in epochs], linestyle=dash, color=color,
                    linewidth=1.6 if dash == "-" else 1.1, label=f"{label} · {what}")
    style(ax, title, "epoch", "loss")
    side_legend(ax)
    footnote(fig, note)
    return save(fig, path)


def spread_band(ax: Axes, x: Sequence[float], low: Sequence[float], high: Sequence[float], color: Any) -> None:
    """A translucent band with dotted edges, so several overlapping bands stay tellable apart."""
    ax.fill_between(list(x), list(low), list(high), color=color, alpha=BAND_ALPHA, linewidth=0)
    for edge in (low, high):
        ax.plot(list(x), list(edge), color=color, linewidth=0.9, linestyle=":", alpha=0.9)


@dataclass(frozen=True)
class Estimate:
    """A reported mean with its 95 % interval [low, high], the per-episode values behind it, and a caption."""

    label: str
    mean: float
    low: float
    high: float
    points: list[float]
    caption: str = ""


def _interval_rows(ax: Axes, estimates: Sequence[Estimate], colors: Sequence[Any]) -> None:
    """One row per estimate, top down: whiskers for the interval, a thick tick at the mean, the points beneath; the
    label and caption (on one line) name the row. Rows, not columns, so any number of them stays readable."""
    for i, (e, color) in enumerate(zip(estimates, colors)):
        ax.plot([e.low, e.high], [i, i], color="black", linewidth=1.6, zorder=3)
        ax.plot([e.low, e.low, math.nan, e.high, e.high], [i - 0.15, i + 0.15, math.nan, i - 0.15, i + 0.15],
                color="black", linewidth=1.6, zorder=3)
        ax.plot([e.mean, e.mean], [i - 0.3, i + 0.3], color=color, linewidth=4, solid_capstyle="butt", zorder=4)
        n = len(e.points)
        ax.scatter(e.points, [i + 0.3 + 0.1 * (j / max(n - 1, 1)) for j in range(n)], s=14, color=color,
                   edgecolor="black", linewidth=0.5, alpha=0.8, zorder=5)
    ax.set_ylim(len(estimates) - 0.4, -0.6)  # the first estimate on top
    ax.set_yticks(range(len(estimates)), [f"{e.label}\n{e.caption.replace(chr(10), ' · ')}" for e in estimates],
                  fontsize=8)


def rows_height(rows: int, *, row_inches: float = ROW_INCHES, minimum: float = 4.5) -> float:
    """A figure's height for `rows` labelled rows plus titles and axes (at most MAX_ROWS rows are ever drawn)."""
    return max(minimum, 2.2 + row_inches * rows)


def final_accuracy_figure(controllers: Sequence[Estimate], deltas: Sequence[Estimate], *, reference: str,
                          tie_threshold: float, colors: Mapping[str, Any], metric: Literal["test", "validation"],
                          note: str = "") -> Figure:
    """Left: each controller's mean final `metric` ("test" or "validation") accuracy and its 95 % t-interval; right:
    Δ vs the reference with its paired 95 % t-interval, and the tie band (|Δ| below `tie_threshold`). One row per
    controller (`note` says which were left out, if any).

    The intervals are exactly those in results.json. Means are drawn as ticks, not bars, because the accuracy axis
    is zoomed and a bar's length would exaggerate small differences.
    """
    height = rows_height(len(controllers), row_inches=0.42)  # two lines per row: label and caption
    fig, axes = new_figure(15.0 if deltas else 8.0, height, 1, 2 if deltas else 1)
    ax = axes[0, 0]
    _interval_rows(ax, controllers, [colors[e.label] for e in controllers])
    style(ax, f"Final {metric} accuracy per controller\ntick: mean · whiskers: 95 % t-interval of the mean, within "
          "[0, 100]\ndots: episodes", f"final {metric} accuracy (%)", "", int_x=False)
    if deltas:
        ax = axes[0, 1]
        ax.axvspan(-tie_threshold, tie_threshold, color="#7f7f7f", alpha=0.15, linewidth=0,
                   label=f"tie (|Δ| < {pp_text(tie_threshold)} pp)")
        ax.axvline(0.0, color="black", linewidth=0.8)
        _interval_rows(ax, deltas, [colors[e.label] for e in deltas])
        style(ax, f"Δ final {metric} accuracy vs {reference} (paired by episode)\ntick: mean Δ · whiskers: 95 % "
              "paired t-interval\ndots: per-episode Δ", f"Δ final {metric} accuracy (pp)", "", int_x=False)
        ax.legend(fontsize=8, loc="best")
    footnote(fig, note)
    return fig


# ---------------------------------------------------------------------------------------------- PPO health


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


def ppo_health_figure(hist: Sequence[PPOHistoryRow], x: Sequence[float], path: Path) -> Path:
    """Small multiples of the PPO update metrics (`PPOHistoryRow` fields) per rollout batch; unrecorded ones say so."""
    # Fixed margins instead of constrained layout: eight panels make the layout solver the slowest part of the report.
    fig, axes = new_figure(15, 7.5, 2, 4, layout=None, sharex=True)
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.08, top=0.9, wspace=0.32, hspace=0.25)
    mk = mark_markers(len(x))
    skipped = [xi for xi, h in zip(x, hist) if h.skipped_update]
    if x:  # shared by all panels; set before `style` picks integer ticks from it
        axes[0, 0].set_xlim(min(x) - 0.5, max(x) + 0.5)
    for ax, (title, ylabel, keys) in zip(axes.flat, HEALTH_PANELS):
        for xi in skipped:
            ax.axvline(xi, color="#7f7f7f", linewidth=0.8, linestyle="--", alpha=0.7, zorder=1)
        drawn = []
        for i, key in enumerate(keys):
            ys = [as_float(getattr(h, key)) for h in hist]
            if not all(math.isnan(y) for y in ys):
                ax.plot(list(x), ys, label=key, linewidth=2.0 if i == 0 else 1.0, **mk)
                drawn.append(key)
        if not drawn:
            note(ax, "not recorded")
            ax.set_yticks([])
        if keys[0] == "ratio_max":
            ax.axhline(1.0, color="black", linewidth=0.6)
        if keys[0] in ("explained_variance", "policy_loss"):
            ax.axhline(0.0, color="black", linewidth=0.6)
        style(ax, title, "rollout batch" if ax in axes[-1] else "", ylabel)
        if len(drawn) > 1 or (drawn and drawn[0] != keys[0]):
            ax.legend(fontsize=7)
    fig.suptitle("PPO update health per rollout batch" + (" (dashed grey: update skipped, no metrics)" if skipped
                                                          else ""), fontsize=12)
    return save(fig, path)
