"""The closing summary of `esper datagen`: per environment and behaviour policy, what the episodes did and earned."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.markup import escape
from rich.table import Table

from esper.cli.common import console
from esper.evaluation.stats import mean_std


def _mean(values: Sequence[float]) -> str:
    stats = mean_std(values)
    return f"{stats['mean']:+.2f} ± {stats['std']:.2f}" if len(values) > 1 else f"{stats['mean']:+.2f}"


def print_summary(episodes: Sequence[Mapping[str, Any]], summary: Mapping[str, Any],
                  failures: Mapping[str, str]) -> None:
    """A table per (environment, policy) of the dataset's episodes, the run's throughput, and any failures."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for e in episodes:
        groups.setdefault((e["environment"]["config_id"], e["behavior_policy"]["policy_id"]), []).append(e)
    table = Table(title=f"Dataset: {len(episodes)} episodes, {sum(e['episode_length'] for e in episodes)} decisions")
    for column in ("environment", "policy", "episodes", "final acc %", "gap to twin pp", "return (gap)",
                   "germinated", "fossilized", "culled"):
        table.add_column(column, justify="left" if column in ("environment", "policy") else "right")
    for (env, policy), group in groups.items():
        table.add_row(env, policy, str(len(group)),
                      _mean([float(e["final_accuracy"]) for e in group]),
                      _mean([float(e["final_gap"]) for e in group]),
                      _mean([float(e["total_return"]) for e in group]),
                      str(sum(int(e["total_seeds_created"]) for e in group)),
                      str(sum(int(e["total_seeds_fossilized"]) for e in group)),
                      str(sum(int(e["total_seeds_culled"]) for e in group)))
    if groups:
        console.print(table)
    wall, generated = float(summary["wall_s"]), int(summary["generated"])
    rate = f", {3600.0 * generated / wall:.1f} episodes/hour" if generated and wall > 0 else ""
    console.print(f"Generated {generated} episode(s) in {wall / 60:.1f} min{rate}; {summary['completed']} of "
                  f"{summary['total_planned']} complete, {summary['failed']} failed permanently.")
    for episode_id, error in failures.items():
        console.print(f"  [red]failed[/red] {episode_id}: {escape(error.splitlines()[0])}", highlight=False)
    if failures:
        console.print("Rerun the same command with --retry-failed to try the failed episodes again.")
