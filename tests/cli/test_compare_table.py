"""The comparison table a terminal shows: at 80 columns nothing is cut, and the short words are explained."""

from __future__ import annotations

import pytest
from rich.console import Console

from esper.cli.compare import comparison_table
from esper.env import EpisodeResult
from esper.evaluation.results import ComparisonResult

LABELS = ("static", "static:matched", "heuristic", "best-fixed", "best-rule", "ppo (init)", "ppo (final)")


def _episode(controller: str, episode: int, accuracy: float) -> EpisodeResult:
    return EpisodeResult(controller=controller, env_id=0, episode=episode, batch=0, env_seed=episode, host_width=1.0,
                         host_params=6418, final_accuracy=accuracy, final_loss=1.0, twin_final_accuracy=None,
                         twin_final_loss=None, best_accuracy=accuracy, seeds_created=13, seeds_fossilized=1,
                         seeds_culled=10, params_added=12345,
                         action_counts={"WAIT": 20, "GERMINATE": 2, "FOSSILIZE": 1, "CULL": 1},
                         accuracy_curve=[accuracy], total_reward=0.0, rollbacks=0, final_test_accuracy=accuracy + 1,
                         final_test_loss=1.0, train_flops=10**10, wall_seconds=1.0)


@pytest.mark.parametrize("width", [80, 160])
def test_the_table_fits_the_terminal_without_cutting_anything(width: int) -> None:
    means = {"static": 34.4, "static:matched": 34.2, "heuristic": 34.7, "best-fixed": 47.5, "best-rule": 34.9,
             "ppo (init)": 30.9, "ppo (final)": 40.7}
    episodes = [_episode(label, e, means[label] + (e % 3) * (i % 2)) for i, label in enumerate(LABELS)
                for e in range(5)]
    result = ComparisonResult.from_episodes(list(LABELS), episodes, tie_threshold=0.05, seed=0)
    console = Console(width=width, record=True)
    console.print(comparison_table(result))
    text = console.export_text()
    assert "…" not in text
    assert all(len(line) <= width for line in text.splitlines())
    rows = {label: next((line for line in text.splitlines() if line.startswith(f"{label} ")), "") for label in LABELS}
    for label, row in rows.items():
        assert row, label  # the whole name starts its row
    assert "n.s.: no" in text and "W/L/T: wins/losses/ties" in text  # the legend of the short words
    assert "better" in rows["ppo (final)"] and "worse" in rows["ppo (init)"]


def test_an_unfinished_comparison_says_so_above_the_table() -> None:
    episodes = [_episode(label, e, 40.0 + e) for label in LABELS[:3] for e in range(2)]
    result = ComparisonResult.from_episodes(list(LABELS[:3]), episodes, tie_threshold=0.05, seed=0, planned=20)
    console = Console(width=120, record=True)
    console.print(comparison_table(result))
    assert "incomplete: 2 of 20 paired episodes (rerun the command" in console.export_text()
