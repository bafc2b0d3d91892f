"""`summary.md` of a study: the regime first (is this about growth at all?), then every controller with its cost, each
training run's policy, the aggregates over runs, the static frontier, and the two verdicts a reader looks for."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from esper.evaluation.regime import HEADROOM_PP, SLOPE_THRESHOLD
from esper.evaluation.results import ComparisonResult
from esper.evaluation.runs import FINAL, INIT, REPLAY_ROLE
from esper.evaluation.study import StudyPreset, StudyResults, references
from esper.simic.ppo.config import TrainingConfig
from esper.storage.rows import LogFormatError
from esper.storage.rundir import write_json_atomic, write_text_atomic

__all__ = ["REFERENCE_STUDY", "SUMMARY_FILE", "convergence_line", "demo_note", "mark_rerun", "summary_markdown"]

SUMMARY_FILE = "summary.md"
REFERENCE_STUDY = "esper study --preset synthetic --workers 2"
"""The study whose numbers are results: the CPU reference preset, its env groups on two cores."""


def _interval(mean: float | None, ci: Sequence[float] | None) -> str:
    if mean is None or ci is None:
        return "—"
    return f"{mean:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}]"


def convergence_line(regime: Mapping[str, Any]) -> str:
    """One line a reader cannot miss: converged or not, with the slope it rests on, and the headroom."""
    c = regime.get("convergence")
    if c is None:
        return "Convergence not measured: the study has no static host."
    epochs = c["epochs"]
    verdict = (f"**converged**: the static host's mean validation accuracy rises {c['slope_pp_per_epoch']:+.3f} pp per "
               f"epoch over epochs {epochs[0]}–{epochs[-1]} (≤ {SLOPE_THRESHOLD} required; {c['seeds']} seeds, "
               f"{c['final_val_accuracy']:.2f} % at the end)") if c["converged"] else (
        f"**WARNING: NOT CONVERGED**: the static host's mean validation accuracy still rises "
        f"{c['slope_pp_per_epoch']:+.3f} pp per epoch over epochs {epochs[0]}–{epochs[-1]} (more than "
        f"{SLOPE_THRESHOLD}; {c['seeds']} seeds). Verdicts here measure how fast training starts, not what growth "
        f"adds: lengthen the episodes or raise the sample caps")
    room = regime.get("headroom", {})
    parts = [f"{label} − static {_interval(h['mean_delta'], h['ci95'])} pp" for label, h in room.items()]
    if parts:
        verdict += ". Headroom at the end of the episodes: " + "; ".join(parts)
        if not regime.get("has_headroom", True):
            verdict += f" — **both ≤ {HEADROOM_PP:g} pp: growth has nothing to add in this setting**"
    return verdict + "."


def demo_note(preset: StudyPreset, epochs: int) -> str:
    """What a workflow-demo study of `epochs`-epoch episodes (its own, `--set max_epochs` included) shows and what it
    cannot, and the command that gives a result instead. The preset's episodes are too short for any seed to finish
    its lifecycle, so shorter ones are too; of longer ones only the demo's size is known to say nothing."""
    own = TrainingConfig.preset(preset.training).episode.max_epochs
    why = ("are too short for any seed to finish its lifecycle, so the heuristic ends where static does and the policy "
           "is not expected to beat static" if epochs <= own else
           f"are longer than the preset's {own}, but a demo's few training episodes and seeds cannot tell what growth "
           f"adds")
    return (f"This was a workflow demo, not a result: its {epochs}-epoch episodes {why}.\n"
            f"For a result, run the reference study (hours on a 2-core CPU): {REFERENCE_STUDY}")


def _cost(cost: Mapping[str, Any] | None) -> str:
    if cost is None:
        return "not known"
    if cost["env_epochs"] == 0:
        return "0"
    return f"{cost['env_epochs']:,} env-epochs, {cost['gflops']:,.0f} GFLOPs"


