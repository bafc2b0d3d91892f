"""esper command line: grow networks during training and compare the controllers that grow them.

Examples (CPU, minutes):
    esper train ppo --preset quick --run-dir runs/quick
    esper train heuristic --task synthetic --episodes 1 --max-epochs 25 --seed 42
    esper compare --controllers static heuristic random --task synthetic --episodes 5 --seed 42
    esper tune heuristic --task synthetic --seeds 5 --budget 6000 --output tuned.json
    esper report runs/<run-dir>
    esper datagen --output-dir data/datagen --task synthetic --envs baseline --episodes-per-combo 1 --max-epochs 8

Full GPU run:
    esper train ppo --preset cifar10 --devices cuda:0 cuda:1 --set n_envs=8 --run-dir runs/cifar10
    esper compare --controllers static heuristic random --task cifar10 --episodes 20 --devices cuda:0 cuda:1

`python -m esper` and `python -m esper.cli.main` run the same `main(argv)`.
"""

from __future__ import annotations

import argparse
import sys

import esper
from esper.cli.common import EXIT_OK, EXIT_USAGE, data_warnings_as_lines, run_guarded
from esper.cli.compare import add_compare_parser
from esper.cli.datagen import add_datagen_parser
from esper.cli.evaluate_offline import add_evaluate_offline_parser
from esper.cli.options import Parser, plugin_arguments
from esper.cli.report import add_report_parser
from esper.cli.study import add_study_parser
from esper.cli.train_heuristic import add_heuristic_parser
from esper.cli.train_iql import add_iql_parser
from esper.cli.train_ppo import add_ppo_parser
from esper.cli.tune import add_tune_parser
from esper.execution.plugins import load_plugins


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="esper", description=__doc__.split("\n\n")[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"esper {esper.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    train = sub.add_parser("train", help="train or run a controller")
    train_sub = train.add_subparsers(dest="controller", required=True, metavar="CONTROLLER")
    add_ppo_parser(train_sub)
    add_heuristic_parser(train_sub)
    add_iql_parser(train_sub)
    add_compare_parser(sub)
    add_study_parser(sub)
    add_tune_parser(sub)
    add_evaluate_offline_parser(sub)
    add_datagen_parser(sub)
    add_report_parser(sub)
    return parser


def _load_plugins(early: argparse.Namespace) -> int:
    """Load the --plugin modules and installed entry points before the parser is built: it lists their tasks."""
    load_plugins(early.plugin)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Run one command line and return its exit code; it never raises SystemExit, so a caller in Python gets the
    code of a usage error (2), of --help and --version (0) as of every other outcome."""
    argv = sys.argv[1:] if argv is None else list(argv)
    with data_warnings_as_lines():  # a task may read its data as early as parsing --task
        early = plugin_arguments(argv)
        status = run_guarded(_load_plugins, early)
        if status != EXIT_OK:
            return status
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:  # argparse exits after printing its error (2), the help or the version (0)
            return exc.code if isinstance(exc.code, int) else EXIT_OK if exc.code is None else EXIT_USAGE
        args.argv = argv  # recorded in config.json
        return run_guarded(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
