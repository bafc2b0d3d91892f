"""`esper report` for a heuristic run: accuracy curves, losses, lifecycles, actions, rewards and seed parameters."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes

from esper.env.logs import EpisodeResult, StepRow
from esper.report import plots as rp
from esper.report.lifecycle import NO_SEEDS, germinated, lifecycle_figure

MARKED_OPS = {"GERMINATE": ("^", "germinate"), "FOSSILIZE": ("*", "fossilize"), "CULL": ("X", "cull")}


def heuristic_report(steps: list[StepRow], episodes: list[EpisodeResult], out: Path) -> list[Path]:
    eps = sorted(episodes, key=lambda e: e.episode)
    by_ep = rp.group_tracks(steps, lambda r: r.episode)
    keys = sorted(by_ep)
    many = len(keys) > 8
    written = [_accuracy(eps, steps, out / "accuracy.png")]

    loss_groups = {f"mean of {len(keys)} episodes": steps} if many else {f"episode {k}": by_ep[k] for k in keys}
    written.append(rp.loss_figure(loss_groups, "Loss per epoch (solid: validation, dashed: training)",
                                  out / "loss.png"))

    last = keys[-4:]
    title = f"Last {len(last)} episode(s)" if len(keys) > len(last) else "All episodes"
    finals = {e.episode: e.final_accuracy for e in eps}
    written.append(lifecycle_figure([(title, [(f"ep {k}{rp.final_acc(finals.get(k))}", by_ep[k]) for k in last])],
                                    out / "lifecycle.png"))

    fig, axes = rp.new_figure(9, 5)
    counts = {op: [float(e.action_counts.get(op, 0)) for e in eps] for op in rp.op_names([e.action_counts
                                                                                           for e in eps])}
    rp.stacked_shares(axes[0, 0], [e.episode for e in eps], counts)
    rp.style(axes[0, 0], "Actions per episode (labels: share of steps)", "episode", "actions (one per epoch)")
    rp.side_legend(axes[0, 0])
    written.append(rp.save(fig, out / "actions.png"))

    fig, axes = rp.new_figure(10, 5.2)
    comps, total = rp.mean_components([by_ep[k] for k in keys])
    rp.reward_panel(axes[0, 0], keys, comps, total, "episode", "Mean reward components per episode")
    written.append(rp.save(fig, out / "rewards.png"))

    fig, axes = rp.new_figure(10, 5.2)
    _params(axes[0, 0], by_ep, keys, steps)
    written.append(rp.save(fig, out / "params.png"))
    return written


def _accuracy(eps: list[EpisodeResult], steps: Sequence[StepRow], path: Path) -> Path:
    fig, axes = rp.new_figure(10, 5.2)
    ax = axes[0, 0]
    for e, color in zip(eps, rp.series_colors(len(eps))):
        curve = [rp.as_float(v) for v in e.accuracy_curve]
        label = f"episode {e.episode} (final {rp.as_float(e.final_accuracy):.1f}%)"
        show = len(eps) <= 12 or e is eps[0] or e is eps[-1]
        ax.plot(range(1, len(curve) + 1), curve, color=color, linewidth=1.6, label=label if show else None)
    size = 70 if len(eps) <= 4 else 35
    for op, (marker, label) in MARKED_OPS.items():  # successful lifecycle ops as markers on the curves
        pts = [(r.epoch, rp.as_float(r.val_accuracy)) for r in steps if r.op == op and r.success]
        if pts:
            ax.scatter(*zip(*pts), marker=marker, s=size, color=rp.OP_COLORS[op], edgecolor="black", linewidth=0.6,
                       zorder=5, label=label)
    rp.style(ax, "Validation accuracy per episode", "epoch", "validation accuracy (%)")
    rp.side_legend(ax)
    return rp.save(fig, path)


def _params(ax: Axes, by_ep: dict[int, list[StepRow]], keys: list[int], steps: Sequence[StepRow]) -> None:
    many = len(keys) > 8
    for k, color in zip(keys, rp.series_colors(len(keys))):
        rows, show = by_ep[k], len(keys) <= 12 or k in (keys[0], keys[-1])
        ax.step([r.epoch for r in rows], [r.seed_params for r in rows], where="post", color=color,
                linewidth=0.8 if many else 1.6, alpha=0.5 if many else 1.0, label=f"episode {k}" if show else None)
    if many:
        per_epoch: dict[int, list[float]] = {}
        for r in steps:
            per_epoch.setdefault(r.epoch, []).append(float(r.seed_params))
        epochs = sorted(per_epoch)
        ax.step(epochs, [rp.mean(per_epoch[e]) for e in epochs], where="post", color="black", linewidth=2.4,
                label="mean over episodes")
    top = max(r.seed_params for r in steps)
    ax.set_ylim(0, 1.08 * top if top else 1)
    if not top:
        ax.set_yticks([0])
    if not germinated(steps):
        rp.note(ax, NO_SEEDS)
    rp.style(ax, "Seed parameters over time", "epoch", "parameters added by seeds")
    ax.yaxis.set_major_formatter(rp.THOUSANDS)
    rp.side_legend(ax)
