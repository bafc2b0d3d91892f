"""Generation orchestrator: progress bookkeeping, twins computed once, validation, resume, retries, locking."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from esper.datagen.orchestrator import (
    PROGRESS_FILE,
    EpisodeRejectedError,
    GenerationOrchestrator,
    MatrixMismatchError,
)
from esper.datagen.plans import EpisodeTask, GenerationPlan, TwinPlan, paired_seed
from esper.datagen.schema import SCHEMA_VERSION, read_json, validate_episode, write_strict_json
from unit.datagen.support import FakeOptions, episode_ids, fake_episode_fn, fake_pool, logged_runs, make_episode

SETTINGS = {"task": "synthetic", "max_epochs": 5}

WIDE_TWIN = f"wide_seed{paired_seed('wide', 1)}"  # the static twin of episode 1 of the `wide` preset


def orchestrator(out: Path, **kwargs: Any) -> GenerationOrchestrator:
    kwargs = {"env_ids": ["baseline", "wide"], "policy_ids": ["baseline", "random"], "episodes_per_combo": 2,
              "settings": SETTINGS, **kwargs}
    return GenerationOrchestrator(out, **kwargs)


def logged(log: Path) -> list[str]:
    """Ids of every job run, one entry per run."""
    return [name for name, _ in logged_runs(log)]


def run_all(orch: GenerationOrchestrator, log: Path, **options: Any) -> dict[str, Any]:
    log.mkdir(exist_ok=True)
    fake = FakeOptions(log_dir=str(log), **options)
    with fake_pool(fake) as pool:
        return orch.run(pool)


def test_init_writes_progress_and_manifest(tmp_path: Path) -> None:
    with orchestrator(tmp_path / "out") as orch:
        assert orch.total_planned == 8 and orch.remaining_count == 8
        progress = json.loads((tmp_path / "out" / PROGRESS_FILE).read_text())
        assert progress == {"version": 1, "matrix_hash": orch.matrix_hash, "completed": [], "failed": {},
                            "failed_twins": {}}
        manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
        assert manifest["total_planned"] == 8 and manifest["settings"] == SETTINGS
        assert manifest["schema_version"] == SCHEMA_VERSION and "torch" in manifest["versions"]


def test_batches_completion_and_summary(tmp_path: Path) -> None:
    with orchestrator(tmp_path, env_ids=["baseline"], episodes_per_combo=1) as orch:
        batch = orch.get_next_batch(batch_size=2)
        assert [p.episode_id for p in batch] == ["baseline_baseline_0000", "baseline_random-eps1.0_0000"]
        orch.mark_complete(batch[0].episode_id)
        assert orch.completed_count == 1 and orch.get_next_batch(5) == batch[1:]
        assert orch.get_progress_summary() == {"total_planned": 2, "completed": 1, "failed": 0, "remaining": 1,
                                               "progress_pct": 50.0}
        with pytest.raises(ValueError, match="not part of this generation matrix"):
            orch.mark_complete("nope")


def test_retries_are_bounded(tmp_path: Path) -> None:
    with orchestrator(tmp_path, env_ids=["baseline"], episodes_per_combo=1, max_retries=2) as orch:
        episode_id = orch.plans[0].episode_id
        assert [orch.mark_failed(episode_id, f"boom {i}") for i in range(3)] == [True, True, False]
        assert orch.is_permanently_failed(episode_id) and orch.failed_count == 1
        assert orch.failures() == {episode_id: "boom 2"}
        assert [p.episode_id for p in orch.get_next_batch(5)] == [orch.plans[1].episode_id]
        assert orch.get_progress_summary()["remaining"] == 1
        assert read_json(tmp_path / PROGRESS_FILE)["failed"][episode_id] == {"attempts": 3, "last_error": "boom 2"}


def test_run_generates_every_episode_and_each_twin_once(tmp_path: Path) -> None:
    out, log = tmp_path / "out", tmp_path / "log"
    seen: list[tuple[str, Exception | None]] = []
    log.mkdir()
    with orchestrator(out) as orch, fake_pool(FakeOptions(log_dir=str(log))) as pool:
        summary = orch.run(pool, on_episode=lambda plan, error: seen.append((plan.episode_id, error)))
        assert summary == {"total_planned": 8, "completed": 8, "failed": 0, "remaining": 0, "progress_pct": 100.0}
        ids = [p.episode_id for p in orch.plans]
    assert sorted(i for i, _ in seen) == sorted(ids) and all(e is None for _, e in seen)
    assert episode_ids(out) == sorted(ids)
    twins = sorted(p.stem for p in (out / "twins").iterdir())
    assert twins == sorted(f"{env}_seed{paired_seed(env, i)}" for env in ("baseline", "wide") for i in (0, 1))
    # 4 twins for 8 episodes: each (config, seed) twin computed once and shared by both policies.
    assert logged(log) == sorted(ids + twins)
    for plan in orch.plans:
        episode = read_json(out / f"{plan.episode_id}.json")
        assert validate_episode(episode) == [] and episode["attempts"] == 1
        twin = read_json(out / "twins" / f"{plan.twin.twin_id}.json")
        assert twin["settings"] == SETTINGS and twin["random_seed"] == plan.seed
        assert episode["twin"] == {k: twin[k] for k in ("twin_id", "val_accuracy_curve", "val_loss_curve")}
        curve = twin["val_accuracy_curve"]
        assert [d["outcome"]["reward"] for d in episode["decisions"]] == [b - a for a, b in itertools.pairwise(curve)]
    progress = read_json(out / PROGRESS_FILE)
    assert progress["completed"] == ids and progress["failed"] == {}


def test_rerun_skips_completed_work_and_redoes_only_missing_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with orchestrator(out) as orch:
        run_all(orch, tmp_path / "log1")
    with orchestrator(out) as orch:
        assert orch.completed_count == 8
        run_all(orch, tmp_path / "log2")
    assert logged(tmp_path / "log2") == []
    (out / "wide_random-eps1.0_0001.json").unlink()
    (out / "baseline_baseline_0000.json").write_text('{"schema_version": "3.0.0", "trunc')  # corrupt
    with orchestrator(out) as orch:
        assert orch.completed_count == 6
        run_all(orch, tmp_path / "log3")
    assert logged(tmp_path / "log3") == ["baseline_baseline_0000", "wide_random-eps1.0_0001"]  # twins reused
    assert validate_episode(read_json(out / "baseline_baseline_0000.json")) == []


def test_episode_file_written_before_a_crash_counts_as_complete(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with orchestrator(out, env_ids=["baseline"]) as orch:
        plan = orch.plans[1]
    # A valid file whose progress update was lost (crash between the rename and the progress write).
    episode = make_episode(plan.episode_id, policy_id=plan.get_policy_config().policy_id, seed=plan.seed,
                           twin_id=plan.twin.twin_id, task="synthetic")
    write_strict_json(out / f"{plan.episode_id}.json", episode)
    # A file for the wrong seed is not this plan's episode.
    other = orchestrator_plan_file(out, orch.plans[2], seed=orch.plans[2].seed + 1)
    with orchestrator(out, env_ids=["baseline"]) as orch:
        assert orch.is_complete(plan.episode_id) and not orch.is_complete(other)
        assert read_json(out / PROGRESS_FILE)["completed"] == [plan.episode_id]


def orchestrator_plan_file(out: Path, plan: GenerationPlan, *, seed: int) -> str:
    episode = make_episode(plan.episode_id, policy_id=plan.policy_label, seed=seed, twin_id=plan.twin.twin_id)
    write_strict_json(out / f"{plan.episode_id}.json", episode)
    return plan.episode_id


def test_matrix_mismatch_is_an_error_unless_forced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with orchestrator(out) as orch:
        run_all(orch, tmp_path / "log")
    with pytest.raises(MatrixMismatchError, match=r"different generation matrix.*--force-new-matrix"):
        orchestrator(out, episodes_per_combo=3)
    with pytest.raises(MatrixMismatchError):
        orchestrator(out, settings={**SETTINGS, "max_epochs": 6})
    # Forced with the same settings: stored episodes that fit the new matrix are kept.
    with orchestrator(out, episodes_per_combo=3, force_new_matrix=True) as orch:
        assert orch.total_planned == 12 and orch.completed_count == 8
    # Forced with other settings: episodes recorded under max_epochs 5 do not fit max_epochs 6, nor do twins.
    with orchestrator(out, settings={**SETTINGS, "max_epochs": 6}, force_new_matrix=True) as orch:
        assert orch.completed_count == 0
        assert orch.load_twin(orch.plans[0].twin) is None


def test_failures_are_retried_then_permanent_and_generation_ends(tmp_path: Path) -> None:
    out, failing = tmp_path / "out", "baseline_random-eps1.0_0000"
    with orchestrator(out, max_retries=1) as orch:
        summary = run_all(orch, tmp_path / "log", fail_ids=frozenset({failing}))
        assert summary["completed"] == 7 and summary["failed"] == 1 and summary["remaining"] == 0
        assert "planned failure of baseline_random-eps1.0_0000" in orch.failures()[failing]
    assert logged(tmp_path / "log").count(failing) == 2  # one try plus one retry
    assert not (out / f"{failing}.json").exists()
    with orchestrator(out, max_retries=1) as orch:  # a rerun skips the permanent failure
        run_all(orch, tmp_path / "log2", fail_ids=frozenset({failing}))
    assert logged(tmp_path / "log2") == []
    with orchestrator(out, max_retries=1, retry_failed=True) as orch:  # unless asked to retry it
        assert run_all(orch, tmp_path / "log3")["completed"] == 8
    assert logged(tmp_path / "log3") == [failing]


def test_a_failed_twin_fails_its_episodes_only(tmp_path: Path) -> None:
    out, log = tmp_path / "out", tmp_path / "log"
    with orchestrator(out, max_retries=1) as orch:
        summary = run_all(orch, log, fail_ids=frozenset({WIDE_TWIN}))
        assert summary["completed"] == 6 and summary["failed"] == 2
        assert set(orch.failures()) == {"wide_baseline_0001", "wide_random-eps1.0_0001"}
        assert all(f"static twin {WIDE_TWIN} failed" in e for e in orch.failures().values())
    assert logged(log).count(WIDE_TWIN) == 2
    assert read_json(out / PROGRESS_FILE)["failed_twins"][WIDE_TWIN]["attempts"] == 2


def bad_episode_fn(task: EpisodeTask, options: FakeOptions, device: str) -> dict[str, Any]:
    episode = fake_episode_fn(task, options, device)
    episode["decisions"][0]["outcome"]["reward"] += 1.0  # the stored reward must be the gap component
    return episode


def test_malformed_episodes_are_rejected_not_written(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with orchestrator(out, env_ids=["baseline"], policy_ids=["baseline"], episodes_per_combo=1,
                      max_retries=0) as orch:
        with fake_pool(FakeOptions(), episode_fn=bad_episode_fn) as pool:
            orch.run(pool)
        error = orch.failures()["baseline_baseline_0000"]
        assert error.startswith("EpisodeRejectedError") and "differs from the stored (gap)" in error
        plan = orch.plans[0]
        wrong = make_episode("baseline_baseline_0009", seed=plan.seed, twin_id=plan.twin.twin_id)
        with pytest.raises(EpisodeRejectedError, match="does not match plan"):
            orch.write_episode(plan, wrong)
        other_task = make_episode(plan.episode_id, seed=plan.seed, twin_id=plan.twin.twin_id, task="cifar10")
        with pytest.raises(EpisodeRejectedError, match="task is 'cifar10', this generation uses 'synthetic'"):
            orch.write_episode(plan, other_task)
        with pytest.raises(EpisodeRejectedError, match="equal-length"):
            orch.store_twin(TwinPlan("baseline", 42), {"val_accuracy_curve": [1.0], "val_loss_curve": []})
    assert episode_ids(out) == []


def test_one_writer_per_directory(tmp_path: Path) -> None:
    first = orchestrator(tmp_path)
    with pytest.raises(RuntimeError, match="Another generation is writing to"):
        orchestrator(tmp_path)
    first.close()
    first.close()  # idempotent
    with orchestrator(tmp_path) as second:
        assert second.total_planned == 8


def test_stale_temp_files_are_removed(tmp_path: Path) -> None:
    (tmp_path / "twins").mkdir()
    (tmp_path / "baseline_baseline_0000.json.tmp").write_text("partial")  # what a killed writer leaves
    (tmp_path / "twins" / "baseline_seed42.json.tmp").write_text("partial")
    with orchestrator(tmp_path):
        pass
    assert not list(tmp_path.rglob("*.tmp"))
