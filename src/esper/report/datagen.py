"""`esper report` for a datagen directory: per behaviour policy, the op mix, the episode returns and seed outcomes.

An offline dataset is only as useful as its behaviour is varied: these plots show at a glance whether the policies
really act differently (op mix), what their choices earned against the static twin (returns), and whether seeds
reach every end of their lifecycle (fossilized, culled, or still alive at the end).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from esper.datagen.reader import read_episodes
from esper.report import plots as rp

OUTCOMES = ("fossilized", "culled", "alive at the end")
OUTCOME_COLORS = {"fossilized": rp.OP_COLORS["FOSSILIZE"], "culled": rp.OP_COLORS["CULL"],
                  "alive at the end": rp.OP_COLORS["GERMINATE"]}


def by_policy(episodes: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Episodes grouped by behaviour policy id, policies in name order."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for e in episodes:
        groups.setdefault(str(e["behavior_policy"]["policy_id"]), []).append(e)
    return dict(sorted(groups.items()))


def seed_outcomes(episode: Mapping[str, Any]) -> dict[str, int]:
    """How the episode's seeds ended: fossilized, culled, or still alive (not yet fossilized) at the end."""
    alive = sum(1 for stage in (episode.get("final_seed_stages") or {}).values()
                if stage is not None and stage != "FOSSILIZED")
    return {"fossilized": int(episode["total_seeds_fossilized"]), "culled": int(episode["total_seeds_culled"]),
            "alive at the end": alive}


def datagen_report(directory: Path, out: Path) -> list[Path]:
    """Write actions.png, returns.png and lifecycle.png for the dataset in `directory`."""
    groups = by_policy(read_episodes(directory))
    names = list(groups)
    x = list(range(len(names)))
    written = []

    fig, axes = rp.new_figure(max(9.0, 0.9 * len(names) + 4), 5.5)
    ax = axes[0, 0]
    counts = {op: [float(sum(e["action_counts"].get(op, 0) for e in groups[n])) for n in names]
              for op in rp.op_names([e["action_counts"] for g in groups.values() for e in g])}
    rp.stacked_shares(ax, x, counts)
    ax.set_xticks(x, names, rotation=35, ha="right")
    rp.style(ax, "Op mix per behaviour policy (labels: share of decisions)", "behaviour policy", "decisions",
             int_x=False)
    rp.side_legend(ax)
    written.append(rp.save(fig, out / "actions.png"))

    fig, axes = rp.new_figure(max(9.0, 0.9 * len(names) + 4), 5.5)
    ax = axes[0, 0]
    for i, (name, color) in enumerate(zip(names, rp.series_colors(len(names)))):
        returns = [rp.as_float(e["total_return"]) for e in groups[name]]
        ax.scatter([i] * len(returns), returns, color=color, alpha=0.6, s=28, zorder=3)
        ax.hlines(rp.mean(returns), i - 0.3, i + 0.3, color="black", linewidth=2.2, zorder=4)
    ax.axhline(0.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xticks(x, names, rotation=35, ha="right")
    rp.style(ax, "Episode return (gap reward: lead over the static twin − parameter and action costs); "
             "bar: mean", "behaviour policy", "return (pp)", int_x=False)
    written.append(rp.save(fig, out / "returns.png"))

    fig, axes = rp.new_figure(max(9.0, 0.9 * len(names) + 4), 5.5)
    ax = axes[0, 0]
    per_episode = {o: [rp.mean([float(seed_outcomes(e)[o]) for e in groups[n]]) for n in names] for o in OUTCOMES}
    bottom = [0.0] * len(names)
    for outcome in OUTCOMES:
        ax.bar(x, per_episode[outcome], 0.7, bottom=bottom, label=outcome, color=OUTCOME_COLORS[outcome],
               edgecolor="white", linewidth=0.5)
        bottom = [b + v for b, v in zip(bottom, per_episode[outcome])]
    if not any(bottom):
        rp.note(ax, "no seed was germinated in any episode")
    ax.set_xticks(x, names, rotation=35, ha="right")
    rp.style(ax, "Seeds per episode by how they ended", "behaviour policy", "seeds per episode (mean)", int_x=False)
    rp.side_legend(ax)
    written.append(rp.save(fig, out / "lifecycle.png"))
    return written
