"""The README's headline, rerun on its first 10 evaluation seeds: `esper study --preset synthetic --seeds 10`
(about 50 minutes on one CPU core: the selection of best-fixed and best-rule, training, the evaluation).

On CPU with one intra-op thread the study is deterministic. What the README reports for this preset and seed: the
greedy selection finds that modules in three slots built in from epoch 0 make the best fixed architecture
(`fixed:norm@early,conv_light@mid,depthwise@late`) and that growing two of them at the first chance the lifecycle
allows makes the best scripted rule (`grow:norm@early,conv_light@late`); on the held-out seeds that rule beats static
and the heuristic, and the fixed architecture beats static, the heuristic and the final PPO policy (whose training
run did not learn; the README says so, and this test does not ask it to), and scores above the rule on average. It
fails if a change breaks the fixed hosts, the grow rules, the greedy selection, the modules or the statistics behind
those claims.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from esper.cli.main import main


@pytest.mark.slow
def test_synthetic_study_best_fixed_and_best_rule_beat_static_and_the_heuristic(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the README's numbers were measured with one intra-op thread
    run = tmp_path / "study"
    try:
        assert main(["study", "--preset", "synthetic", "--seeds", "10", "--device", "cpu", "--no-tui",
                     "--no-tensorboard", "--run-dir", str(run)]) == 0
    finally:
        torch.set_num_threads(threads)
    results = json.loads((run / "results.json").read_text())
    assert results["study"]["chosen"] == {"best-fixed": "fixed:norm@early,conv_light@mid,depthwise@late",
                                          "best-rule": "grow:norm@early,conv_light@late"}
    for winner, losers in (("best-fixed", ("static", "heuristic", "ppo (final)")),
                           ("best-rule", ("static", "heuristic"))):
        for loser in losers:
            low, _ = results["pairwise"][winner][loser]["ci95"]
            assert low > 0, (winner, loser, results["pairwise"][winner][loser])
    assert results["pairwise"]["best-fixed"]["best-rule"]["mean_delta"] > 0
