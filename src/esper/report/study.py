"""A study's own figure: final test accuracy against training GFLOPs per episode, with the static host at the widths
the study ran (0.5–2 in a reference study) as the frontier a grown network must lie above to beat widening at equal
compute."""

from __future__ import annotations

import statistics
from pathlib import Path

from matplotlib.figure import Figure

from esper.evaluation.regime import FRONTIER_WIDTHS, static_width_labels
from esper.evaluation.results import ComparisonResult
from esper.evaluation.runs import scores
from esper.report import plots as rp

ROLE_MARKERS = {"(final)": "o", "(init)": "s", "replay": "X"}


def _gflops(result: ComparisonResult, label: str) -> float:
    return result.per_controller[label]["train_flops"]["mean"] / 1e9


def compute_figure(result: ComparisonResult, path: Path) -> Path:
    return rp.save(build_compute_figure(result), path)


def build_compute_figure(result: ComparisonResult) -> Figure:
    """Mean test accuracy (with its 95 % interval) against mean training GFLOPs per episode for every controller; the
    static widths the study ran joined as a curve (its legend names them); each training run's policies as small
    markers by role."""
    fig, axes = rp.new_figure(11.0, 6.5)
    ax = axes[0, 0]
    ran = [(w, s) for w, s in zip(FRONTIER_WIDTHS, static_width_labels(), strict=True) if s in result.controllers]
    statics = [s for _, s in ran]
    if len(statics) > 1:
        xs = [_gflops(result, s) for s in statics]
        ys = [statistics.fmean(scores(result, s)) for s in statics]
        widths = " · ".join(f"{w:g}" for w, _ in ran)
        ax.plot(xs, ys, color="black", linewidth=1.5, marker="D", label=f"static, widths {widths}", zorder=3)
        for x, y, s in zip(xs, ys, statics, strict=True):
            ax.annotate(s, (x, y), textcoords="offset points", xytext=(4, -12), fontsize=8)
    others = [c for c in result.controllers if c not in statics]
    singles = [c for c in others if not any(key in c for key in ROLE_MARKERS)]
    *palette, run_color = rp.series_colors(len(singles) + 1)  # the training runs' markers share no single's colour
    colors = dict(zip(singles, palette, strict=True))
    for label in singles:
        stats = result.per_controller[label]["final_test_accuracy"]
        if stats is None:
            continue
        x, (low, high) = _gflops(result, label), rp.accuracy_interval(*stats["ci95"])
        ax.errorbar([x], [stats["mean"]], yerr=[[stats["mean"] - low], [high - stats["mean"]]], fmt="o",
                    color=colors[label], markersize=7, capsize=3, label=label, zorder=4)
    for key, marker in ROLE_MARKERS.items():
        members = [c for c in others if key in c]
        if members:
            ax.scatter([_gflops(result, c) for c in members], [statistics.fmean(scores(result, c)) for c in members],
                       marker=marker, s=40, facecolor="none" if key == "(init)" else run_color, edgecolor=run_color,
                       label=f"ppo {key.strip('()')} per training run" if key != "replay" else "replay per run",
                       zorder=5)
    rp.style(ax, "Final test accuracy against training compute\npoints: mean over paired seeds · whiskers: 95 % "
             "interval, within [0, 100]\nabove the static curve: better than widening at equal compute",
             "training GFLOPs per episode", "final test accuracy (%)", int_x=False)
    rp.side_legend(ax)
    return fig
