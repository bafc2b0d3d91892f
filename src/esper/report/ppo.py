"""`esper report` for a PPO run: accuracy per batch, losses, lifecycles, action shares, rewards and update health."""

from __future__ import annotations

import math
from pathlib import Path

from esper.env.logs import EpisodeResult, StepRow
from esper.report import plots as rp
from esper.report.lifecycle import Track, lifecycle_figure
from esper.simic.ppo.history import PPOHistoryRow

LIFECYCLE_ENVS = 4  # envs shown per lifecycle panel; more rows would be unreadable


def ppo_report(history: list[PPOHistoryRow], steps: list[StepRow], episodes: list[EpisodeResult],
               out: Path) -> list[Path]:
    hist = sorted(history, key=lambda h: h.batch)
    x = [h.batch for h in hist]
    written = [_accuracy(hist, episodes, out / "accuracy.png")]

    batches = sorted({r.batch for r in steps})
    loss_groups = {f"batch {b}": [r for r in steps if r.batch == b] for b in dict.fromkeys(batches[:1] + batches[-1:])}
    written.append(rp.loss_figure(loss_groups, "Loss per epoch in the first and last rollout batch, mean over envs "
                                  "(solid: validation, dashed: training)", out / "loss.png"))
    written.append(lifecycle_figure(_lifecycle_panels(hist, steps, episodes), out / "lifecycle.png"))

    fig, axes = rp.new_figure(10, 5)
    shares = {op: [100 * h.action_shares.get(op, 0.0) for h in hist]
              for op in rp.op_names([h.action_shares for h in hist])}
    rp.stacked_shares(axes[0, 0], x, shares, labels=len(x) <= 8)
    rp.style(axes[0, 0], "Action shares per rollout batch", "rollout batch", "share of steps (%)")
    axes[0, 0].set_ylim(0, 100)
    rp.side_legend(axes[0, 0])
    written.append(rp.save(fig, out / "actions.png"))

    fig, axes = rp.new_figure(10, 5.2)
    comp_rows = [h.reward_components for h in hist]
    names = rp.reward_names(comp_rows)
    comps = {n: [rp.reward_value(c, n) for c in comp_rows] for n in names}
    total = [sum(comps[n][i] for n in names) for i in range(len(hist))]
    rp.reward_panel(axes[0, 0], x, comps, total, "rollout batch", "Mean reward components per rollout batch")
    written.append(rp.save(fig, out / "rewards.png"))

    written.append(rp.ppo_health_figure(hist, x, out / "ppo_health.png"))
    return written


def _accuracy(hist: list[PPOHistoryRow], episodes: list[EpisodeResult], path: Path) -> Path:
    fig, axes = rp.new_figure(10, 5.2)
    ax = axes[0, 0]
    x = [h.batch for h in hist]
    ax.scatter([e.batch for e in episodes], [rp.as_float(e.final_accuracy) for e in episodes], s=12,
               color="#7f7f7f", alpha=0.5, label="episode final accuracy", zorder=2)
    ax.plot(x, [rp.as_float(h.avg_accuracy) for h in hist], color="#1f77b4", linewidth=1.5, label="batch mean",
            zorder=3, **rp.mark_markers(len(x)))
    ax.plot(x, [rp.as_float(h.rolling_accuracy) for h in hist], color="#d62728", linewidth=2.2,
            label="rolling mean", zorder=4)
    rp.style(ax, "Accuracy per rollout batch", "rollout batch", "final validation accuracy (%)")
    ax.legend(fontsize=9, loc="best")
    return rp.save(fig, path)


def _lifecycle_panels(hist: list[PPOHistoryRow], steps: list[StepRow], episodes: list[EpisodeResult]
                      ) -> list[tuple[str, list[Track]]]:
    """The last batch and the best one (highest batch-mean accuracy), one track per env (the first few)."""
    by_batch = rp.group_tracks(steps, lambda r: (r.batch, r.env))
    finals = {(e.batch, e.env_id): e.final_accuracy for e in episodes}
    batches = sorted({b for b, _ in by_batch})
    acc = {h.batch: rp.as_float(h.avg_accuracy) for h in hist}
    scored = [b for b in batches if b in acc and not math.isnan(acc[b])]
    best = max(scored, key=lambda b: acc[b]) if scored else batches[-1]
    chosen = [(f"Last batch ({batches[-1]})", batches[-1])]
    if best == batches[-1]:
        chosen = [(f"Last batch = best batch ({best})", best)]
    else:
        chosen.append((f"Best batch ({best})", best))
    panels = []
    for title, b in chosen:
        keys = sorted(k for k in by_batch if k[0] == b)
        shown = keys[:LIFECYCLE_ENVS]
        more = f", first {len(shown)} of {len(keys)} envs" if len(keys) > len(shown) else ""
        avg = f"{acc[b]:.1f}%" if b in acc else "n/a"
        panels.append((f"{title}: avg accuracy {avg}{more}",
                       [(f"env {k[1]}{rp.final_acc(finals.get(k))}", by_batch[k]) for k in shown]))
    return panels
