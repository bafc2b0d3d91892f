"""`esper report RUN_DIR`: PNG plots of a run directory.

Examples:
    esper report runs/heuristic_synthetic_20250101-120000_s42
    esper report runs/compare_cifar10_20250101-120000_s42 --out /tmp/compare_plots

The plots themselves are drawn by `esper.report`, from the run's files alone.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from esper.cli.common import EXIT_OK, add_plugin_option, console
from esper.report.render import render_report


def add_report_parser(sub: Any) -> None:
    p = sub.add_parser("report", help="render PNG plots for a run or datagen directory",
                       description="Render PNG plots (matplotlib, Agg) for a heuristic, compare, ppo, iql or study "
                                   "run directory, or a datagen dataset directory.")
    p.add_argument("run_dir", type=Path, help="run directory written by esper train / esper compare, or a dataset "
                   "directory written by esper datagen")
    p.add_argument("--out", type=Path, help="output folder for the PNGs (default: RUN_DIR/report)")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    add_plugin_option(p)
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    paths = render_report(args.run_dir, args.out, warn=lambda text: console.print(f"[yellow]{text}[/yellow]"))
    console.print(f"Wrote {len(paths)} plot(s):")
    for path in paths:
        console.print(f"  {path}")
    return EXIT_OK
