"""`esper study` reruns: a study interrupted in any phase (a training run, a replay source, the evaluation) resumes
to the same results, also copied to another directory; more seeds extend it, other settings are refused, --overwrite
starts over. The studies here render no plots (the `no_study_plots_in_module` fixture): what they compute is what a
rerun must reproduce."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from esper.cli.main import main
from esper.evaluation.study_report import REFERENCE_STUDY
from esper.storage.rundir import RunDirectory, read_jsonl
from study_results import untimed, untimed_results

pytestmark = [pytest.mark.smoke, pytest.mark.usefixtures("no_study_plots_in_module")]

STUDY = ["study", "--preset", "quick", "--device", "cpu", "--no-tui", "--no-tensorboard",
         "--set", "n_episodes=2", "--set", "n_envs=2", "--set", "group_size=1", "--set", "max_epochs=3",
         "--set", "max_train_samples=64", "--set", "max_val_samples=32", "--set", "param_cost=1.0"]
"""The quick study at the smallest caps: a rerun must reproduce whatever the run computed, at any size."""


def _episodes(path: Path) -> list[dict[str, Any]]:
    return untimed(read_jsonl(path / "eval" / "episodes.jsonl"))


def test_study_reruns_resume_consistently(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "study"
    argv = [*STUDY, "--seeds", "2", "--run-dir", str(run)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Study directory: {run}")  # printed before any work
    assert "This was a workflow demo, not a result" in out and f"{REFERENCE_STUDY}\n" in out  # what the demo shows
    assert "its 3-epoch episodes" in out  # the episodes it ran (--set max_epochs=3), not the preset's 10
    complete = untimed_results(run)
    rows = read_jsonl(run / "eval" / "episodes.jsonl")
    episodes = untimed(rows)
    # static, static:2, heuristic, and run 0's init, final and replay; the init is its teacher (the heuristic) in every
    # state, so it is the one not run
    copies = json.loads((run / "results.json").read_text())["study"]["copies"]
    assert len(complete["controllers"]) == 6 and copies == {"ppo[0] (init)": "heuristic"}
    per_seed = 5
    assert len(episodes) == 2 * per_seed and (run / "train" / "run-0" / "events.jsonl").exists()
    summary = (run / "summary.md").read_text()
    assert "| run | final test acc | vs static | vs static:2 | vs heuristic | vs ppo (init) | vs replay |" in summary
    title = summary.splitlines()[0]
    assert title == "# esper study --preset quick (synthetic; augmentation crop (padding 4), flip; reward gap, λ_p 1)"
    study = json.loads((run / "results.json").read_text())["study"]
    assert study["reward"] == title.split("reward ")[1][:-1] and study["augmentation"] == "crop (padding 4), flip"

    # what a kill in the second paired episode leaves: episode 0 finished, episode 1 half written
    (run / "eval" / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in rows[:per_seed + 2]))
    (run / "results.json").unlink()
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Training run 0: finished" in out and f"{per_seed} finished episode(s) kept" in out
    assert untimed_results(run) == complete
    assert _episodes(run) == episodes

    # copied elsewhere, the study continues there: every finished phase resumes, not one episode runs again
    copy = tmp_path / "elsewhere" / "study"
    shutil.copytree(run, copy)
    assert main([*STUDY, "--seeds", "2", "--run-dir", str(copy)]) == 0
    out = capsys.readouterr().out
    for phase in ("replay-source/run-0", "eval"):
        assert f"Resuming {copy / phase}: " in out
        assert read_jsonl(copy / phase / "episodes.jsonl") == read_jsonl(run / phase / "episodes.jsonl")
    assert untimed_results(copy) == complete

    # a phase recorded before the training config had a field ran as that field's default does: it is kept ...
    phase_config, finished_rows = run / "eval" / "config.json", read_jsonl(run / "eval" / "episodes.jsonl")
    record = json.loads(phase_config.read_text())
    assert record["config"]["training"].pop("family") is None
    phase_config.write_text(json.dumps(record))
    assert main(argv) == 0
    assert read_jsonl(run / "eval" / "episodes.jsonl") == finished_rows  # not one episode rerun (same wall times)
    assert json.loads(phase_config.read_text())["config"]["training"]["family"] is None  # and recorded whole
    # ... unless the study now sets it otherwise: then the phase describes another setting and is refused, naming the
    # difference, its episodes kept
    record = json.loads(phase_config.read_text())
    record["config"]["training"]["episode"].pop("max_epochs")  # 3 here, not the default
    phase_config.write_text(json.dumps(record))
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "training.episode.max_epochs: 25 then, 3 now" in err and f"remove {run / 'eval'}" in err
    assert read_jsonl(run / "eval" / "episodes.jsonl") == finished_rows
    record["config"]["training"]["episode"]["max_epochs"] = 3
    phase_config.write_text(json.dumps(record))
    # a phase recorded by an esper whose training config had no sections is refused, naming the fix
    recorded = phase_config.read_text()
    record = json.loads(recorded)
    training = record["config"]["training"]
    record["config"]["training"] = {**{k: v for section in ("episode", "ppo", "reward", "execution")
                                       for k, v in training.pop(section).items()}, **training}
    phase_config.write_text(json.dumps(record))
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "config had no sections" in err and "start it over with --overwrite" in err
    phase_config.write_text(recorded)

    assert main([*STUDY, "--seeds", "3", "--run-dir", str(run)]) == 0  # more seeds extend the evaluation
    assert len(read_jsonl(run / "eval" / "episodes.jsonl")) == 3 * per_seed
    assert _episodes(run)[:2 * per_seed] == episodes

    assert main([*STUDY, "--seeds", "3", "--run-dir", str(run), "--tie-threshold", "2"]) == 2
    assert "other arguments" in capsys.readouterr().err
    assert main([*STUDY, "--seeds", "3", "--run-dir", str(run), "--set", "lr=0.01"]) == 2
    assert "lr" in capsys.readouterr().err

    assert main([*STUDY, "--seeds", "1", "--run-dir", str(run), "--overwrite"]) == 0
    assert len(read_jsonl(run / "eval" / "episodes.jsonl")) == per_seed
    assert json.loads((run / "config.json").read_text())["config"]["seeds"] == 1


TWO_RUNS = [*STUDY, "--runs", "2", "--seeds", "2", "--set", "n_episodes=4"]
"""Two training runs of a critic warm-up batch and two PPO batches each, then two replay sources of two episodes and a
2-seed evaluation: the episodes.jsonl rows, in order, are run 0 (2 + 4), run 1 (2 + 4), replay sources (2 + 2),
evaluation (2 × 7: each run's init takes its teacher's episodes, not run again)."""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, no_study_plots_in_module: None) -> Path:
    """The two-run study, uninterrupted."""
    path = tmp_path_factory.mktemp("reference") / "study"
    assert main([*TWO_RUNS, "--run-dir", str(path)]) == 0
    return path


@pytest.mark.parametrize(("phase", "rows"), [("training run 0, first actor batch", 3), ("training run 1", 8),
                                             ("replay source of run 1", 16), ("evaluation", 24)])
def test_ctrl_c_in_any_phase_of_a_two_run_study_resumes_to_the_same_results(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reference: Path, phase: str, rows: int) -> None:
    written = 0
    append = RunDirectory.append

    def interrupted(self: RunDirectory, name: str, row: dict[str, Any]) -> None:
        nonlocal written
        if name == "episodes.jsonl":
            written += 1
            if written == rows:
                raise KeyboardInterrupt  # Ctrl+C while this row is being written
        append(self, name, row)

    run = tmp_path / "study"
    monkeypatch.setattr(RunDirectory, "append", interrupted)
    assert main([*TWO_RUNS, "--run-dir", str(run)]) == 130, phase
    monkeypatch.setattr(RunDirectory, "append", append)
    assert not (run / "results.json").exists()
    assert main([*TWO_RUNS, "--run-dir", str(run)]) == 0
    assert untimed_results(run) == untimed_results(reference)
    assert _episodes(run) == _episodes(reference)
    for r in range(2):  # each training run resumed on its own to the same policy
        assert read_jsonl(run / "train" / f"run-{r}" / "history.jsonl")[-1]["batch"] == 2
        assert untimed(read_jsonl(run / "train" / f"run-{r}" / "episodes.jsonl")) == untimed(
            read_jsonl(reference / "train" / f"run-{r}" / "episodes.jsonl"))


def test_study_of_existing_policies_reproduces_the_evaluation_of_their_own_study(tmp_path: Path,
                                                                               reference: Path) -> None:
    trained = reference  # the module's two-run study, read only
    reused = tmp_path / "reused"
    assert main(["study", "--preset", "quick", "--device", "cpu", "--no-tui", "--no-tensorboard", "--seeds", "2",
                 "--ppo", str(trained / "train" / "run-0"), str(trained / "train" / "run-1"),
                 "--run-dir", str(reused)]) == 0
    assert not (reused / "train").exists()  # nothing trained: the runs' own policies were evaluated
    assert _episodes(reused) == _episodes(trained)
    assert untimed_results(reused)["pairwise"] == untimed_results(trained)["pairwise"]


def test_an_evaluation_under_way_that_runs_the_inits_keeps_running_them(tmp_path: Path, reference: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """An evaluation recorded by an esper that ran every init (rather than copying its teacher's episodes) is
    extended, not started over: its inits keep running, and their new episodes are still the teacher's."""
    run = tmp_path / "study"
    shutil.copytree(reference, run)
    phase = run / "eval"
    record = json.loads((phase / "config.json").read_text())
    specs = record["config"]["specs"]
    labels = ["static", "static:2", "heuristic", *(f"{name}[{r}]{role}" for r in range(2)
                                                   for name, role in (("ppo", " (init)"), ("ppo", " (final)"),
                                                                      ("replay", "")))]
    for r in range(2):
        at = specs.index(f"ppo:$STUDY_DIR/train/run-{r}/checkpoints/final.pt")
        specs.insert(at, specs[at].replace("final.pt", "init.pt"))
    record["config"]["controllers"] = []  # where that esper recorded the study's extra --controller specs
    (phase / "config.json").write_text(json.dumps(record))
    rows = read_jsonl(phase / "episodes.jsonl")
    teacher = {row["episode"]: row for row in rows if row["controller"] == "heuristic"}
    old = [{**row, "controller": label} if label.endswith("(init)") else row
           for episode in (0, 1) for label in labels
           for row in [teacher[episode] if label.endswith("(init)") else
                       next(x for x in rows if x["episode"] == episode and x["controller"] == label)]]
    (phase / "episodes.jsonl").write_text("".join(json.dumps(row) + "\n" for row in old))
    decisions = read_jsonl(phase / "steps.jsonl")  # each whole episode has its decisions logged
    inits = [{**row, "controller": f"ppo[{r}] (init)"} for r in range(2) for row in decisions
             if row["controller"] == "heuristic"]
    (phase / "steps.jsonl").write_text("".join(json.dumps(row) + "\n" for row in [*decisions, *inits]))
    capsys.readouterr()
    assert main([*TWO_RUNS[:-4], "--seeds", "3", "--set", "n_episodes=4", "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"Resuming {phase}: " in out and "Starting evaluation over" not in out
    assert json.loads((phase / "config.json").read_text())["config"]["controllers"] == labels  # recorded from now on
    episodes = read_jsonl(phase / "episodes.jsonl")
    assert episodes[:len(old)] == old
    def played(controller: str) -> list[dict[str, Any]]:  # the new seed's episodes, wherever they ran
        return [{k: v for k, v in e.items() if k not in ("controller", "env_id", "wall_seconds")}
                for e in episodes[len(old):] if e["controller"] == controller]

    assert len(played("ppo[0] (init)")) == 1 and played("ppo[0] (init)") == played("heuristic")
    assert json.loads((run / "results.json").read_text())["study"]["copies"] is None


def test_a_study_rerun_with_another_run_starts_only_its_evaluation_over(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "study"
    assert main([*STUDY, "--seeds", "1", "--run-dir", str(run)]) == 0
    trained = read_jsonl(run / "train" / "run-0" / "episodes.jsonl")
    capsys.readouterr()
    assert main([*STUDY, "--seeds", "1", "--runs", "2", "--run-dir", str(run)]) == 0
    out = capsys.readouterr().out
    assert "Training run 0: finished" in out and f"Starting evaluation over in {run / 'eval'}" in out
    assert read_jsonl(run / "train" / "run-0" / "episodes.jsonl") == trained  # run 0 not trained again
    assert {"ppo[1] (final)", "replay[1]"} <= set(untimed_results(run)["controllers"])
