"""`esper report` for a comparison: final accuracy with the intervals results.json reports, curves, params, actions.

The final-accuracy figure is on the comparison's primary metric: final test accuracy when its pairs were compared on
it (every episode was scored on the test split), final validation accuracy otherwise. Every interval drawn is one
that results.json holds (or a spread labelled as such): per controller the 95 % t-interval of its mean, per
challenger the paired 95 % t-interval of its mean Δ against the reference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from matplotlib.axes import Axes

from esper.env.logs import EpisodeResult, StepRow
from esper.evaluation.comparison import ComparisonResult
from esper.evaluation.stats import mean_std
from esper.report import plots as rp
from esper.report.lifecycle import lifecycle_figure


def primary_metric(result: ComparisonResult) -> Literal["test", "validation"]:
    """"test" when every challenger was compared with the reference on final test accuracy (so every controller was
    scored on the test split in every episode; a lone controller: when it was), else "validation"."""
    ref = result.reference
    pairs = [result.pairwise[c][ref] for c in result.controllers if c != ref]
    if pairs:
        tested = all(p["metric"] == "test_accuracy" for p in pairs)
    else:
        tested = result.per_controller[ref]["final_test_accuracy"] is not None
    return "test" if tested else "validation"


def shown_controllers(result: ComparisonResult, limit: int) -> tuple[list[str], str]:
    """At most `limit` controllers in the result's order: the reference and the best others by mean final accuracy
    on the primary metric; and a note saying what was left out ("" when nothing was)."""
    labels = result.controllers
    if len(labels) <= limit:
        return list(labels), ""
    test = primary_metric(result) == "test"

    def score(c: str) -> float:
        stats = result.per_controller[c]
        summary = stats["final_test_accuracy"] if test else stats["final_accuracy"]
        value = math.nan if summary is None else rp.as_float(summary["mean"])
        return -math.inf if math.isnan(value) else value  # a controller without a score ranks last

    best = sorted((c for c in labels if c != result.reference), key=score, reverse=True)[:limit - 1]
    kept = {result.reference, *best}
    return [c for c in labels if c in kept], (
        f"{limit} of {len(labels)} controllers shown:\n{result.reference} and the {limit - 1} best by mean final "
        f"{primary_metric(result)} accuracy\n(results.json holds every one)")


def final_accuracy_estimates(result: ComparisonResult, shown: Sequence[str] | None = None
                             ) -> tuple[list[rp.Estimate], list[rp.Estimate]]:
    """(per-controller mean and CI, per-challenger Δ vs the reference and its paired CI), as in results.json, on the
    primary metric (`primary_metric`), for the `shown` controllers (default all): the per-episode points are the same
    scores the intervals were computed from."""
    by = _episodes_by_controller(result)
    ref = result.reference
    test = primary_metric(result) == "test"
    shown = result.controllers if shown is None else shown

    def score(e: EpisodeResult) -> float:
        return rp.as_float(e.final_test_accuracy if test else e.final_accuracy)

    controllers = []
    for c in shown:
        stats = result.per_controller[c]
        fa = stats["final_test_accuracy"] if test else stats["final_accuracy"]
        assert fa is not None  # test is the metric only when every controller has a test summary
        low, high = rp.accuracy_interval(*fa["ci95"])
        controllers.append(rp.Estimate(c, fa["mean"], low, high, [score(e) for e in by[c]],
                                       f"{fa['mean']:.2f} % [{low:.2f}, {high:.2f}]"))
    deltas = []
    for c in shown:
        if c == ref:
            continue
        p = result.pairwise[c][ref]
        low, high = p["ci95"]
        ref_acc = {e.episode: score(e) for e in by[ref]}
        points = [score(e) - ref_acc[e.episode] for e in by[c] if e.episode in ref_acc]
        deltas.append(rp.Estimate(c, p["mean_delta"], low, high, points,
                                  f"{p['mean_delta']:+.2f} pp [{low:+.2f}, {high:+.2f}]\n"
                                  f"W/L/T {p['wins']}/{p['losses']}/{p['ties']}\n{p['verdict']}"))
    return controllers, deltas


def compare_report(result: ComparisonResult, steps: list[StepRow], out: Path) -> list[Path]:
    """The comparison's PNGs. However many controllers it compares, each image stays within rp.MAX_PIXELS: figures
    with a row per controller show at most rp.MAX_ROWS of them, line plots at most rp.MAX_LINES, each saying so."""
    colors = dict(zip(result.controllers, rp.series_colors(len(result.controllers))))
    rows, rows_note = shown_controllers(result, rp.MAX_ROWS)
    lines, lines_note = shown_controllers(result, rp.MAX_LINES)
    controllers, deltas = final_accuracy_estimates(result, rows)
    fig = rp.final_accuracy_figure(controllers, deltas, reference=result.reference,
                                   tie_threshold=result.tie_threshold, colors=colors, metric=primary_metric(result),
                                   note=rows_note)
    written = [rp.save(fig, out / "compare_final_accuracy.png")]

    fig, axes = rp.new_figure(10, 5.2)
    _curves(axes[0, 0], result, lines, colors)
    rp.footnote(fig, lines_note)
    written.append(rp.save(fig, out / "compare_curves.png"))
    by_controller = {c: [r for r in steps if r.controller == c] for c in lines}
    written.append(rp.loss_figure(by_controller, "Loss per epoch, mean over episodes (solid: validation, dashed: "
                                  "training)", out / "compare_loss.png", note=lines_note))

    fig, axes = rp.new_figure(14, rp.rows_height(len(rows)), 1, 2)
    _params(axes[0, 0], axes[0, 1], result, rows, colors)
    rp.footnote(fig, rows_note)
    written.append(rp.save(fig, out / "compare_params.png"))

    fig, axes = rp.new_figure(9, rp.rows_height(len(rows)))
    _actions(axes[0, 0], result, rows)
    rp.footnote(fig, rows_note)
    written.append(rp.save(fig, out / "compare_actions.png"))

    groups = rp.group_tracks(steps, lambda r: (r.controller, r.episode, r.env))
    first: dict[str, tuple[str, int, int]] = {}
    for key in sorted(groups, key=lambda k: k[1]):
        first.setdefault(key[0], key)
    order = [c for c in lines if c in first] + [c for c in first if c not in result.controllers]
    finals = {(e.controller, e.episode): e.final_accuracy for e in result.episodes}
    tracks = [(f"{c} ep {first[c][1]}{rp.final_acc(finals.get((c, first[c][1])))}", groups[first[c]])
              for c in order]
    title = "First episode of each controller" + (f"\n{lines_note}" if lines_note else "")
    written.append(lifecycle_figure([(title, tracks)], out / "lifecycle.png"))
    return written


def _episodes_by_controller(result: ComparisonResult) -> dict[str, list[EpisodeResult]]:
    return {c: sorted((e for e in result.episodes if e.controller == c), key=lambda e: e.episode)
            for c in result.controllers}


def _curves(ax: Axes, result: ComparisonResult, shown: Sequence[str], colors: dict[str, Any]) -> None:
    """The reported mean curve per controller, with the population std across episodes (the std results.json uses)."""
    by = _episodes_by_controller(result)
    for c in shown:
        curve = [rp.as_float(v) for v in result.per_controller[c]["accuracy_curve_mean"]]
        spread = [mean_std([rp.as_float(e.accuracy_curve[i]) for e in by[c]])["std"] for i in range(len(curve))]
        epochs = list(range(1, len(curve) + 1))
        ax.plot(epochs, curve, color=colors[c], linewidth=1.8, label=f"{c} (n={len(by[c])})")
        if len(by[c]) > 1:
            rp.spread_band(ax, epochs, [m - s for m, s in zip(curve, spread)], [m + s for m, s in zip(curve, spread)],
                           colors[c])
    rp.style(ax, "Validation accuracy per epoch\n(line: mean over episodes, band: ± 1 std across episodes, a spread "
             "not a CI)", "epoch", "validation accuracy (%)")
    ax.legend(fontsize=9, loc="lower right")


def _controller_rows(ax: Axes, labels: Sequence[str]) -> None:
    """One row per controller, the first on top."""
    ax.set_yticks(range(len(labels)), labels, fontsize=9)
    ax.set_ylim(len(labels) - 0.4, -0.6)


def _params(ax: Axes, seeds_ax: Axes, result: ComparisonResult, shown: Sequence[str], colors: dict[str, Any]) -> None:
    per = result.per_controller
    by = _episodes_by_controller(result)
    ys = list(range(len(shown)))
    params = [per[c]["params_added"] for c in shown]
    ax.barh(ys, [p["mean"] for p in params], 0.6, xerr=[p["std"] for p in params], capsize=4,
            color=[colors[c] for c in shown], alpha=0.85, edgecolor="black")
    for i, c in enumerate(shown):
        n = len(by[c])
        ax.scatter([e.params_added for e in by[c]], [i + 0.3 + 0.1 * (j / max(n - 1, 1)) for j in range(n)], s=14,
                   color=colors[c], edgecolor="black", linewidth=0.5, zorder=4)
    ax.xaxis.set_major_formatter(rp.THOUSANDS)
    rp.style(ax, "Parameters added by seeds\n(bar: mean, whiskers: ± 1 std across episodes, dots: episodes)",
             "parameters", "", int_x=False)
    _controller_rows(ax, shown)
    seeds = (("created", "#1f77b4", [per[c]["seeds_created"] for c in shown]),
             ("fossilized", "#2ca02c", [per[c]["seeds_fossilized"] for c in shown]),
             ("culled", "#d62728", [per[c]["seeds_culled"] for c in shown]))
    for j, (what, color, values) in enumerate(seeds):
        seeds_ax.barh([i + (j - 1) * 0.26 for i in ys], values, 0.26, color=color, label=what)
    rp.style(seeds_ax, "Seeds per episode (mean)", "seeds per episode", "", int_x=False)
    _controller_rows(seeds_ax, shown)
    seeds_ax.legend(fontsize=9)


def _actions(ax: Axes, result: ComparisonResult, shown: Sequence[str]) -> None:
    """Each controller's share of steps per op, as one stacked horizontal bar."""
    mixes = [result.per_controller[c]["action_mix"] for c in shown]
    left = [0.0] * len(shown)
    for op in rp.op_names(mixes):
        shares = [100 * mix.get(op, 0.0) for mix in mixes]
        ax.barh(range(len(shown)), shares, 0.6, left=left, label=op, color=rp.OP_COLORS.get(op, "#7f7f7f"),
                edgecolor="white", linewidth=0.5)
        for i, (share, start) in enumerate(zip(shares, left)):
            if share >= 8:
                ax.text(start + share / 2, i, f"{share:.0f}%", ha="center", va="center", fontsize=8)
        left = [a + b for a, b in zip(left, shares)]
    rp.style(ax, "Action mix per controller", "share of steps (%)", "", int_x=False)
    _controller_rows(ax, shown)
    rp.side_legend(ax)
