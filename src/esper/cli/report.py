"""`esper report RUN_DIR`: PNG plots of a run directory.

Examples:
    esper report runs/heuristic_synthetic_20250101-120000_s42
    esper report runs/compare_cifar10_20250101-120000_s42 --out /tmp/compare_plots

The run type comes from RUN_DIR/config.json ("command"): heuristic, compare or ppo. Plots are read from the run's
artifacts only (steps.jsonl, episodes.jsonl, history.jsonl, results.json), never from debug-level telemetry.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from esper.cli.common import EXIT_OK, console
from esper.runtime.rundir import read_jsonl

RUN_TYPES = ("heuristic", "compare", "ppo")
NEEDED = {"heuristic": ("steps.jsonl", "episodes.jsonl"), "compare": ("results.json", "steps.jsonl"),
          "ppo": ("history.jsonl", "steps.jsonl", "episodes.jsonl")}
WHAT = {"steps.jsonl": "one line per env step", "episodes.jsonl": "one line per finished episode",
        "history.jsonl": "one line per PPO rollout batch", "results.json": "comparison results",
        "config.json": "run configuration"}


def add_report_parser(sub: Any) -> None:
    p = sub.add_parser("report", help="render PNG plots for a run directory",
                       description="Render PNG plots (matplotlib, Agg) for a heuristic, compare or ppo run directory.")
    p.add_argument("run_dir", type=Path, help="run directory written by esper train / esper compare")
    p.add_argument("--out", type=Path, help="output folder for the PNGs (default: RUN_DIR/report)")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    paths = render_report(args.run_dir, args.out)
    console.print(f"Wrote {len(paths)} plot(s):")
    for path in paths:
        console.print(f"  {path}")
    return EXIT_OK


def run_type(run_dir: Path) -> str:
    """The run type from config.json's "command" ("train heuristic" and "heuristic" both give "heuristic")."""
    path = run_dir / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: a run directory starts with config.json ({WHAT['config.json']})")
    try:
        command = str(json.loads(path.read_text(encoding="utf-8")).get("command", ""))
    except (json.JSONDecodeError, AttributeError) as exc:
        raise ValueError(f"{path} is not a JSON object: {exc}") from exc
    kind = command.removeprefix("train ").strip()
    if kind not in RUN_TYPES:
        raise ValueError(f"{path}: run type {command!r} has no report (supported: {', '.join(RUN_TYPES)})")
    return kind