def _controller_table(result: ComparisonResult, study: StudyResults, names: Mapping[str, str]) -> list[str]:
    lines = ["| controller | test acc | val acc | params | GFLOPs / episode | seconds | fossilized / created | "
             "cost to obtain |", "|---|---|---|---|---|---|---|---|"]
    for label in result.controllers:
        s: dict[str, Any] = dict(result.per_controller[label])
        test = s.get("final_test_accuracy")
        shown = "—" if test is None else f"{test['mean']:.2f}"
        lines.append(f"| {names[label]} | {shown} | "
                     f"{s['final_accuracy']['mean']:.2f} | {s['total_params']['mean']:,.0f} | "
                     f"{s['train_flops']['mean'] / 1e9:,.1f} | {s['wall_seconds']['mean']:.1f} | "
                     f"{s['seeds_fossilized']:.1f} / {s['seeds_created']:.1f} | "
                     f"{_cost(study.cost_to_obtain.get(label))} |")
    return lines


def _run_table(per_run: Sequence[Mapping[str, Any]], score: str = "final_test_accuracy",
               heading: str = "final test acc") -> list[str]:
    refs = [r for r in references(None) if per_run and r in per_run[0]["deltas"]]
    refs += [r for r in (per_run[0]["deltas"] if per_run else ()) if r not in refs]
    lines = [f"| run | {heading} | " + " | ".join(f"vs {r}" for r in refs) + " | controller or schedule |",
             "|---|---|" + "---|" * len(refs) + "---|"]
    for row in per_run:
        cells = [_interval(float(row["deltas"][r]["mean_delta"]), row["deltas"][r]["ci95"]) for r in refs]
        kind = "schedule" if row["schedule"] else ("controller" if REPLAY_ROLE in row["deltas"] else "—")
        lines.append(f"| {row['run']} | {row[score]:.2f} | " + " | ".join(cells) + f" | {kind} |")
    return lines


