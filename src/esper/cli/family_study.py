"""`esper study --family NAME`: a policy trained across a task family's training types, measured on its held-out
types against everything chosen without seeing them, beginning with the family's pre-check.

    esper study --family synthetic-shift-v1                      # pre-check, references, K runs, held-out results
    esper study --family synthetic-shift-v1 --runs 2             # fewer training runs (default: the preset's)
    esper study --family synthetic-shift-v1 --selection-seeds 2  # fewer selection seeds per search
    esper study --family synthetic-shift-v1 --ignore-precheck    # go on even where the pre-check refuses

Before any policy trains, the pre-check searches best-fixed on each training type (greedy rounds of `fixed:` specs on
selection seeds), scores every type's best-fixed and the static host on every training type, and prints the single
best fixed architecture over the types (SBS), each type's best (VBS) and their test scores. A family where VBS − SBS
averages under 3 pp is refused (exit 3; the table stays in STUDY_DIR/precheck/summary.md): one fixed architecture
serves it, and a per-run controller has nothing to win. Past the pre-check, best-rule is chosen on the training types
(rules/), and each held-out type searches its own VBS (with its cost) and runs static at widths 0.5–2, SBS,
best-rule, the heuristic and its VBS on paired evaluation seeds (heldout/TYPE/eval/). Then K PPO runs train across
the training types (train/run-<r>/: each env group on the type its data seed draws, never a held-out one, charged
that type's own λ_p, measured per type for param_cost "auto"); each run's final policy runs on every training
type's selection seeds (replay-source/run-<r>/TYPE/) for its replay, and each run's init, final policy and replay run
on every held-out type's evaluation seeds, the references' own (heldout/TYPE/policies/). heldout/summary.md and
heldout.json report per run × held-out type the share of the SBS → VBS gap the final policy closes and its Δ against
SBS, best-rule, its init and its replay, their aggregates over runs × types, and every controller's training GFLOPs
per episode. Rerunning the same command continues it: each training run from its last checkpoint, each phase from
its finished paired episodes (more --seeds extend the evaluations; more --runs train the new runs and measure every
run's policies on the held-out types again).
"""

from __future__ import annotations

from esper.cli.common import EXIT_INTERRUPTED, EXIT_OK, EXIT_PARTIAL, console
from esper.evaluation.studies import StudyResult, StudyStatus

__all__ = ["print_family_result"]


def print_family_result(result: StudyResult) -> int:
    """What a family study found, and its exit code: 3 where the pre-check refused the family."""
    path, check = result.path, result.precheck
    if result.status == StudyStatus.REFUSED:
        assert check is not None
        console.print(f"[bold red]Pre-check refused family {check.family}:[/] VBS − SBS averages "
                      f"{check.mean_gap:+.2f} pp over its training types, under the {check.threshold:g} pp a learned "
                      f"controller needs (one fixed architecture, {check.sbs}, serves them about as well as each "
                      f"type's best). The table is in {result.summary}. Define a new version of the family with "
                      f"types that want different architectures, or pass --ignore-precheck to go on anyway.",
                      highlight=False)
        return EXIT_PARTIAL
    if result.status == StudyStatus.STOPPED:
        console.print(f"Stopped during {result.phase}. Continue with the same command (--run-dir {path}).")
        return EXIT_INTERRUPTED
    console.print((path / "heldout" / "summary.md").read_text(encoding="utf-8"), highlight=False)
    console.print(f"Study directory: [bold]{path}[/bold]; held-out results: {path / 'heldout' / 'summary.md'}.")
    return EXIT_OK
