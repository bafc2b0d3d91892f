"""`esper report`: PNGs for fake heuristic / compare / ppo run directories built from the typed rows' own to_dict(),
clear errors for missing or wrong-schema files, and plots that draw exactly the intervals results.json reports."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from esper.cli.main import main
from esper.env.logs import EpisodeResult, SlotSummary, StepRow
from esper.env.step_record import SUMMED_FIELDS
from esper.evaluation.comparison import ComparisonResult
from esper.report import plots as report_plots
from esper.report.compare import final_accuracy_estimates
from esper.report.lifecycle import NO_SEEDS, build_lifecycle
from esper.report.render import render_report
from esper.report.study import build_compute_figure
from esper.simic.ppo.history import UPDATE_METRICS, PPOHistoryRow
from esper.storage.rows import LogFormatError
from esper.storage.rundir import json_safe

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
REAL_DPI = report_plots.DPI
EPOCHS = 5
# early: germinated at 1, fossilized at 5; mid: germinated at 2, culled at 4 (slot empties); late: never used.
EARLY = {1: "GERMINATED", 2: "TRAINING", 3: "BLENDING", 4: "PROBATIONARY", 5: "FOSSILIZED"}
MID = {2: "GERMINATED", 3: "TRAINING"}
ACTIONS = {1: ("GERMINATE", "early"), 2: ("GERMINATE", "mid"), 4: ("CULL", "mid"), 5: ("FOSSILIZE", "early")}
CONTROLLERS = ("static", "heuristic", "random")


@pytest.fixture(autouse=True)
def _low_dpi(monkeypatch: pytest.MonkeyPatch) -> None:
    """Same figures at a lower resolution: rasterizing is most of the cost and these tests check files, not pixels."""
    monkeypatch.setattr(report_plots, "DPI", 50)


def _seed(stage: str | None, blueprint: str) -> SlotSummary | None:
    return None if stage is None else SlotSummary(stage, blueprint, 0.5, 0.7)


def step_rows(controller: str, episode: int, env: int, batch: int, *, active: bool = True,
              base_acc: float = 60.0) -> list[StepRow]:
    rows = []
    for epoch in range(1, EPOCHS + 1):
        op, slot = ACTIONS.get(epoch, ("WAIT", None)) if active else ("WAIT", None)
        early = _seed(EARLY.get(epoch), "conv_light") if active else None
        mid = _seed(MID.get(epoch), "attention") if active else None
        comps: dict[str, Any] = {
            "family": "contribution", "attribution": 0.2 * epoch, "proxy": 0.0,
            "blending_warning": -0.1 if epoch == 3 else 0.0, "probation_warning": 0.0, "pbrs": 0.3, "rent": -0.15,
            "action_shaping": -0.02 if op != "WAIT" else 0.0, "terminal": 3.0 if epoch == EPOCHS else 0.0,
            "governor_penalty": 0.0, "loss_primary": 0.0, "sparse_terminal": 0.0, "val_accuracy": base_acc + 3 * epoch,
            "action_name": op, "action_success": True}
        total = sum(v for k, v in comps.items() if k not in ("family", "val_accuracy", "action_name", "action_success"))
        rows.append(StepRow(
            batch=batch, env=env, episode=episode, epoch=epoch, controller=controller, op=op, slot=slot,
            blueprint="conv_light" if op == "GERMINATE" else None, blend=None, success=True, reason="test",
            # a diverged first epoch: the run directory writes NaN as the string "NaN"
            train_loss=math.nan if epoch == 1 else 1.0 / epoch, train_accuracy=base_acc + 2 * epoch,
            val_loss=1.1 / epoch, val_accuracy=base_acc + 3 * epoch, rollback=False,
            slots={"early": early, "mid": mid, "late": None},
            seed_params=(12_000 if early else 0) + (30_000 if mid else 0),
            reward_components={**comps, "total": total}, reward=total))
    return rows


def episode_row(controller: str, episode: int, env: int, batch: int, *, active: bool = True,
                base_acc: float = 60.0, test_acc: float | None = None) -> EpisodeResult:
    curve = [base_acc + 3 * e for e in range(1, EPOCHS + 1)]
    counts = {"WAIT": 1, "GERMINATE": 2, "FOSSILIZE": 1, "CULL": 1} if active else {
        "WAIT": EPOCHS, "GERMINATE": 0, "FOSSILIZE": 0, "CULL": 0}
    return EpisodeResult(
        controller=controller, env_id=env, episode=episode, batch=batch, env_seed=42 + episode, host_width=1.0,
        host_params=100_000, final_accuracy=curve[-1], final_loss=0.9, twin_final_accuracy=None,
        twin_final_loss=None, best_accuracy=max(curve), seeds_created=2 if active else 0,
        seeds_fossilized=1 if active else 0, seeds_culled=1 if active else 0, params_added=12_000 if active else 0,
        action_counts=counts, accuracy_curve=curve, total_reward=4.2, rollbacks=0, final_test_accuracy=test_acc,
        final_test_loss=None if test_acc is None else 1.0)


def history_row(batch: int, **update: float) -> PPOHistoryRow:
    return PPOHistoryRow(
        batch=batch, episodes_completed=2 * batch + 2, n_envs=2, avg_accuracy=75.5 - 5 * batch,  # best batch 0
        rolling_accuracy=70.5 + 2.5 * batch, best_rolling_accuracy=73.0, env_accuracies=[75.0, 76.0],
        avg_reward=4.2, action_shares={"WAIT": 0.2, "GERMINATE": 0.4, "FOSSILIZE": 0.2, "CULL": 0.2},
        reward_components={"attribution": 0.6, "pbrs": 0.3, "rent": -0.15, "action_shaping": -0.016,
                           "terminal": 0.6},
        seeds_created=2, seeds_fossilized=1, seeds_culled=1, rollbacks=0, anomalies=[], rollout_seconds=1.0,
        update_seconds=0.5, env_epochs_per_second=10.0, batch_loads=5, updates_run=batch + 1, **update)


def _write(run: Path, command: str, files: dict[str, Any]) -> Path:
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"command": command, "argv": [], "config": {}}))
    for name, content in files.items():
        if name.endswith(".jsonl"):
            text = "".join(json.dumps(json_safe(r.to_dict())) + "\n" for r in content)
        else:
            text = json.dumps(json_safe(content))
        (run / name).write_text(text)
    return run


def make_heuristic(root: Path) -> Path:
    steps = [r for ep in range(2) for r in step_rows("heuristic", ep, 0, ep, base_acc=60 + 2 * ep)]
    episodes = [episode_row("heuristic", ep, 0, ep, base_acc=60 + 2 * ep) for ep in range(2)]
    return _write(root / "heuristic", "heuristic", {"steps.jsonl": steps, "episodes.jsonl": episodes})


def make_compare(root: Path, episodes_per_controller: int = 3, *, tested: bool = False) -> Path:
    """A comparison of CONTROLLERS; `tested`: every episode has a final test accuracy (unlike its validation one,
    and ordered otherwise), so test accuracy is the primary metric."""
    steps, episodes = [], []
    for ep in range(episodes_per_controller):
        for env, c in enumerate(CONTROLLERS):
            active, acc = c != "static", 58 + 2 * env + (ep * 7 % 5)
            test = 70 - 3 * env + (ep * 3 % 4) if tested else None
            steps += step_rows(c, ep, env, ep, active=active, base_acc=acc)
            episodes.append(episode_row(c, ep, env, ep, active=active, base_acc=acc, test_acc=test))
    results = ComparisonResult.from_episodes(list(CONTROLLERS), episodes, tie_threshold=0.5, seed=42)
    return _write(root / "compare", "compare", {"results.json": results.to_dict(), "steps.jsonl": steps,
                                                "episodes.jsonl": episodes})


def make_ppo(root: Path) -> Path:
    steps, episodes, history = [], [], []
    for batch in range(2):
        for env in range(2):
            acc = 55 + 5 * batch + env
            steps += step_rows("ppo", 2 * batch + env, env, batch, base_acc=acc)
            episodes.append(episode_row("ppo", 2 * batch + env, env, batch, base_acc=acc))
        history.append(history_row(batch, policy_loss=-0.01, value_loss=0.5 - 0.1 * batch,
                                   entropy=1.9 - 0.1 * batch, entropy_op=1.2, approx_kl=0.004 + 0.002 * batch,
                                   clip_fraction=0.05, explained_variance=0.1 + 0.3 * batch, ratio_max=1.3,
                                   ratio_min=0.75))
    history.append(history_row(2, skipped_update=1.0))  # a skipped update: no PPO metrics at all
    return _write(root / "ppo", "ppo", {"history.jsonl": history, "steps.jsonl": steps, "episodes.jsonl": episodes})


EXPECTED = {
    "heuristic": (make_heuristic, {"accuracy.png", "loss.png", "lifecycle.png", "actions.png", "rewards.png",
                                   "params.png"}),
    "compare": (make_compare, {"compare_final_accuracy.png", "compare_curves.png", "compare_loss.png",
                               "compare_params.png", "compare_actions.png", "lifecycle.png"}),
    "ppo": (make_ppo, {"accuracy.png", "loss.png", "lifecycle.png", "actions.png", "rewards.png", "ppo_health.png"}),
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_report_writes_valid_pngs(tmp_path: Path, kind: str) -> None:
    make, expected = EXPECTED[kind]
    run = make(tmp_path)
    written = render_report(run)
    assert {p.name for p in written} == expected
    for path in written:
        assert path.parent == run / "report"
        data = path.read_bytes()
        assert len(data) > 1000 and data.startswith(PNG_MAGIC), path


@pytest.mark.parametrize(("kind", "missing"), [("heuristic", "steps.jsonl"), ("compare", "results.json"),
                                               ("ppo", "history.jsonl"), ("compare", "config.json")])
def test_missing_file_is_named(tmp_path: Path, kind: str, missing: str) -> None:
    run = EXPECTED[kind][0](tmp_path)
    (run / missing).unlink()
    with pytest.raises(FileNotFoundError, match=missing.replace(".", r"\.")):
        render_report(run)


def test_empty_log_and_unknown_run_type(tmp_path: Path) -> None:
    run = make_heuristic(tmp_path)
    (run / "steps.jsonl").write_text("")
    with pytest.raises(ValueError, match=r"steps\.jsonl has no complete rows"):
        render_report(run)
    (run / "config.json").write_text(json.dumps({"command": "datagen"}))
    with pytest.raises(ValueError, match="datagen"):
        render_report(run)
    (run / "config.json").write_text("[1, 2]")
    with pytest.raises(LogFormatError, match="command"):
        render_report(run)


def _drop_key(line: str, key: str) -> str:
    row = json.loads(line)
    del row[key]
    return json.dumps(row)


@pytest.mark.parametrize(("kind", "name", "line"), [("heuristic", "steps.jsonl", 3), ("heuristic", "episodes.jsonl", 2),
                                                    ("ppo", "history.jsonl", 1)])
def test_wrong_schema_log_is_a_clear_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str,
                                                 name: str, line: int) -> None:
    run = EXPECTED[kind][0](tmp_path)
    path = run / name
    lines = path.read_text().splitlines()
    lines[line - 1] = _drop_key(lines[line - 1], "batch")  # e.g. written by an older esper
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(LogFormatError, match=rf"{name.replace('.', '[.]')}:{line} does not match"):
        render_report(run)
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{name}:{line}" in err and "schema" in err and "Traceback" not in err
    assert not (run / "report").exists()  # nothing half-drawn


@pytest.mark.parametrize("damage", ["ci", "pair", "episode", "reference"])
def test_wrong_schema_results_is_a_clear_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     damage: str) -> None:
    run = make_compare(tmp_path)
    data = json.loads((run / "results.json").read_text())
    if damage == "ci":  # a results.json from before per-controller intervals
        del data["per_controller"]["random"]["final_accuracy"]["ci95"]
    elif damage == "pair":
        del data["pairwise"]["random"]["static"]["verdict"]
    elif damage == "episode":
        data["episodes"][1]["unknown_field"] = 1
    else:
        data["reference"] = "random"
    (run / "results.json").write_text(json.dumps(data))
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "results.json" in err and "Traceback" not in err


@pytest.mark.parametrize("tested", [False, True], ids=["validation only", "test scores"])
def test_compare_plot_draws_the_intervals_results_json_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               tested: bool) -> None:
    """The figure is on the primary metric: test accuracy (means, intervals and points) when every episode has a
    test score, validation accuracy otherwise; its titles name the metric and its intervals are t-intervals."""
    run = make_compare(tmp_path, tested=tested)
    calls: list[dict[str, Any]] = []
    real = report_plots.final_accuracy_figure

    def spy(controllers: Any, deltas: Any, **kw: Any) -> Any:
        fig = real(controllers, deltas, **kw)
        calls.append({"controllers": controllers, "deltas": deltas, "fig": fig, **kw})
        return fig

    monkeypatch.setattr(report_plots, "final_accuracy_figure", spy)
    render_report(run)
    results = json.loads((run / "results.json").read_text())
    metric, key = ("test", "final_test_accuracy") if tested else ("validation", "final_accuracy")
    pair_metric = "test_accuracy" if tested else "val_accuracy"
    assert {p["metric"] for row in results["pairwise"].values() for p in row.values()} == {pair_metric}
    (call,) = calls
    assert call["reference"] == "static" and call["tie_threshold"] == 0.5 and call["metric"] == metric
    assert [e.label for e in call["controllers"]] == list(CONTROLLERS)
    for est in call["controllers"]:
        reported = results["per_controller"][est.label][key]
        assert [est.mean, est.low, est.high] == [reported["mean"], *reported["ci95"]]
        assert sorted(est.points) == sorted(e[key] for e in results["episodes"] if e["controller"] == est.label)
        assert f"[{reported['ci95'][0]:.2f}, {reported['ci95'][1]:.2f}]" in est.caption
    if tested:  # the test numbers, not the validation ones beside them
        assert [e.mean for e in call["controllers"]] != [results["per_controller"][c]["final_accuracy"]["mean"]
                                                         for c in CONTROLLERS]
    assert [e.label for e in call["deltas"]] == ["heuristic", "random"]
    for est in call["deltas"]:
        pair = results["pairwise"][est.label]["static"]
        assert [est.mean, est.low, est.high] == [pair["mean_delta"], *pair["ci95"]]
        assert pair["verdict"] in est.caption
        assert sum(est.points) / len(est.points) == pytest.approx(pair["mean_delta"])
        if tested:
            assert pair["mean_delta"] != pytest.approx(pair["val"]["mean_delta"])
    # the per-controller interval is a real interval here (episodes differ), not a degenerate point
    static = call["controllers"][0]
    assert static.low < static.mean < static.high
    left, right = call["fig"].axes[:2]
    assert left.get_title().startswith(f"Final {metric} accuracy per controller") and "t-interval" in left.get_title()
    assert right.get_title().startswith(f"Δ final {metric} accuracy vs static") and "t-interval" in right.get_title()
    assert "bootstrap" not in left.get_title() + right.get_title()
    assert [t.get_text() for t in right.get_legend().get_texts()] == ["tie (|Δ| < 0.5 pp)"]


def test_lifecycle_without_seeds_says_so() -> None:
    active = step_rows("heuristic", 0, 0, 0)
    idle = step_rows("static", 0, 1, 0, active=False)

    def notes(fig: Any) -> list[str]:
        return [t.get_text() for ax in fig.axes for t in ax.texts if t.get_text() == NO_SEEDS]

    assert notes(build_lifecycle([("idle", [("static", idle)])])) == [NO_SEEDS]
    assert notes(build_lifecycle([("both", [("heuristic", active), ("static", idle)])])) == [NO_SEEDS]
    assert notes(build_lifecycle([("active", [("heuristic", active)])])) == []


def test_health_panels_name_history_update_metrics() -> None:
    keys = {k for _, _, ks in report_plots.HEALTH_PANELS for k in ks}
    assert keys <= UPDATE_METRICS


@pytest.mark.parametrize(("value", "expected"), [(3, 3.0), (-1.5, -1.5), (None, math.nan), ("NaN", math.nan),
                                                 ("Infinity", math.nan), (math.inf, math.nan)])
def test_as_float_maps_missing_and_non_finite_to_nan(value: Any, expected: float) -> None:
    got = report_plots.as_float(value)
    assert got == expected or (math.isnan(got) and math.isnan(expected))


def test_cli_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_heuristic(tmp_path)
    assert main(["report", str(run), "--out", str(tmp_path / "plots")]) == 0
    assert "lifecycle.png" in capsys.readouterr().out
    assert {p.name for p in (tmp_path / "plots").iterdir()} == EXPECTED["heuristic"][1]
    assert not (run / "report").exists()
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (run / "episodes.jsonl").unlink()
    assert main(["report", str(run)]) == 2
    assert "episodes.jsonl" in capsys.readouterr().err


def test_every_reward_component_has_a_colour_of_its_own() -> None:
    """gap and param_cost (the default reward) included: no two summed components share a colour, none is grey."""
    colours = [report_plots.reward_color(name) for name in SUMMED_FIELDS]
    assert len(set(colours)) == len(SUMMED_FIELDS)
    assert report_plots.reward_color("an unknown component") not in colours


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_lifecycle_labels_give_the_episode_s_final_accuracy(tmp_path: Path, kind: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The accuracy beside a lifecycle track is the final one (episodes.jsonl, the tables' number), not the one
    the last decision saw an epoch earlier (the last step row's)."""
    labels: list[str] = []

    def capture(panels: Any, path: Path) -> Path:
        labels.extend(label for _, tracks in panels for label, _ in tracks)
        return path

    monkeypatch.setattr(f"esper.report.{kind}.lifecycle_figure", capture)
    run = EXPECTED[kind][0](tmp_path)
    episodes = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    for e in episodes:  # the final epoch moved on from what the last decision saw
        e["final_accuracy"] += 0.5
    (run / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    if (run / "results.json").exists():
        results = json.loads((run / "results.json").read_text())
        for e in results["episodes"]:
            e["final_accuracy"] += 0.5
        (run / "results.json").write_text(json.dumps(results))
    render_report(run)
    finals = {round(e["final_accuracy"], 1) for e in episodes}
    assert labels and all("(final " in label for label in labels)
    shown = {float(label.split("(final ")[1].rstrip("%)")) for label in labels}
    assert shown <= finals


def test_every_compare_png_stays_within_2000_px_at_60_controllers(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A selection round compares ~60 candidates: each image keeps to MAX_PIXELS (rows, not columns, per
    controller; the reference and the best others when there are more than fit, with a note saying so)."""
    monkeypatch.setattr(report_plots, "DPI", REAL_DPI)  # the size a user gets, not the fast test resolution
    labels = ["static", *(f"fixed:candidate_{i}" for i in range(59))]
    steps, episodes = [], []
    for ep in range(2):
        for env, c in enumerate(labels):
            acc = 50 + 0.5 * env + ep  # later candidates are better
            steps += step_rows(c, ep, env, ep, active=c != "static", base_acc=acc)
            episodes.append(episode_row(c, ep, env, ep, active=c != "static", base_acc=acc, test_acc=acc + 5))
    results = ComparisonResult.from_episodes(labels, episodes, tie_threshold=0.5, seed=42)
    run = _write(tmp_path / "compare", "compare", {"results.json": results.to_dict(), "steps.jsonl": steps,
                                                   "episodes.jsonl": episodes})
    shown: list[list[str]] = []
    real = report_plots.final_accuracy_figure

    def spy(controllers: Any, deltas: Any, **kw: Any) -> Any:
        shown.append([e.label for e in controllers])
        assert f"{report_plots.MAX_ROWS} of 60 controllers shown:" in kw["note"]
        return real(controllers, deltas, **kw)

    monkeypatch.setattr(report_plots, "final_accuracy_figure", spy)
    written = render_report(run)
    assert {p.name for p in written} == EXPECTED["compare"][1]
    for path in written:
        with Image.open(path) as image:
            assert max(image.size) <= report_plots.MAX_PIXELS, (path.name, image.size)
    assert shown == [["static", *labels[-(report_plots.MAX_ROWS - 1):]]]  # the reference and the best


def _tested(controllers: dict[str, list[float]], *, tie_threshold: float = 0.5) -> ComparisonResult:
    """A comparison whose controllers scored these final test accuracies, one per paired episode."""
    episodes = [episode_row(c, ep, env, ep, active=c != "static", test_acc=acc)
                for env, (c, accs) in enumerate(controllers.items()) for ep, acc in enumerate(accs)]
    return ComparisonResult.from_episodes(list(controllers), episodes, tie_threshold=tie_threshold, seed=42)


def test_accuracy_intervals_stay_within_0_and_100() -> None:
    """Two episodes at 79 and 100 % have a t-interval of about [-40, 220]: drawn and captioned within [0, 100]."""
    result = _tested({"static": [70.0, 72.0, 71.0], "heuristic": [79.0, 100.0, 99.5]})
    reported = result.per_controller["heuristic"]["final_test_accuracy"]["ci95"]
    assert reported[1] > 100  # results.json keeps the interval as computed
    controllers, _ = final_accuracy_estimates(result)
    heuristic = controllers[1]
    assert (heuristic.low, heuristic.high) == (reported[0], 100.0) and heuristic.caption.endswith(", 100.00]")
    fig = report_plots.final_accuracy_figure(controllers, [], reference="static", tie_threshold=0.5,
                                             colors={"static": "k", "heuristic": "b"}, metric="test")
    assert max(max(line.get_xdata()) for line in fig.axes[0].lines) <= 100.0
    assert "within [0, 100]" in fig.axes[0].get_title()
    whiskers = [seg for container in build_compute_figure(result).axes[0].containers
                for seg in container.lines[2][0].get_segments()]
    assert whiskers and max(y for seg in whiskers for _, y in seg) <= 100.0


def test_the_frontier_legend_names_the_widths_that_ran() -> None:
    """A study with static and static:2 only once drew a legend naming widths 0.5 · 1 · 1.5 · 2."""
    two = build_compute_figure(_tested({"static": [70.0, 72.0], "static:2": [75.0, 76.0], "heuristic": [71.0, 73.0]}))
    four = build_compute_figure(_tested({"static:0.5": [60.0, 61.0], "static": [70.0, 72.0],
                                         "static:1.5": [73.0, 74.0], "static:2": [75.0, 76.0]}))

    def legend(fig: Any) -> list[str]:
        return [t.get_text() for t in fig.axes[0].get_legend().get_texts() if t.get_text().startswith("static")]

    assert legend(two) == ["static, widths 1 · 2"] and legend(four) == ["static, widths 0.5 · 1 · 1.5 · 2"]


@pytest.mark.parametrize(("threshold", "shown"), [(100 / 300, "0.33"), (100 / 3000, "0.033"), (0.5, "0.5"),
                                                  (1.0, "1"), (0.0, "0")])
def test_the_tie_threshold_reads_at_two_decimals_at_most(threshold: float, shown: str) -> None:
    result = _tested({"static": [70.0, 72.0, 71.0], "heuristic": [75.0, 73.0, 74.0]}, tie_threshold=threshold)
    controllers, deltas = final_accuracy_estimates(result)
    fig = report_plots.final_accuracy_figure(controllers, deltas, reference="static", tie_threshold=threshold,
                                             colors={"static": "k", "heuristic": "b"}, metric="test")
    assert [t.get_text() for t in fig.axes[1].get_legend().get_texts()] == [f"tie (|Δ| < {shown} pp)"]