def render_report(run_dir: Path, out: Path | None = None) -> list[Path]:
    """Write the report PNGs for `run_dir` into `out` (default RUN_DIR/report); returns the files written."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"Run directory {run_dir} does not exist")
    kind = run_type(run_dir)
    for name in NEEDED[kind]:
        if not (run_dir / name).is_file():
            raise FileNotFoundError(f"{run_dir / name} not found: a {kind} report needs {name} ({WHAT[name]})")
    out = Path(out) if out is not None else run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    data = {name: _load(run_dir / name) for name in NEEDED[kind]}
    if kind == "heuristic":
        return _heuristic(data["steps.jsonl"], data["episodes.jsonl"], out)
    if kind == "compare":
        return _compare(data["results.json"], data["steps.jsonl"], out)
    return _ppo(data["history.jsonl"], data["steps.jsonl"], data["episodes.jsonl"], out)


def _load(path: Path) -> Any:
    if path.suffix == ".jsonl":
        rows = read_jsonl(path)
        if not rows:
            raise ValueError(f"{path} has no complete rows: nothing to plot yet")
        return rows
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from exc


# ---------------------------------------------------------------------------------------------- heuristic


def _heuristic(steps: list[dict], episodes: list[dict], out: Path) -> list[Path]:
    from esper.cli import report_plots as rp

    eps = sorted(episodes, key=lambda e: rp.num(e.get("episode")))
    by_ep = rp.group_tracks(steps, ("episode",))
    colors = rp.series_colors(len(eps))
    written = []

    fig, axes = rp.new_figure(10, 5.2)
    ax = axes[0, 0]
    for e, color in zip(eps, colors):
        curve = [rp.num(v) for v in e.get("accuracy_curve") or []]
        label = f"episode {e.get('episode')} (final {rp.num(e.get('final_accuracy')):.1f}%)"
        show = len(eps) <= 12 or e is eps[0] or e is eps[-1]
        ax.plot(range(1, len(curve) + 1), curve, color=color, linewidth=1.6, label=label if show else None)
    _op_markers(ax, steps, rp, size=70 if len(eps) <= 4 else 35)
    rp.style(ax, "Validation accuracy per episode", "epoch", "validation accuracy (%)")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    written.append(rp.save(fig, out / "accuracy.png"))
    if len(by_ep) <= 8:
        loss_groups = {f"episode {k[0]}": rows for k, rows in sorted(by_ep.items(), key=lambda kv: rp.num(kv[0][0]))}
    else:
        loss_groups = {f"mean of {len(by_ep)} episodes": steps}
    written.append(rp.loss_figure(loss_groups, "Loss per epoch (solid: validation, dashed: training)",
                                  out / "loss.png"))

    last = sorted(by_ep, key=lambda k: rp.num(k[0]))[-4:]
    tracks = [(f"ep {k[0]}{rp.final_acc(by_ep[k])}", by_ep[k]) for k in last]
    title = f"Last {len(tracks)} episode(s)" if len(by_ep) > len(tracks) else "All episodes"
    written.append(rp.lifecycle_figure([(title, tracks)], out / "lifecycle.png"))

    fig, axes = rp.new_figure(9, 5)
    x = [rp.num(e.get("episode")) for e in eps]
    counts = {op: [rp.num((e.get("action_counts") or {}).get(op, 0)) for e in eps] for op in _ops(eps, rp)}
    rp.stacked_shares(axes[0, 0], x, counts)
    rp.style(axes[0, 0], "Actions per episode (labels: share of steps)", "episode", "actions (one per epoch)")
    axes[0, 0].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    written.append(rp.save(fig, out / "actions.png"))

    keys = sorted(by_ep, key=lambda k: rp.num(k[0]))
    fig, axes = rp.new_figure(10, 5.2)
    comps, total = _mean_components([by_ep[k] for k in keys], rp)
    rp.reward_panel(axes[0, 0], [rp.num(k[0]) for k in keys], comps, total, "episode",
                    "Mean reward components per episode")
    written.append(rp.save(fig, out / "rewards.png"))

    fig, axes = rp.new_figure(10, 5.2)
    ax = axes[0, 0]
    for k, color in zip(keys, rp.series_colors(len(keys))):
        rows, show = by_ep[k], len(keys) <= 12 or k in (keys[0], keys[-1])
        ax.step([rp.num(r.get("epoch")) for r in rows], [rp.num(r.get("seed_params")) for r in rows], where="post",
                color=color, linewidth=1.6 if len(keys) <= 8 else 0.8, alpha=1.0 if len(keys) <= 8 else 0.5,
                label=f"episode {k[0]}" if show else None)
    if len(keys) > 8:
        per_epoch: dict[float, list[float]] = {}
        for r in steps:
            per_epoch.setdefault(rp.num(r.get("epoch")), []).append(rp.num(r.get("seed_params")))
        epochs = sorted(per_epoch)
        ax.step(epochs, [_mean(per_epoch[e]) for e in epochs], where="post", color="black", linewidth=2.4,
                label="mean over episodes")
    ax.set_ylim(bottom=0)
    rp.style(ax, "Seed parameters over time", "epoch", "parameters added by seeds")
    ax.yaxis.set_major_formatter(rp.THOUSANDS)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    written.append(rp.save(fig, out / "params.png"))
    return written


def _ops(rows: list[dict], rp: Any, key: str = "action_counts") -> list[str]:
    extra = {op for r in rows for op in (r.get(key) or {}) if op not in rp.OPS}
    return list(rp.OPS) + sorted(extra)


def _op_markers(ax: Any, steps: list[dict], rp: Any, size: float) -> None:
    """Successful lifecycle ops as markers on the accuracy curves."""
    marks = {"GERMINATE": ("^", "germinate"), "FOSSILIZE": ("*", "fossilize"), "CULL": ("X", "cull")}
    for op, (marker, label) in marks.items():
        pts = [(rp.num(r.get("epoch")), rp.num(r.get("val_acc"))) for r in steps if r.get("op") == op
               and r.get("success")]
        if pts:
            ax.scatter(*zip(*pts), marker=marker, s=size, color=rp.OP_COLORS[op], edgecolor="black", linewidth=0.6,
                       zorder=5, label=label)


def _mean_components(groups: list[list[dict]], rp: Any) -> tuple[dict[str, list[float]], list[float]]:
    """Per group: mean of each summed reward component over its steps, and the mean total reward."""
    names = rp.reward_names([r.get("reward_components") or {} for rows in groups for r in rows])
    comps = {n: [_mean([rp.num((r.get("reward_components") or {}).get(n, 0.0)) for r in rows]) for rows in groups]
             for n in names}
    total = [_mean([rp.num(r.get("reward", (r.get("reward_components") or {}).get("total"))) for r in rows])
             for rows in groups]
    return comps, total


def _mean(values: list[float]) -> float:
    clean = [v for v in values if not math.isnan(v)]
    return sum(clean) / len(clean) if clean else math.nan


def _zero_nan(v: float) -> float:
    return 0.0 if math.isnan(v) else v


def _std(values: list[float]) -> float:
    clean = [v for v in values if not math.isnan(v)]
    if len(clean) < 2:
        return 0.0
    m = sum(clean) / len(clean)
    return math.sqrt(sum((v - m) ** 2 for v in clean) / (len(clean) - 1))


# ---------------------------------------------------------------------------------------------- compare


def _compare(results: dict[str, Any], steps: list[dict], out: Path) -> list[Path]:
    from esper.cli import report_plots as rp

    labels = [str(c) for c in results.get("controllers") or []]
    per = results.get("per_controller") or {}
    if not labels or any(c not in per for c in labels):
        raise ValueError("results.json lacks 'controllers' or their 'per_controller' statistics")
    ref = str(results.get("reference", labels[0]))
    episodes = results.get("episodes") or []
    colors = dict(zip(labels, rp.series_colors(len(labels))))
    xs = list(range(len(labels)))
    written = []

    fig, axes = rp.new_figure(max(6.5, 1.6 * len(labels) + 3), 5.2)
    ax = axes[0, 0]
    means = [rp.num(per[c]["final_accuracy"]["mean"]) for c in labels]
    cis = [1.96 * _zero_nan(rp.num(per[c]["final_accuracy"].get("std"))) / math.sqrt(max(1, per[c].get("episodes", 1)))
           for c in labels]
    ax.bar(xs, means, 0.6, yerr=cis, capsize=6, color=[colors[c] for c in labels], alpha=0.85, edgecolor="black")
    for i, c in enumerate(labels):
        pts = [rp.num(e.get("final_accuracy")) for e in episodes if e.get("controller") == c]
        ax.scatter([i + 0.2 * (j / max(len(pts) - 1, 1) - 0.5) for j in range(len(pts))], pts, s=14, color="black",
                   zorder=4)
    lo = min([m - c for m, c in zip(means, cis)] + [p for e in episodes if not math.isnan(p := rp.num(
        e.get("final_accuracy")))])
    hi = max(m + c for m, c in zip(means, cis))
    pad = max(1.0, 0.15 * (hi - lo))
    ax.set_ylim(max(0.0, lo - pad), min(100.0, hi + pad))
    ticks = [f"{c}\n{m:.2f} ± {ci:.2f} %\n{_verdict(results, c, ref)}" for c, m, ci in zip(labels, means, cis)]
    ax.set_xticks(xs, ticks, fontsize=9)
    rp.style(ax, "Final validation accuracy per controller\n"
             "(bar: mean, whiskers: 95% CI, dots: episodes; y axis zoomed)", "controller", "final accuracy (%)",
             int_x=False)
    written.append(rp.save(fig, out / "compare_final_accuracy.png"))

    fig, axes = rp.new_figure(10, 5.2)
    ax = axes[0, 0]
    for c in labels:
        curves = [e.get("accuracy_curve") or [] for e in episodes if e.get("controller") == c]
        if not curves:
            curves = [per[c].get("accuracy_curve_mean") or []]
        n = max((len(cv) for cv in curves), default=0)
        cols = [[rp.num(cv[i]) for cv in curves if i < len(cv)] for i in range(n)]
        m, s = [_mean(col) for col in cols], [_std(col) for col in cols]
        ep = list(range(1, n + 1))
        ax.plot(ep, m, color=colors[c], linewidth=1.8, label=f"{c} (n={len(curves)})")
        ax.fill_between(ep, [a - b for a, b in zip(m, s)], [a + b for a, b in zip(m, s)], color=colors[c], alpha=0.2)
    rp.style(ax, "Validation accuracy per epoch (line: mean over episodes, band: ± 1 std)", "epoch",
             "validation accuracy (%)")
    ax.legend(fontsize=9, loc="lower right")
    written.append(rp.save(fig, out / "compare_curves.png"))
    by_controller = {c: [r for r in steps if r.get("controller") == c] for c in labels}
    written.append(rp.loss_figure(by_controller, "Loss per epoch, mean over episodes (solid: validation, dashed: "
                                  "training)", out / "compare_loss.png"))

    fig, axes = rp.new_figure(max(10.0, 2.2 * len(labels) + 5), 5, 1, 2)
    ax = axes[0, 0]
    pm = [rp.num(per[c]["params_added"]["mean"]) for c in labels]
    ps = [_zero_nan(rp.num(per[c]["params_added"].get("std"))) for c in labels]
    ax.bar(xs, pm, 0.6, yerr=ps, capsize=6, color=[colors[c] for c in labels], alpha=0.85, edgecolor="black")
    for i, c in enumerate(labels):
        pts = [rp.num(e.get("params_added")) for e in episodes if e.get("controller") == c]
        ax.scatter([i] * len(pts), pts, s=14, color="black", zorder=4)
    ax.set_xticks(xs, labels)
    ax.yaxis.set_major_formatter(rp.THOUSANDS)
    rp.style(ax, "Parameters added by seeds (mean ± std, dots: episodes)", "controller", "parameters", int_x=False)
    ax = axes[0, 1]
    for j, (key, color) in enumerate((("seeds_created", "#1f77b4"), ("seeds_fossilized", "#2ca02c"),
                                      ("seeds_culled", "#d62728"))):
        ax.bar([i + (j - 1) * 0.26 for i in xs], [rp.num(per[c].get(key)) for c in labels], 0.26, color=color,
               label=key.removeprefix("seeds_"))
    ax.set_xticks(xs, labels)
    rp.style(ax, "Seeds per episode (mean)", "controller", "seeds per episode", int_x=False)
    ax.legend(fontsize=9)
    written.append(rp.save(fig, out / "compare_params.png"))

    fig, axes = rp.new_figure(max(6.5, 1.4 * len(labels) + 3.5), 5)
    mix = {op: [100 * rp.num((per[c].get("action_mix") or {}).get(op, 0.0)) for c in labels]
           for op in _ops([per[c] for c in labels], rp, "action_mix")}
    rp.stacked_shares(axes[0, 0], xs, mix, width=0.6)
    axes[0, 0].set_xticks(xs, labels)
    rp.style(axes[0, 0], "Action mix per controller", "controller", "share of steps (%)", int_x=False)
    axes[0, 0].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    written.append(rp.save(fig, out / "compare_actions.png"))

    groups = rp.group_tracks(steps, ("controller", "episode", "env"))
    first: dict[str, tuple[Any, ...]] = {}
    for group in sorted(groups, key=lambda k: rp.num(k[1])):
        first.setdefault(str(group[0]), group)
    order = [c for c in labels if c in first] + [c for c in first if c not in labels]
    tracks = [(f"{c} ep {first[c][1]}{rp.final_acc(groups[first[c]])}", groups[first[c]]) for c in order]
    written.append(rp.lifecycle_figure([("First episode of each controller", tracks)], out / "lifecycle.png"))
    return written


def _verdict(results: dict[str, Any], c: str, ref: str) -> str:
    """Tick-label line: the pairwise verdict of `c` against the reference controller."""
    if c == ref:
        return "(reference)"
    p = ((results.get("pairwise") or {}).get(c) or {}).get(ref)
    if not p:
        return ""
    return f"{_num(p.get('mean_delta')):+.2f} pp vs {ref}\n{p.get('verdict', '')}"


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan


# ---------------------------------------------------------------------------------------------- ppo


def _ppo(history: list[dict], steps: list[dict], episodes: list[dict], out: Path) -> list[Path]:
    from esper.cli import report_plots as rp

    hist = sorted(history, key=lambda h: rp.num(h.get("batch")))
    x = [rp.num(h.get("batch")) for h in hist]
    mk = rp.mark_markers(len(x))
    written = []

    fig, axes = rp.new_figure(10, 5.2)
    ax = axes[0, 0]
    pts = [(rp.num(e.get("batch")), rp.num(e.get("final_accuracy"))) for e in episodes]
    if pts:
        ax.scatter(*zip(*pts), s=12, color="#7f7f7f", alpha=0.5, label="episode final accuracy", zorder=2)
    ax.plot(x, [rp.num(h.get("avg_accuracy")) for h in hist], color="#1f77b4", linewidth=1.5, label="batch mean",
            zorder=3, **mk)
    ax.plot(x, [rp.num(h.get("rolling_accuracy")) for h in hist], color="#d62728", linewidth=2.2,
            label="rolling mean", zorder=4)
    rp.style(ax, "Accuracy per rollout batch", "rollout batch", "final validation accuracy (%)")
    ax.legend(fontsize=9, loc="lower right")
    written.append(rp.save(fig, out / "accuracy.png"))
    step_batches = sorted({r.get("batch") for r in steps if not math.isnan(rp.num(r.get("batch")))}, key=rp.num)
    loss_groups = {f"batch {b}": [r for r in steps if r.get("batch") == b] for b in dict.fromkeys(step_batches[:1]
                                                                                                  + step_batches[-1:])}
    written.append(rp.loss_figure(loss_groups, "Loss per epoch in the first and last rollout batch, mean over envs "
                                  "(solid: validation, dashed: training)", out / "loss.png"))

    by_batch = rp.group_tracks(steps, ("batch", "env"))
    batches = sorted({k[0] for k in by_batch}, key=rp.num)
    acc = {rp.num(h.get("batch")): rp.num(h.get("avg_accuracy")) for h in hist}
    scored = [b for b in batches if not math.isnan(acc.get(rp.num(b), math.nan))]
    best = max(scored, key=lambda b: acc[rp.num(b)]) if scored else batches[-1]
    panels: list[tuple[str, list[Any]]] = []
    for title, b in ((f"Last batch ({batches[-1]})", batches[-1]), (f"Best batch ({best})", best)):
        if panels and b == batches[-1]:
            panels[0] = (f"Last batch = best batch ({b})", panels[0][1])
            continue
        keys = sorted((k for k in by_batch if k[0] == b), key=lambda k: rp.num(k[1]))
        shown = keys[:4]
        more = f", first {len(shown)} of {len(keys)} envs" if len(keys) > len(shown) else ""
        avg = acc.get(rp.num(b), math.nan)
        panels.append((f"{title}: avg accuracy {avg:.1f}%{more}",
                       [(f"env {k[1]}{rp.final_acc(by_batch[k])}", by_batch[k]) for k in shown]))
    written.append(rp.lifecycle_figure(panels, out / "lifecycle.png"))

    fig, axes = rp.new_figure(10, 5)
    shares = {op: [100 * rp.num((h.get("action_shares") or {}).get(op, 0.0)) for h in hist]
              for op in _ops(hist, rp, "action_shares")}
    rp.stacked_shares(axes[0, 0], x, shares, labels=len(x) <= 8)
    rp.style(axes[0, 0], "Action shares per rollout batch", "rollout batch", "share of steps (%)")
    axes[0, 0].set_ylim(0, 100)
    axes[0, 0].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    written.append(rp.save(fig, out / "actions.png"))

    fig, axes = rp.new_figure(10, 5.2)
    comp_rows = [h.get("reward_components") or {} for h in hist]
    names = rp.reward_names(comp_rows)
    comps = {n: [rp.num(c.get(n, 0.0)) for c in comp_rows] for n in names}
    total = [rp.num(c["total"]) if "total" in c else sum(rp.num(c.get(n, 0.0)) for n in names) for c in comp_rows]
    rp.reward_panel(axes[0, 0], x, comps, total, "rollout batch", "Mean reward components per rollout batch")
    written.append(rp.save(fig, out / "rewards.png"))

    written.append(rp.ppo_health_figure(hist, x, out / "ppo_health.png"))
    return written
