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

import argparse
import shlex
from pathlib import Path
from typing import Any

from esper.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PARTIAL,
    USER_ERRORS,
    WORKER_FIELDS,
    console,
    data_options,
    run_settings,
)
from esper.cli.param_cost import resolve_auto_cost
from esper.cli.rundirs import discard_on_error
from esper.cli.study_phases import open_study, phase_runner, saved_run, train_run
from esper.cli.train_ppo import flag_overrides
from esper.data.families import Family, get_family
from esper.data.readers import SPLITS
from esper.data.tasks import DataCache, get_task_spec
from esper.evaluation.family_policy import heldout_policies, policy_markdown, replay_sources
from esper.evaluation.heldout import HeldOutType, run_heldout, select_rule, write_heldout
from esper.evaluation.phases import PhaseRunner
from esper.evaluation.precheck import run_precheck, type_config
from esper.evaluation.study import STUDY_PRESETS, run_config
from esper.execution.devices import resolve_devices
from esper.leyline.errors import UserInputError
from esper.simic.ppo.checkpoint import resume_config
from esper.simic.ppo.config import TrainingConfig, family_fields
from esper.storage.rundir import default_run_dir

__all__ = ["cmd_family_study"]

_NOT_WITH_FAMILY = (("preset", "--preset"), ("ppo", "--ppo"), ("controller", "--controller"),
                    ("blueprints_from_selection", "--blueprints-from-selection"),
                    ("allow_setting_change", "--allow-setting-change"))
"""Flags of a single-task study that a family study does not take (its types carry task and sample cap)."""
_SET_BY_TYPE = ("episode.task", "episode.max_train_samples")


def _check_flags(args: argparse.Namespace, overrides: dict[str, Any]) -> None:
    for dest, flag in _NOT_WITH_FAMILY:
        if getattr(args, dest):
            raise UserInputError(f"{flag} does not apply to --family: a family's types bring their own task, sample "
                                 f"cap and host; drop {flag}")
    fixed = [k for k in _SET_BY_TYPE if k in overrides]
    if fixed:
        names = [k.rpartition(".")[2] for k in fixed]
        raise UserInputError(f"--family sets {', '.join(names)} per instance type: drop --set {names[0]}=... (a "
                             f"family with other types is a new family version)")


def _study_path(args: argparse.Namespace, family: Family, seed: int) -> Path:
    return Path(args.run_dir or default_run_dir(args.runs_root, "study", family.key.replace("-", "_"), seed,
                                                run_settings(args)))


def _runs(args: argparse.Namespace, family: Family) -> int:
    """--runs, or the study preset's number of training runs for the family's preset."""
    if args.runs is not None:
        return int(args.runs)
    if family.preset not in STUDY_PRESETS:
        raise UserInputError(f"Family {family.key} trains in preset '{family.preset}', which has no study preset to "
                             f"take a number of training runs from: pass --runs K")
    return STUDY_PRESETS[family.preset].runs


def _train_runs(args: argparse.Namespace, config: TrainingConfig, train_dirs: list[Path], cache: DataCache,
                preset: str) -> bool:
    """Train (or continue) every run across the training types, each on its own seed stream; False when stopped."""
    for r, train_dir in enumerate(train_dirs):
        requested = run_config(config, r)
        saved = saved_run(train_dir)
        checkpoint = None if saved is None else saved[1]
        run_conf = requested if saved is None else resume_config(saved[0], requested)
        if not train_run(args, run_conf, checkpoint, train_dir, cache, r, preset):
            return False
    return True


