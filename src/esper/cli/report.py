"""`esper report RUN_DIR`: PNG plots of a run directory.

Examples:
    esper report runs/heuristic_synthetic_20250101-120000_s42
    esper report runs/compare_cifar10_20250101-120000_s42 --out /tmp/compare_plots
    esper report runs/study_full --ablation scratch=runs/study_scratch no-kl=runs/study_no_kl
    esper report runs/compare_fashion_mnist_20250101-120000_s7 --deviations

With --ablation, RUN_DIR is a study of teacher-residual policies and each NAME=DIR another study that changed one
part of its recipe: one table of every arm's final policies against RUN_DIR's teacher, on RUN_DIR's objective and on
raw test accuracy (REPORT/ablation.md).

With --deviations, RUN_DIR is a comparison of a teacher, the static host and the teacher's one-epoch deviations
(`deviate:EPOCH:ACTION:TEACHER`): one table of each deviation against the teacher on the same seeds, on the
comparison's objective (REPORT/deviations.md): how much room the teacher leaves a learned policy.

The plots themselves are drawn by `esper.report`, from the run's files alone.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from esper.cli.common import EXIT_OK, console
from esper.cli.options import add_plugin_option
from esper.evaluation.ablation import ablation_markdown, ablation_rows, read_arm
from esper.evaluation.deviations import deviation_markdown, read_deviation_run
from esper.leyline.errors import UserInputError
from esper.report.render import render_report
from esper.storage.rundir import write_text_atomic


def add_report_parser(sub: Any) -> None:
    p = sub.add_parser("report", help="render PNG plots for a run or datagen directory",
                       description="Render PNG plots (matplotlib, Agg) for a heuristic, compare, ppo, iql or study "
                                   "run directory, or a datagen dataset directory.")
    p.add_argument("run_dir", type=Path, help="run directory written by esper train / esper compare, or a dataset "
                   "directory written by esper datagen")
    p.add_argument("--out", type=Path, help="output folder for the PNGs (default: RUN_DIR/report)")
    p.add_argument("--ablation", nargs="+", metavar="NAME=DIR",
                   help="with a study as RUN_DIR: the studies of an ablation, each NAME=DIR, in one table against "
                        "RUN_DIR's teacher (instead of plots)")
    p.add_argument("--deviations", action="store_true",
                   help="with a comparison of a teacher's deviate: controllers as RUN_DIR: each deviation against the "
                        "teacher on the comparison's objective, in one table (instead of plots)")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    add_plugin_option(p)
    p.set_defaults(func=cmd_report)


def _arm(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise UserInputError(f"--ablation {text!r}: give each arm as NAME=STUDY_DIR (e.g. scratch=runs/study_scratch)")
    return name, Path(path)


def _write_table(args: argparse.Namespace, name: str, table: str) -> int:
    out = (args.out or args.run_dir / "report") / name
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, table)
    console.print(table, markup=False, highlight=False, soft_wrap=True)
    console.print(f"Wrote {out}")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    if args.ablation is not None and args.deviations:
        raise UserInputError("--ablation and --deviations each make their own table: pass one of them")
    if args.ablation is not None:
        reference = read_arm("residual", args.run_dir)
        rows = ablation_rows(reference, [read_arm(*_arm(a)) for a in args.ablation])
        return _write_table(args, "ablation.md", ablation_markdown(rows, reference))
    if args.deviations:
        return _write_table(args, "deviations.md", deviation_markdown(read_deviation_run(args.run_dir)))
    paths = render_report(args.run_dir, args.out, warn=lambda text: console.print(f"[yellow]{text}[/yellow]"))
    console.print(f"Wrote {len(paths)} plot(s):")
    for path in paths:
        console.print(f"  {path}")
    return EXIT_OK
