"""Resuming episode runs: which finished episodes a rerun keeps (a complete prefix per phase, later phases only
after earlier ones are complete), logs cut back to them; controller labels never carry paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esper.env import EpisodeResult
from esper.evaluation.comparison import comparison_phases, controller_labels, parse_controllers
from esper.evaluation.resume import resume_point
from esper.storage.rundir import RunDirectory, RunDirectoryError, read_jsonl


def _row(controller: str, episode: int) -> EpisodeResult:
    return EpisodeResult(controller=controller, env_id=0, episode=episode, batch=episode, env_seed=episode,
                         host_width=1.0, host_params=1000, final_accuracy=50.0, final_loss=1.0,
                         twin_final_accuracy=None, twin_final_loss=None, best_accuracy=50.0, seeds_created=0,
                         seeds_fossilized=0, seeds_culled=0, params_added=0,
                         action_counts={"WAIT": 2, "GERMINATE": 0, "FOSSILIZE": 0, "CULL": 0},
                         accuracy_curve=[50.0, 50.0, 50.0], total_reward=0.0, rollbacks=0)


def _seed(episode: int) -> int:
    return episode  # `_row` records the episode index as its host seed


def _run(tmp_path: Path, rows: list[tuple[str, int]], torn: bool = False) -> RunDirectory:
    path = tmp_path / "run"
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / "episodes.jsonl").write_text("".join(json.dumps(_row(c, e).to_dict()) + "\n" for c, e in rows)
                                         + ('{"controller": "a", "epis' if torn else ""))
    (path / "steps.jsonl").write_text("".join(json.dumps({"controller": c, "episode": e, "epoch": k}) + "\n"
                                              for c, e in rows for k in (1, 2)))
    return RunDirectory(path, resume=True)


def test_keeps_the_complete_prefix_and_cuts_the_logs(tmp_path: Path) -> None:
    run = _run(tmp_path, [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2)], torn=True)  # episode 2 half done
    point = resume_point(run, [["a", "b"]], episodes=4, host_seed=_seed)
    assert point.completed == (2,) and point.episodes_done == 4
    assert [(r.controller, r.episode) for r in point.results] == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert [(r["controller"], r["episode"]) for r in read_jsonl(run.path / "episodes.jsonl")] == \
        [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert len(read_jsonl(run.path / "steps.jsonl")) == 8
    assert point.keeps("a", 1) and not point.keeps("a", 2) and point.keeps("twin", 0)


def test_an_episode_whose_result_is_logged_but_a_step_is_not_is_run_again(tmp_path: Path) -> None:
    """Episode 0 of `a` lost its second step row (its result row is intact): episode 0 is not finished, so it and
    everything after it run again (a prefix is kept)."""
    run = _run(tmp_path, [("a", 0), ("b", 0), ("a", 1), ("b", 1)])
    steps = run.path / "steps.jsonl"
    lines = steps.read_text().splitlines(keepends=True)
    steps.write_text("".join(lines[:1] + lines[2:]))
    point = resume_point(run, [["a", "b"]], episodes=2, host_seed=_seed)
    assert point.completed == (0,) and point.results == []
    assert read_jsonl(run.path / "episodes.jsonl") == [] and read_jsonl(steps) == []


def test_episodes_on_other_seeds_are_refused_and_left_as_they_were(tmp_path: Path) -> None:
    run = _run(tmp_path, [("a", 0), ("a", 1)])
    before = (run.path / "episodes.jsonl").read_text(), (run.path / "steps.jsonl").read_text()
    with pytest.raises(RunDirectoryError, match=r"episode 0 on host seed 0, not the seed this run draws \(1000\)"):
        resume_point(run, [["a"]], episodes=2, host_seed=lambda episode: 1000 + episode)
    assert ((run.path / "episodes.jsonl").read_text(), (run.path / "steps.jsonl").read_text()) == before


def test_a_later_phase_counts_only_after_the_earlier_one_is_complete(tmp_path: Path) -> None:
    rows = [("a", 0), ("a", 1), ("static:matched", 0)]
    point = resume_point(_run(tmp_path, rows), [["a"], ["static:matched"]], episodes=2, host_seed=_seed)
    assert point.completed == (2, 1) and point.done(1)[0].controller == "static:matched"
    # asked for more episodes now: the first phase is incomplete again, so the matched width may change
    extended = resume_point(_run(tmp_path / "x", rows), [["a"], ["static:matched"]], episodes=3, host_seed=_seed)
    assert extended.completed == (2, 0) and extended.done(1) == []


def test_controller_labels_drop_paths_and_stay_distinct() -> None:
    specs = parse_controllers(["static", "ppo:runs/a/checkpoints/final.pt", "ppo:runs/b/checkpoints/final.pt",
                               "ppo:runs/c", "static:matched"])
    labels = controller_labels(specs)
    assert labels == ["static", "ppo:final", "ppo:final#2", "ppo:c", "static:matched"]
    assert comparison_phases(specs, labels) == [labels[:4], ["static:matched"]]


def test_a_deviation_label_keeps_the_blend_after_its_slash() -> None:
    spec = "deviate:1:germinate=norm@late/linear:grow:norm@late"
    assert controller_labels(parse_controllers([spec])) == [spec]


@pytest.mark.parametrize("spec", ["static:1.5", "heuristic", "random"])
def test_labels_without_paths_are_the_spec(spec: str) -> None:
    assert controller_labels(parse_controllers([spec])) == [spec]
