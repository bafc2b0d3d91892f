"""`esper report` for a comparison: final accuracy with the intervals results.json reports, curves, params, actions.

The final-accuracy figure is on the comparison's primary metric: final test accuracy when its pairs were compared on
it (every episode was scored on the test split), final validation accuracy otherwise. Every interval drawn is one
that results.json holds (or a spread labelled as such): per controller the 95 % t-interval of its mean, per
challenger the paired 95 % t-interval of its mean Δ against the reference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from matplotlib.axes import Axes

from esper.cli import report_plots as rp
from esper.cli.report_lifecycle import lifecycle_figure
from esper.env.logs import EpisodeResult, StepRow
from esper.evaluation.comparison import ComparisonResult
from esper.evaluation.stats import mean_std


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


def final_accuracy_estimates(result: ComparisonResult) -> tuple[list[rp.Estimate], list[rp.Estimate]]:
    """(per-controller mean and CI, per-challenger Δ vs the reference and its paired CI), as in results.json, on the
    primary metric (`primary_metric`): the per-episode points are the same scores the intervals were computed from."""
    by = _episodes_by_controller(result)
    ref = result.reference
    test = primary_metric(result) == "test"

    def score(e: EpisodeResult) -> float:
        return rp.as_float(e.final_test_accuracy if test else e.final_accuracy)

    controllers = []
    for c in result.controllers:
        stats = result.per_controller[c]
        fa = stats["final_test_accuracy"] if test else stats["final_accuracy"]
        assert fa is not None  # test is the metric only when every controller has a test summary
        low, high = fa["ci95"]
        controllers.append(rp.Estimate(c, fa["mean"], low, high, [score(e) for e in by[c]],
                                       f"{fa['mean']:.2f} % [{low:.2f}, {high:.2f}]"))
    deltas = []
    for c in result.controllers[1:]:
        p = result.pairwise[c][ref]
        low, high = p["ci95"]
        ref_acc = {e.episode: score(e) for e in by[ref]}
        points = [score(e) - ref_acc[e.episode] for e in by[c] if e.episode in ref_acc]
        deltas.append(rp.Estimate(c, p["mean_delta"], low, high, points,
                                  f"{p['mean_delta']:+.2f} pp [{low:+.2f}, {high:+.2f}]\n"
                                  f"W/L/T {p['wins']}/{p['losses']}/{p['ties']}\n{p['verdict']}"))
    return controllers, deltas


def compare_report(result: ComparisonResult, steps: list[StepRow], out: Path) -> list[Path]:
    labels = result.controllers
    colors = dict(zip(labels, rp.series_colors(len(labels))))
    controllers, deltas = final_accuracy_estimates(result)
    fig = rp.final_accuracy_figure(controllers, deltas, reference=result.reference,
                                   tie_threshold=result.tie_threshold, colors=colors, metric=primary_metric(result))
    written = [rp.save(fig, out / "compare_final_accuracy.png")]

    fig, axes = rp.new_figure(10, 5.2)
    _curves(axes[0, 0], result, colors)
    written.append(rp.save(fig, out / "compare_curves.png"))
    by_controller = {c: [r for r in steps if r.controller == c] for c in labels}
    written.append(rp.loss_figure(by_controller, "Loss per epoch, mean over episodes (solid: validation, dashed: "
                                  "training)", out / "compare_loss.png"))

    fig, axes = rp.new_figure(max(10.0, 2.2 * len(labels) + 5), 5, 1, 2)
    _params(axes[0, 0], axes[0, 1], result, colors)
    written.append(rp.save(fig, out / "compare_params.png"))

    fig, axes = rp.new_figure(max(6.5, 1.4 * len(labels) + 3.5), 5)
    xs = list(range(len(labels)))
    mixes = [result.per_controller[c]["action_mix"] for c in labels]
    rp.stacked_shares(axes[0, 0], xs, {op: [100 * mix.get(op, 0.0) for mix in mixes] for op in rp.op_names(mixes)},
                      width=0.6)
    axes[0, 0].set_xticks(xs, labels)
    rp.style(axes[0, 0], "Action mix per controller", "controller", "share of steps (%)", int_x=False)
    rp.side_legend(axes[0, 0])
    written.append(rp.save(fig, out / "compare_actions.png"))

    groups = rp.group_tracks(steps, lambda r: (r.controller, r.episode, r.env))
    first: dict[str, tuple[str, int, int]] = {}
    for key in sorted(groups, key=lambda k: k[1]):
        first.setdefault(key[0], key)
    order = [c for c in labels if c in first] + [c for c in first if c not in labels]
    finals = {(e.controller, e.episode): e.final_accuracy for e in result.episodes}
    tracks = [(f"{c} ep {first[c][1]}{rp.final_acc(finals.get((c, first[c][1])))}", groups[first[c]])
              for c in order]
    written.append(lifecycle_figure([("First episode of each controller", tracks)], out / "lifecycle.png"))
    return written


def _episodes_by_controller(result: ComparisonResult) -> dict[str, list[EpisodeResult]]:
    return {c: sorted((e for e in result.episodes if e.controller == c), key=lambda e: e.episode)
            for c in result.controllers}


def _curves(ax: Axes, result: ComparisonResult, colors: dict[str, Any]) -> None:
    """The reported mean curve per controller, with the population std across episodes (the std results.json uses)."""
    by = _episodes_by_controller(result)
    for c in result.controllers:
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


def _params(ax: Axes, seeds_ax: Axes, result: ComparisonResult, colors: dict[str, Any]) -> None:
    labels, per = result.controllers, result.per_controller
    by = _episodes_by_controller(result)
    xs = list(range(len(labels)))
    params = [per[c]["params_added"] for c in labels]
    ax.bar(xs, [p["mean"] for p in params], 0.6, yerr=[p["std"] for p in params], capsize=6,
           color=[colors[c] for c in labels], alpha=0.85, edgecolor="black")
    for i, c in enumerate(labels):
        n = len(by[c])
        ax.scatter([i + 0.36 + 0.1 * (j / max(n - 1, 1)) for j in range(n)], [e.params_added for e in by[c]], s=16,
                   color=colors[c], edgecolor="black", linewidth=0.5, zorder=4)
    ax.set_xticks(xs, labels)
    ax.yaxis.set_major_formatter(rp.THOUSANDS)
    rp.style(ax, "Parameters added by seeds\n(bar: mean, whiskers: ± 1 std across episodes, dots: episodes)",
             "controller", "parameters", int_x=False)
    seeds = (("created", "#1f77b4", [per[c]["seeds_created"] for c in labels]),
             ("fossilized", "#2ca02c", [per[c]["seeds_fossilized"] for c in labels]),
             ("culled", "#d62728", [per[c]["seeds_culled"] for c in labels]))
    for j, (what, color, values) in enumerate(seeds):
        seeds_ax.bar([i + (j - 1) * 0.26 for i in xs], values, 0.26, color=color, label=what)
    seeds_ax.set_xticks(xs, labels)
    rp.style(seeds_ax, "Seeds per episode (mean)", "controller", "seeds per episode", int_x=False)
    seeds_ax.legend(fontsize=9)