def cmd_family_study(args: argparse.Namespace) -> int:
    family = get_family(args.family)
    overrides = flag_overrides(args)
    _check_flags(args, overrides)
    selection_seeds = family.selection_seeds if args.selection_seeds is None else args.selection_seeds
    if selection_seeds == 0:
        raise UserInputError("--family needs selection seeds: its pre-check searches best-fixed on them; pass "
                             "--selection-seeds 1 or more")
    seeds, runs = args.seeds or family.seeds, _runs(args, family)
    config = TrainingConfig.preset(family.preset).with_overrides(**family_fields(family, overrides))
    settings = {"family": family.to_dict(), "selection_seeds": selection_seeds, "seeds": seeds, "runs": runs,
                "tie_threshold": args.tie_threshold, "max_test_samples": args.max_test_samples, "plugins": args.plugin}
    cache = DataCache(data_options(args))
    devices = resolve_devices(config.execution.device, config.execution.devices)
    for itype in family.types:  # a missing dataset fails before anything is written
        cache.preload(get_task_spec(type_config(config, family, itype).episode.task), devices, SPLITS)
    study, fresh = open_study(_study_path(args, family, config.seed), args, settings, config.episode)
    path = study.path
    watch = shlex.join(["tensorboard", "--logdir", str(path)])
    console.print(f"Study directory: {path} (family {family.key}: {len(family.training)} training types, "
                  f"{len(family.held_out)} held out; {runs} training run(s); {watch})", soft_wrap=True, markup=False,
                  highlight=False)  # one line, to copy as is

    def runner(type_conf: TrainingConfig) -> PhaseRunner:
        return phase_runner(args, type_conf, settings, cache)

    with discard_on_error(study, fresh=fresh, errors=USER_ERRORS):
        check = run_precheck(family, config, path / "precheck", selection_seeds, runner, args.max_test_samples)
    console.print(check.markdown(), highlight=False)
    table = path / "precheck" / "summary.md"
    if not check.passed and not args.ignore_precheck:
        console.print(f"[bold red]Pre-check refused family {family.key}:[/] VBS − SBS averages "
                      f"{check.mean_gap:+.2f} pp over its training types, under the {check.threshold:g} pp a learned "
                      f"controller needs (one fixed architecture, {check.sbs}, serves them about as well as each "
                      f"type's best). The table is in "
                      f"{table}. Define a new version of the family with types that want different architectures, "
                      f"or pass --ignore-precheck to go on anyway.", highlight=False)
        return EXIT_PARTIAL
    console.print(f"Pre-check {'passed' if check.passed else 'overridden (--ignore-precheck)'}; table: {table}.",
                  highlight=False)
    with discard_on_error(study, fresh=False, errors=USER_ERRORS):
        best_rule, _ = select_rule(family, config, path / "rules", selection_seeds, runner, args.max_test_samples)
        types = run_heldout(family, config, check, best_rule, path / "heldout", seeds=seeds,
                            selection_seeds=selection_seeds, runner=runner, max_test_samples=args.max_test_samples)
        config = resolve_auto_cost(config, args)  # λ_p per training type
        train_dirs = [path / "train" / f"run-{r}" for r in range(runs)]
        if not _train_runs(args, config, train_dirs, cache, family.preset):
            console.print(f"Stopped during training. Continue with the same command (--run-dir {path}).")
            return EXIT_INTERRUPTED
        _measure_policies(args, family, config, types, path, train_dirs, settings, cache)
    console.print((path / "heldout" / "summary.md").read_text(encoding="utf-8"), highlight=False)
    console.print(f"Study directory: [bold]{path}[/bold]; held-out results: {path / 'heldout' / 'summary.md'}.")
    return EXIT_OK


def _measure_policies(args: argparse.Namespace, family: Family, config: TrainingConfig, types: list[HeldOutType],
                      path: Path, train_dirs: list[Path], settings: dict[str, Any], cache: DataCache) -> None:
    """Each run's replay source on the training types, then its init, final policy and replay on every held-out
    type; the phases record the policies' training setting, so policies trained otherwise are evaluated anew."""
    policy = {k: v for k, v in config.dotted_dict().items() if k.removeprefix("execution.") not in WORKER_FIELDS}

    def runner(type_conf: TrainingConfig) -> PhaseRunner:
        return phase_runner(args, type_conf, {**settings, "policy": policy}, cache)

    replay_sources(family, config, path / "replay-source", train_dirs, settings["selection_seeds"], runner,
                   args.max_test_samples)
    replay_dirs = [path / "replay-source" / f"run-{r}" for r in range(len(train_dirs))]
    results = heldout_policies(family, config, types, path / "heldout", train_dirs=train_dirs,
                               replay_dirs=replay_dirs, seeds=settings["seeds"], runner=runner,
                               max_test_samples=args.max_test_samples)
    write_heldout(path / "heldout", family, types, results.to_dict(), policy_markdown(family, results))
