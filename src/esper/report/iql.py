"""`esper report` for an IQL run: its learning curves (losses, advantage weights, agreement with the logged actions,
values of the logged and the chosen actions) per training epoch."""

from __future__ import annotations

from pathlib import Path

from esper.report import plots as rp
from esper.simic.iql.history import IQLHistoryRow


def iql_report(history: list[IQLHistoryRow], out: Path) -> list[Path]:
    rows = sorted(history, key=lambda r: r.epoch)
    x = [r.epoch for r in rows]
    fig, axes = rp.new_figure(12, 8, 2, 2)
    panels = [
        (axes[0, 0], "Losses", "loss", {"value (expectile)": [r.v_loss for r in rows],
                                        "critics (TD)": [r.q_loss for r in rows],
                                        "policy (weighted)": [r.policy_loss for r in rows]}),
        (axes[0, 1], "Advantage weights", "weight / share", {"mean weight": [r.mean_weight for r in rows],
                                                             "share clipped": [r.frac_weight_clipped for r in rows]}),
        (axes[1, 0], "Agreement with the logged actions", "share of states",
         {"argmax = logged action": [r.agreement for r in rows]}),
        (axes[1, 1], "Values (mean min-Q)", "Q", {"at the logged actions": [r.q_behavior for r in rows],
                                                  "at the policy's argmax": [r.q_policy for r in rows]}),
    ]
    for ax, title, ylabel, series in panels:
        for (label, values), color in zip(series.items(), rp.series_colors(len(series)), strict=True):
            ax.plot(x, [rp.as_float(v) for v in values], label=label, color=color, linewidth=1.6,
                    **rp.mark_markers(len(x)))
        rp.style(ax, title, "training epoch", ylabel)
        ax.legend(fontsize=8, loc="best")
    return [rp.save(fig, out / "learning.png")]
