"""Generation orchestrator: runs the matrix on datagen's workers, writes every file, and survives being killed.

The orchestrator process is the only writer. Workers compute static twins and episodes and return them; the
orchestrator validates each result, writes it atomically, then records it in `.generation_progress.json` (also
atomic). A kill at any point therefore leaves complete files only; on rerun, an episode file that is valid for its
plan counts as done even if the progress file missed it, so nothing is lost or generated twice.

Each (environment config, seed) has one static twin, computed before the episodes that need it, stored once in
`twins/<twin_id>.json` and handed to every episode of that pair, whatever its behaviour policy.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import esper
from esper.datagen.jobs import JobHost, computed
from esper.datagen.plans import (
    DEFAULT_BASE_SEED,
    EpisodeTask,
    GenerationPlan,
    TwinPlan,
    create_generation_matrix,
    matrix_hash,
)
from esper.datagen.schema import (
    SCHEMA_VERSION,
    read_json,
    remove_stale_temp_files,
    validate_episode,
    write_strict_json,
)
from esper.env import StoredTwin
from esper.execution.actors import ActorPool
from esper.execution.workers import WorkerFailed
from esper.leyline.errors import UserInputError

try:
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX platforms run without the directory lock
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "PROGRESS_FILE",
    "PROGRESS_VERSION",
    "EpisodeRejectedError",
    "GenerationOrchestrator",
    "GenerationPlan",
    "MatrixMismatchError",
    "create_generation_matrix",
]

PROGRESS_FILE = ".generation_progress.json"
PROGRESS_VERSION = 1
LOCK_FILE = ".generation.lock"
TWIN_DIR = "twins"
MANIFEST_FILE = "manifest.json"
EpisodeCallback = Callable[[GenerationPlan, Exception | None], None]
TwinCallback = Callable[[TwinPlan, Exception | None], None]


class MatrixMismatchError(UserInputError):
    """The output directory holds progress of a different matrix or different settings."""


class EpisodeRejectedError(ValueError):
    """A worker returned an episode that does not fit its plan or the schema; it counts as a failed attempt."""


class GenerationOrchestrator:
    """Tracks and drives the generation of one matrix in `output_dir` (created if needed).

    `settings` are the generation-wide values that shape every episode (task, max_epochs, sample caps): they enter
    the matrix hash, and a stored episode or twin recording a different value for one of them is not reused.
    Failed attempts are retried up to `max_retries` times, then the episode is permanently failed and skipped;
    `retry_failed` clears earlier permanent failures so a rerun tries them again.
    """

    def __init__(
        self,
        output_dir: str | Path,
        env_ids: Sequence[str] | None = None,
        policy_ids: Sequence[str] | None = None,
        episodes_per_combo: int = 10,
        epsilon_values: Sequence[float] | None = None,
        base_seed: int = DEFAULT_BASE_SEED,
        max_retries: int = 2,
        *,
        settings: Mapping[str, Any] | None = None,
        force_new_matrix: bool = False,
        retry_failed: bool = False,
    ) -> None:
        if max_retries < 0:
            raise UserInputError(f"max_retries must be >= 0, got {max_retries}")
        self.output_dir = Path(output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self._release_lock = self._acquire_lock()
        self.plans = create_generation_matrix(env_ids, policy_ids, episodes_per_combo, epsilon_values, base_seed)
        self._plans_by_id = {p.episode_id: p for p in self.plans}
        self.settings = dict(settings or {})
        self.matrix_hash = matrix_hash(self.plans, self.settings)
        self.max_retries = max_retries
        self._completed: set[str] = set()
        self._failed: dict[str, dict[str, Any]] = {}
        self._failed_twins: dict[str, dict[str, Any]] = {}
        remove_stale_temp_files(self.output_dir)
        remove_stale_temp_files(self.output_dir / TWIN_DIR)
        self._load_progress(force_new_matrix, retry_failed)
        self._save_progress()
        write_strict_json(self.output_dir / MANIFEST_FILE, {
            "matrix": {"env_ids": env_ids, "policy_ids": policy_ids, "episodes_per_combo": episodes_per_combo,
                       "epsilon_values": epsilon_values, "base_seed": base_seed},
            "matrix_hash": self.matrix_hash, "total_planned": len(self.plans), "settings": self.settings,
            "max_retries": max_retries, "schema_version": SCHEMA_VERSION, "versions": _versions(),
        })

    # -- lifetime ----------------------------------------------------------------------------------------------

    def _acquire_lock(self) -> Callable[[], None]:
        """Hold an exclusive lock on the directory so two generations never write the same files.

        Returns the release function; it runs at most once (on `close`, on collection, or at interpreter exit).
        """
        if fcntl is None:
            return lambda: None
        fd = os.open(self.output_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RuntimeError(
                f"Another generation is writing to {self.output_dir}; wait for it to finish or use another directory"
            ) from None
        return weakref.finalize(self, _close_quietly, fd)

    def close(self) -> None:
        """Release the directory lock (also released when the object is collected or the process exits)."""
        self._release_lock()

    def __enter__(self) -> GenerationOrchestrator:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
                 ) -> None:
        self.close()

    # -- progress ----------------------------------------------------------------------------------------------

    @property
    def progress_path(self) -> Path:
        return self.output_dir / PROGRESS_FILE

    def episode_path(self, episode_id: str) -> Path:
        return self.output_dir / f"{episode_id}.json"

    def twin_path(self, twin_id: str) -> Path:
        return self.output_dir / TWIN_DIR / f"{twin_id}.json"

    def _load_progress(self, force_new_matrix: bool, retry_failed: bool) -> None:
        data = read_json(self.progress_path)
        if isinstance(data, dict) and data.get("matrix_hash") != self.matrix_hash and not force_new_matrix:
            raise MatrixMismatchError(
                f"{self.output_dir} holds a different generation matrix or settings (hash {data.get('matrix_hash')}, "
                f"this run {self.matrix_hash}). Rerun with the original arguments to resume, choose another output "
                "directory, or force a new matrix here (--force-new-matrix)"
            )
        if isinstance(data, dict) and data.get("matrix_hash") == self.matrix_hash and not retry_failed:
            self._failed = {i: dict(v) for i, v in data.get("failed", {}).items() if i in self._plans_by_id}
            self._failed_twins = {i: dict(v) for i, v in data.get("failed_twins", {}).items()}
        # The files are the truth, the progress file their summary: a valid episode file written just before a
        # crash (progress not yet updated) counts as done, and a recorded episode whose file vanished or does not
        # fit its plan is redone.
        self._completed = {p.episode_id for p in self.plans if self._stored_episode_ok(p)}
        for episode_id in self._completed:
            self._failed.pop(episode_id, None)

    def _save_progress(self) -> None:
        write_strict_json(self.progress_path, {
            "version": PROGRESS_VERSION,
            "matrix_hash": self.matrix_hash,
            "completed": [p.episode_id for p in self.plans if p.episode_id in self._completed],
            "failed": self._failed,
            "failed_twins": self._failed_twins,
        })

    def _settings_problems(self, record: Mapping[str, Any]) -> list[str]:
        return [f"{k} is {record[k]!r}, this generation uses {v!r}" for k, v in self.settings.items()
                if k in record and record[k] != v]

    def _episode_problems(self, plan: GenerationPlan, episode: Any) -> list[str]:
        problems = validate_episode(episode)
        if problems:
            return problems
        found = (episode["episode_id"], episode["random_seed"], episode["behavior_policy"]["policy_id"],
                 episode["environment"]["config_id"], episode["twin"]["twin_id"])
        expected = (plan.episode_id, plan.seed, plan.policy_label, plan.env_config_id, plan.twin.twin_id)
        if found != expected:
            problems.append(f"episode (id, seed, policy, environment, twin) {found} does not match plan {expected}")
        return problems + self._settings_problems(episode)

    def _stored_episode_ok(self, plan: GenerationPlan) -> bool:
        path = self.episode_path(plan.episode_id)
        return path.is_file() and not self._episode_problems(plan, read_json(path))

    @property
    def total_planned(self) -> int:
        return len(self.plans)

    @property
    def completed_count(self) -> int:
        return len(self._completed)

    @property
    def failed_count(self) -> int:
        """Episodes that failed permanently (retries exhausted)."""
        return sum(1 for i in self._failed if self.is_permanently_failed(i))

    @property
    def remaining_count(self) -> int:
        """Episodes still to attempt: neither complete nor permanently failed."""
        return self.total_planned - self.completed_count - self.failed_count

    def is_complete(self, episode_id: str) -> bool:
        return episode_id in self._completed

    def is_permanently_failed(self, episode_id: str) -> bool:
        return self._failed.get(episode_id, {}).get("attempts", 0) > self.max_retries

    def attempts(self, episode_id: str) -> int:
        return int(self._failed.get(episode_id, {}).get("attempts", 0))

    def get_next_batch(self, batch_size: int = 10) -> list[GenerationPlan]:
        """The first plans, in matrix order, that are neither complete nor permanently failed."""
        pending = (p for p in self.plans if not self.is_complete(p.episode_id)
                   and not self.is_permanently_failed(p.episode_id))
        return [p for _, p in zip(range(batch_size), pending)]

    def mark_complete(self, episode_id: str) -> None:
        self._check_id(episode_id)
        self._completed.add(episode_id)
        self._failed.pop(episode_id, None)
        self._save_progress()

    def mark_failed(self, episode_id: str, error: str) -> bool:
        """Record a failed attempt; True while the episode may still be retried."""
        self._check_id(episode_id)
        entry = self._failed.setdefault(episode_id, {"attempts": 0, "last_error": ""})
        entry["attempts"] += 1
        entry["last_error"] = error
        self._save_progress()
        return entry["attempts"] <= self.max_retries

    def _fail_permanently(self, episode_id: str, error: str) -> None:
        self._failed[episode_id] = {"attempts": self.max_retries + 1, "last_error": error}
        self._save_progress()

    def _check_id(self, episode_id: str) -> None:
        if episode_id not in self._plans_by_id:
            raise UserInputError(f"Episode '{episode_id}' is not part of this generation matrix")

    def failures(self) -> dict[str, str]:
        """Last error of every permanently failed episode."""
        return {i: v["last_error"] for i, v in self._failed.items() if self.is_permanently_failed(i)}

    def get_progress_summary(self) -> dict[str, Any]:
        total = self.total_planned
        return {
            "total_planned": total,
            "completed": self.completed_count,
            "failed": self.failed_count,
            "remaining": self.remaining_count,
            "progress_pct": 100.0 * self.completed_count / total if total else 0.0,
        }

    # -- files -------------------------------------------------------------------------------------------------

    def write_episode(self, plan: GenerationPlan, episode: Mapping[str, Any]) -> None:
        """Validate a worker's episode against its plan, write it atomically, then mark it complete."""
        problems = self._episode_problems(plan, episode)
        if problems:
            raise EpisodeRejectedError(f"{plan.episode_id}: " + "; ".join(problems[:5]))
        record = {**episode, "attempts": self.attempts(plan.episode_id) + 1}
        write_strict_json(self.episode_path(plan.episode_id), record)
        self.mark_complete(plan.episode_id)

    def load_twin(self, twin: TwinPlan) -> StoredTwin | None:
        """The stored twin, or None when it is missing or was computed for other settings."""
        data = read_json(self.twin_path(twin.twin_id))
        if not isinstance(data, dict) or data.get("twin_id") != twin.twin_id:
            return None
        if data.get("settings") != self.settings:
            return None
        try:
            return twin.curves(data)
        except (KeyError, TypeError, ValueError):
            return None

    def store_twin(self, twin: TwinPlan, result: Mapping[str, Any]) -> StoredTwin:
        """Validate a twin result (equal-length, non-empty curves) and write `twins/<twin_id>.json` atomically."""
        acc, loss = result.get("val_accuracy_curve"), result.get("val_loss_curve")
        if not isinstance(acc, list | tuple) or not isinstance(loss, list | tuple) or not acc or len(acc) != len(loss):
            raise EpisodeRejectedError(f"twin {twin.twin_id}: needs equal-length, non-empty val_accuracy_curve and "
                                       "val_loss_curve lists")
        record = {**result, **twin.to_dict(), "settings": self.settings}
        write_strict_json(self.twin_path(twin.twin_id), record)
        self._failed_twins.pop(twin.twin_id, None)
        return twin.curves(record)

    # -- driving -----------------------------------------------------------------------------------------------

    def run(self, pool: ActorPool[JobHost], *, on_episode: EpisodeCallback | None = None,
            on_twin: TwinCallback | None = None) -> dict[str, Any]:
        """Generate every pending episode on `pool`'s workers; returns the progress summary.

        Rounds repeat until nothing is pending: first the missing twins of the pending episodes, then every
        episode whose twin is stored. Each round completes or spends an attempt on every job it runs, so the loop
        ends. An episode whose twin failed permanently fails permanently too. A worker that dies spends the attempt
        of the job it held and stops the run (`WorkerFailed`); the same command then resumes it.
        """
        while pending := self.get_next_batch(self.total_planned):
            twins = self._prepare_twins(pool, pending, on_twin)
            tasks: list[EpisodeTask] = []
            for plan in pending:
                twin_id = plan.twin.twin_id
                if twin_id in twins:
                    tasks.append(EpisodeTask(plan, twins[twin_id]))
                elif self._twin_permanently_failed(twin_id):
                    message = f"static twin {twin_id} failed: {self._failed_twins[twin_id]['last_error']}"
                    self._fail_permanently(plan.episode_id, message)
                    if on_episode is not None:
                        on_episode(plan, RuntimeError(message))
            for task, result in computed(pool, JobHost.episode, tasks, self._lost_episode):
                error = result if isinstance(result, Exception) else self._try_write(task.plan, result)
                if error is not None:
                    self.mark_failed(task.plan.episode_id, f"{type(error).__name__}: {error}")
                if on_episode is not None:
                    on_episode(task.plan, error)
        return self.get_progress_summary()

    def _try_write(self, plan: GenerationPlan, episode: Mapping[str, Any]) -> Exception | None:
        try:
            self.write_episode(plan, episode)
        except EpisodeRejectedError as rejected:
            return rejected
        return None

    def _twin_permanently_failed(self, twin_id: str) -> bool:
        return self._failed_twins.get(twin_id, {}).get("attempts", 0) > self.max_retries

    def _lost_episode(self, task: EpisodeTask, lost: WorkerFailed) -> str:
        self.mark_failed(task.plan.episode_id, f"WorkerFailed: {lost}")
        return f"episode {task.plan.episode_id}"

    def _twin_failed(self, twin: TwinPlan, error: Exception) -> None:
        entry = self._failed_twins.setdefault(twin.twin_id, {"attempts": 0, "last_error": ""})
        entry["attempts"] += 1
        entry["last_error"] = f"{type(error).__name__}: {error}"

    def _lost_twin(self, twin: TwinPlan, lost: WorkerFailed) -> str:
        self._twin_failed(twin, lost)
        self._save_progress()
        return f"static twin {twin.twin_id}"

    def _prepare_twins(self, pool: ActorPool[JobHost], pending: Sequence[GenerationPlan], on_twin: TwinCallback | None
                       ) -> dict[str, StoredTwin]:
        """Stored twins of the pending episodes, computing the missing ones (each once) on the pool."""
        twins: dict[str, StoredTwin] = {}
        missing: list[TwinPlan] = []
        for twin in dict.fromkeys(p.twin for p in pending):
            stored = self.load_twin(twin)
            if stored is not None:
                twins[twin.twin_id] = stored
            elif not self._twin_permanently_failed(twin.twin_id):
                missing.append(twin)
        for twin, result in computed(pool, JobHost.twin, missing, self._lost_twin):
            failure: Exception | None = None
            try:
                if isinstance(result, Exception):
                    raise result
                twins[twin.twin_id] = self.store_twin(twin, result)
            except Exception as error:
                failure = error
                self._twin_failed(twin, error)
            self._save_progress()
            if on_twin is not None:
                on_twin(twin, failure)
        return twins


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _versions() -> dict[str, str]:
    versions = {"esper": esper.__version__, "python": platform.python_version()}
    for package in ("torch", "numpy"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[package] = importlib.metadata.version(package)
    return versions