def _aggregate_table(aggregate: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["| X | vs Y | mean Δ | IQM | 95 % CI (runs × seeds) | P(X > Y) | runs better / worse |",
             "|---|---|---|---|---|---|---|"]
    for a in aggregate:
        lines.append(f"| {a['x']} | {a['y']} | {a['mean']:+.2f} | {a['iqm']:+.2f} | "
                     f"[{a['ci95'][0]:+.2f}, {a['ci95'][1]:+.2f}] | {a['prob_improvement']:.2f} | "
                     f"{a['better']} / {a['worse']} of {a['runs']} |")
    return lines


def _frontier_table(study: StudyResults, names: Mapping[str, str]) -> list[str]:
    compute, params = study.frontier.get("gflops", {}), study.frontier.get("params", {})
    if not compute:
        return []
    lines = ["", "Against the static frontier (static at widths 0.5, 1, 1.5 and 2, interpolated per seed): test Δ "
             "[95 % interval] against a static host of the same training GFLOPs and of the same parameter count "
             "(— where the controller's cost lies outside the widths' range). Positive: better than widening.", "",
             "| controller | vs static at equal training compute | vs static at equal parameters |", "|---|---|---|"]
    for label, gap in compute.items():
        other = params.get(label, {})
        lines.append(f"| {names[label]} | {_interval(gap['mean_delta'], gap['ci95'])} | "
                     f"{_interval(other.get('mean_delta'), other.get('ci95'))} |")
    return lines


def _objective_section(study: StudyResults) -> list[str]:
    """The per-run and aggregate tables on the objective the policies were trained on."""
    objective = study.objective
    if objective is None:
        return []
    what = "training compute" if objective["charge"] == "compute" else "parameters"
    return ["", f"**On the objective the policies were trained on** (their reward's undiscounted return): test "
            f"accuracy minus the paired static host's, minus λ = {objective['cost']:.3f} pp per 100 % of {what} added "
            f"beyond it — with the measured λ, accuracy above the static frontier at equal {what}. Each run's final "
            f"policy, then the aggregates over runs (the raw test accuracy tables are above).", "",
            *_run_table(objective["per_run"], "final_objective", "final objective"), "",
            *_aggregate_table(objective["aggregate"])]


def _learned_line(aggregate: Sequence[Mapping[str, Any]], y: str, question: str, unit: str) -> list[str]:
    row = next((a for a in aggregate if a["x"] == FINAL and a["y"] == y), None)
    if row is None:
        return []
    return [f"- **{question}** The final policy beats {'its own init' if y == INIT else y} in {row['better']} of "
            f"{row['runs']} runs (loses in {row['worse']}); over runs and seeds IQM {row['iqm']:+.2f}, "
            f"{_interval(row['mean'], row['ci95'])} {unit}."]


def _off_teacher(effect: dict[str, Any] | None) -> str:
    if effect is None:
        return "—"
    counts = f"{effect['decisions']:,} decisions in {effect['deviating']} of {effect['episodes']} episodes"
    if effect["per_decision"] is None:
        return f"— ({counts})"
    return f"{_interval(effect['per_decision'], effect['ci95'])} pp ({counts})"


def _verdicts(result: ComparisonResult, study: StudyResults) -> list[str]:
    lines: list[str] = []
    objective = study.objective
    if objective is not None and study.teacher is not None:
        lines += _learned_line(objective["aggregate"], study.teacher,
                               f"Did it improve on its teacher ({study.teacher})?", "pp of the objective")
    if study.teacher_overrides is not None:
        shares = ", ".join("—" if share is None else f"{share:.1%}" for share in study.teacher_overrides)
        lines.append(f"- **How far did it leave its teacher?** Share of each run's final-policy evaluation decisions "
                     f"that are not the teacher's choice: {shares}.")
    if study.off_teacher is not None:
        lines.append("- **What did leaving the teacher return in training?** The return's change per off-teacher "
                     "decision, paired within each rollout group (its episodes share their seeds, so only their "
                     "decisions differ): " + "; ".join(f"run {r} {_off_teacher(e)}"
                                                      for r, e in enumerate(study.off_teacher)) + ".")
    lines += _learned_line(study.aggregate, INIT, "Did the controller learn?", "pp")
    schedules = sum(row["schedule"] for row in study.per_run)
    if any(REPLAY_ROLE in row["deltas"] for row in study.per_run):
        lines.append(f"- **Controller or schedule?** {len(study.per_run) - schedules} of {len(study.per_run)} runs "
                     f"beat their own open-loop replay; the others are reported as schedules.")
    compute = study.frontier.get("gflops", {})
    grown = {label: gap for label, gap in compute.items()
             if result.per_controller[label]["seeds_created"] > 0 and gap["ci95"] is not None}
    if grown:
        above = sorted(label for label, gap in grown.items() if gap["ci95"][0] > 0)
        lines.append("- **Does a grown network reach a wider static network's accuracy at less training compute?** "
                     + ("Yes: " + ", ".join(above) + " (interval above the frontier)." if above else
                        "No grown controller lies above the static frontier at equal compute with its interval "
                        "excluding 0."))
    return lines


def summary_markdown(result: ComparisonResult, study: StudyResults, *, title: str, command: str,
                     chosen: Mapping[str, str] | None = None, policy_blueprints: Sequence[str] | None = None,
                     selection_record: Mapping[str, Any] | None = None) -> str:
    chosen = chosen or {}
    epochs = statistics.fmean(len(e.accuracy_curve) for e in result.episodes)
    seeds = result.per_controller[result.controllers[0]]["episodes"]
    names = {label: f"{label} ({chosen[label]})" if label in chosen else label for label in result.controllers}
    lines = [f"# {title}", "", convergence_line(study.regime), "",
             f"{epochs:.0f}-epoch episodes on {seeds} paired evaluation seeds, {study.runs} training run(s). "
             f"Accuracies are final-model means (%); Δ is the paired difference in final test accuracy (pp). Cost: "
             f"training GFLOPs and seconds per episode (host, seeds, validation, probes), and what it took to obtain "
             f"the controller (the selection search, PPO training with its static twins, the episodes a replay "
             f"reads; 0 for controllers named by hand).", "", *_verdicts(result, study), "",
             *_controller_table(result, study, names), "",
             "Each run's final policy: paired test Δ [95 % interval over seeds]; a run that does not beat its own "
             "replay is a schedule.", "", *_run_table(study.per_run), "",
             "Over runs: the mean and IQM of the per-run mean Δ, its interval over runs and seeds (runs and seeds "
             "both random), P(X > Y) on a random run and seed, and how many runs' own interval lies above / below 0.",
             "", *_aggregate_table(study.aggregate), *_objective_section(study), *_frontier_table(study, names)]
    if result.matched:
        m = result.matched
        lines += ["", f"static:matched is the static host at width {m['width']:.2f} ({m['host_params']:,} parameters), "
                  f"matched to the mean final parameters of {m['matched_to']} ({m['target_params']:,.0f})."]
    if chosen:
        lines += ["", "best-fixed and best-rule were chosen by mean validation accuracy on selection seeds disjoint "
                  "from the evaluation seeds, among single modules and then greedily larger combinations (see "
                  + ("selection/summary.md)." if selection_record is None else
                     f"the record {selection_record['path']}, written by `{selection_record['command']}` at esper "
                     f"{selection_record['esper_commit'][:12]} on the selection seeds of base seed "
                     f"{selection_record.get('seed')}; this study reused it, and its cost to obtain stays in the "
                     f"tables).")]
    if study.teacher is not None:
        lines += ["", f"The policies are residual on a teacher, {study.teacher}: evaluated greedily, each run's init "
                  "is that teacher (among the blueprints the policy may germinate), and its final policy is the "
                  "teacher moved by its training's returns, entropy bonus and KL penalty toward the teacher."]
    if study.copies:
        lines[-1] += (f" {', '.join(study.copies)}: the residual is still zero on every head, so the greedy decision "
                      f"is the teacher's in every state; these rows are the teacher's episodes, copied, not run "
                      f"again.")
    if policy_blueprints is not None:
        lines += ["", f"The policies (init and final) may germinate only {', '.join(policy_blueprints)}; the other "
                  "controllers keep every blueprint."]
    lines += ["", "Command:", "", f"    {command}", ""]
    return "\n".join(lines)


def mark_rerun(path: Path, seeds: int, runs: int) -> None:
    """A finished study rerun with other `seeds` or `runs` is unfinished again: until its new finish replaces them,
    its results.json (`complete`: false), results.csv and summary.md (a first line) say that they describe the
    earlier finish."""
    results = path / ComparisonResult.FILE
    if not results.is_file():
        return
    try:
        data = json.loads(results.read_text(encoding="utf-8"))
        earlier = int(data["study"]["seeds"]), int(data["study"]["runs"])
    except (ValueError, KeyError, TypeError) as exc:
        raise LogFormatError(f"{results} is not a study's results ({exc}): pass --overwrite to start the study "
                             f"over") from exc
    if earlier == (seeds, runs):
        return
    note = (f"incomplete: this study now runs {seeds} paired evaluation seeds and {runs} training run(s); these "
            f"results are from its earlier finish ({earlier[0]} seeds, {earlier[1]} runs) (rerun the command to "
            f"finish it)")
    write_json_atomic(results, {**data, "complete": False, "episodes_planned": seeds})
    for name, prefix in ((ComparisonResult.CSV_FILE, "# "), (SUMMARY_FILE, "> ")):
        file = path / name
        if file.is_file():
            lines = file.read_text(encoding="utf-8").splitlines(keepends=True)
            kept = lines[1:] if lines and lines[0].startswith(f"{prefix}incomplete:") else lines
            write_text_atomic(file, f"{prefix}{note}\n" + "".join(kept))
