"""`esper evaluate-offline`: estimate a learned controller's return from logged datasets, before live episodes.

    esper evaluate-offline --data runs/data --controller iql:runs/iql
    esper evaluate-offline --data runs/data --controller ppo:runs/ppo --gamma 0.99 --fqe-iterations 80 --out ope.json

Per-decision weighted importance sampling (from the logged behaviour probabilities, with its effective sample size)
and fitted-Q evaluation, each with a bootstrap CI over episodes, next to every behaviour policy's empirical return.
The default γ = 1 estimates the undiscounted `gap` return, the quantity `esper compare` measures live.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from rich.table import Table

from esper.cli.common import EXIT_OK, console, phase_progress
from esper.cli.config_flags import add_config_flags, config_from_args
from esper.cli.options import add_plugin_option
from esper.datagen.loader import load_transitions
from esper.env.rewards import RewardFamily
from esper.evaluation.controllers import all_controllers
from esper.evaluation.ope import OfflineEvaluation, OPEConfig, TargetPolicy, evaluate_offline
from esper.leyline.actions import ActionSpace
from esper.leyline.errors import UserInputError
from esper.nissa import ProgressBackend
from esper.storage.rundir import write_json_atomic
from esper.tamiyo import ControllerContext


def add_evaluate_offline_parser(sub: Any) -> None:
    p = sub.add_parser("evaluate-offline", help="estimate a learned controller's return from logged datasets",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, nargs="+", required=True, metavar="DIR", help="`esper datagen` directories")
    p.add_argument("--controller", required=True, metavar="SPEC", help="a learned controller: iql:PATH or ppo:PATH")
    p.add_argument("--reward-source", choices=[f.value for f in RewardFamily], default=RewardFamily.GAP.value,
                   help="the reward family whose return is estimated (default: gap)")
    add_config_flags(p, OPEConfig())
    p.add_argument("--out", type=Path, help="also write the estimates as JSON here")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    add_plugin_option(p)
    p.set_defaults(func=cmd_evaluate_offline)


def target_policy(spec: str, space: ActionSpace, slots: tuple[str, ...]) -> TargetPolicy:
    """The controller's probabilities over joint actions from raw features (learned controllers only)."""
    controller = all_controllers().build(spec, ControllerContext(space=space, slots=slots))
    action_probs = getattr(controller, "action_probs", None)
    if action_probs is None:
        raise UserInputError(f"{spec} decides from live observations only, so it cannot be evaluated from stored "
                             f"features: pass a learned controller (iql:PATH or ppo:PATH)")
    probs: TargetPolicy = action_probs
    return probs


def _ci(low: float, high: float) -> str:
    return f"[{low:+.3f}, {high:+.3f}]"


def estimates_table(result: OfflineEvaluation, spec: str) -> Table:
    """The estimates of the target policy's return, then each behaviour policy's logged return for scale."""
    p = result.pdwis
    table = Table(title=f"Offline estimates of {spec} (γ = {p.gamma:g}, {int(100 * p.confidence)} % bootstrap CIs "
                        f"over {p.n_episodes} episodes)")
    for column in ("estimator / behaviour policy", "return", "CI", "notes"):
        table.add_column(column, justify="left" if column != "return" else "right")
    for estimate in (result.pdwis, result.fqe):
        notes = ", ".join(f"{k} {v:.3g}" for k, v in estimate.details.items())
        if math.isnan(estimate.value) and estimate is result.pdwis:
            table.add_row(estimate.method.upper(), "—", "—", "no logged episode follows this policy at every "
                          "decision: no importance-sampling estimate")
            continue
        table.add_row(estimate.method.upper(), f"{estimate.value:+.3f}", _ci(estimate.ci_low, estimate.ci_high), notes)
    table.add_section()
    for b in result.behavior:
        low, high = b.return_ci if result.pdwis.gamma == 1.0 else b.discounted_return_ci
        value = b.mean_return if result.pdwis.gamma == 1.0 else b.mean_discounted_return
        table.add_row(f"logged: {b.policy}", f"{value:+.3f}", _ci(low, high), f"{b.n_episodes} episodes")
    return table


def cmd_evaluate_offline(args: argparse.Namespace) -> int:
    config = config_from_args(OPEConfig(), args)
    dataset = load_transitions(args.data, args.reward_source)
    target = target_policy(args.controller, dataset.space, tuple(dataset.slots))
    progress = ProgressBackend("bar" if console.is_terminal else "lines", console)
    try:
        result = evaluate_offline(dataset, target, config, phase_progress(progress))
    finally:
        progress.close()
    console.print(estimates_table(result, args.controller))
    if args.out is not None:
        write_json_atomic(args.out, {"controller": args.controller, "data": [str(d) for d in args.data],
                                     "reward_source": args.reward_source, "config": config.to_dict(),
                                     **result.to_dict()})
        console.print(f"Wrote {args.out}")
    return EXIT_OK
