"""`esper study --family NAME`: a study across a task family's instance types, beginning with its pre-check.

    esper study --family synthetic-shift-v1                      # pre-check, then the held-out references
    esper study --family synthetic-shift-v1 --selection-seeds 2  # fewer selection seeds per search
    esper study --family synthetic-shift-v1 --ignore-precheck    # go on even where the pre-check refuses

Before any policy trains, the pre-check searches best-fixed on each training type (greedy rounds of `fixed:` specs on
selection seeds), scores every type's best-fixed and the static host on every training type, and prints the single
best fixed architecture over the types (SBS), each type's best (VBS) and their test scores. A family where VBS − SBS
averages under 3 pp is refused (exit 3; the table stays in STUDY_DIR/precheck/summary.md): one fixed architecture
serves it, and a per-run controller has nothing to win. Past the pre-check, best-rule is chosen on the training types
(rules/), and each held-out type searches its own VBS (with its cost) and runs static at widths 0.5–2, SBS,
best-rule, the heuristic and its VBS on paired evaluation seeds (heldout/TYPE/, heldout/summary.md): the references a
policy trained on the training types is measured against. Rerunning the same command continues it.
"""

from __future__ import annotations

import argparse
from typing import Any

from esper.cli.common import EXIT_OK, EXIT_PARTIAL, USER_ERRORS, console, data_options, run_settings
from esper.cli.rundirs import check_same_arguments, discard_on_error, prepare_run_dir
from esper.cli.study_phases import phase_runner
from esper.cli.train_ppo import flag_overrides
from esper.evaluation.heldout import run_heldout, select_rule
from esper.evaluation.phases import PhaseRunner
from esper.evaluation.precheck import run_precheck, type_config
from esper.leyline.errors import UserInputError
from esper.runtime.devices import resolve_devices
from esper.runtime.families import Family, get_family
from esper.runtime.readers import SPLITS
from esper.runtime.rundir import RunDirectory, default_run_dir, holds_results, recorded_config
from esper.runtime.tasks import DataCache, get_task_spec
from esper.simic.ppo.config import TrainingConfig

__all__ = ["cmd_family_study"]

_NOT_WITH_FAMILY = (("preset", "--preset"), ("ppo", "--ppo"), ("controller", "--controller"),
                    ("blueprints_from_selection", "--blueprints-from-selection"),
                    ("allow_setting_change", "--allow-setting-change"))
"""Flags of a single-task study that a family study does not take (its types carry task and sample cap)."""
_SET_BY_TYPE = ("task", "max_train_samples")


def _check_flags(args: argparse.Namespace, overrides: dict[str, Any]) -> None:
    for dest, flag in _NOT_WITH_FAMILY:
        if getattr(args, dest):
            raise UserInputError(f"{flag} does not apply to --family: a family's types bring their own task, sample "
                                 f"cap and host; drop {flag}")
    if args.runs is not None:
        raise UserInputError("--runs does not apply to --family yet: a family study trains no policy so far; drop "
                             "--runs")
    fixed = [k for k in _SET_BY_TYPE if k in overrides]
    if fixed:
        raise UserInputError(f"--family sets {', '.join(fixed)} per instance type: drop --set {fixed[0]}=... (a "
                             f"family with other types is a new family version)")


def _open_study(args: argparse.Namespace, family: Family, settings: dict[str, Any], seed: int
                ) -> tuple[RunDirectory, bool]:
    path = args.run_dir or default_run_dir(args.runs_root, "study", family.key.replace("-", "_"), seed,
                                           run_settings(args))
    if prepare_run_dir(path, command="study", overwrite=args.overwrite, resumable=holds_results) == "new":
        study = RunDirectory(path)
        study.write_config("study", args.argv, settings, {"data_dir": str(args.data_dir)})
        return study, True
    check_same_arguments(path, recorded_config(path), settings, may_differ=("seeds",))
    return RunDirectory(path, resume=True), False


def cmd_family_study(args: argparse.Namespace) -> int:
    family = get_family(args.family)
    overrides = flag_overrides(args)
    _check_flags(args, overrides)
    selection_seeds = family.selection_seeds if args.selection_seeds is None else args.selection_seeds
    if selection_seeds == 0:
        raise UserInputError("--family needs selection seeds: its pre-check searches best-fixed on them; pass "
                             "--selection-seeds 1 or more")
    seeds = args.seeds or family.seeds
    config = TrainingConfig.preset(family.preset).with_overrides(**overrides)
    settings = {"family": family.to_dict(), "selection_seeds": selection_seeds, "seeds": seeds,
                "tie_threshold": args.tie_threshold, "max_test_samples": args.max_test_samples, "plugins": args.plugin}
    cache = DataCache(data_options(args))
    devices = resolve_devices(config.device, config.devices)
    for itype in family.types:  # a missing dataset fails before anything is written
        cache.preload(get_task_spec(type_config(config, family, itype).task), devices, SPLITS)
    study, fresh = _open_study(args, family, settings, config.seed)
    path = study.path
    console.print(f"Study directory: [bold]{path}[/bold] (family {family.key}: {len(family.training)} training "
                  f"types, {len(family.held_out)} held out; tensorboard --logdir {path})")

    def runner(type_conf: TrainingConfig) -> PhaseRunner:
        return phase_runner(args, type_conf, settings, cache)

    with discard_on_error(study, fresh=fresh, errors=USER_ERRORS):
        check = run_precheck(family, config, path / "precheck", selection_seeds, runner, args.max_test_samples)
    console.print(check.markdown(), highlight=False)
    table = path / "precheck" / "summary.md"
    if not check.passed and not args.ignore_precheck:
        console.print(f"[bold red]Pre-check refused family {family.key}:[/] VBS − SBS averages {check.mean_gap:+.2f} "
                      f"over its training types, under the {check.threshold:g} a learned controller needs (one fixed "
                      f"architecture, {check.sbs}, serves them about as well as each type's best). The table is in "
                      f"{table}. Define a new version of the family with types that want different architectures, "
                      f"or pass --ignore-precheck to go on anyway.", highlight=False)
        return EXIT_PARTIAL
    console.print(f"Pre-check {'passed' if check.passed else 'overridden (--ignore-precheck)'}; table: {table}.",
                  highlight=False)
    with discard_on_error(study, fresh=False, errors=USER_ERRORS):
        best_rule, _ = select_rule(family, config, path / "rules", selection_seeds, runner, args.max_test_samples)
        run_heldout(family, config, check, best_rule, path / "heldout", seeds=seeds,
                    selection_seeds=selection_seeds, runner=runner, max_test_samples=args.max_test_samples)
    console.print((path / "heldout" / "summary.md").read_text(encoding="utf-8"), highlight=False)
    console.print(f"Study directory: [bold]{path}[/bold]. A policy trained across the training types (K runs, its "
                  f"init and replay) is not part of `esper study --family` yet: the references above are what it "
                  f"will be measured against.")
    return EXIT_OK
