"""Test support for datagen: episode builders (of the current schema) and cheap, deterministic, picklable job functions.

The job functions live at module level so spawned worker processes and Ray actors can import them. Running this
module (`python -m unit.datagen.support OUT LOG WORKERS`) generates a small matrix with slow fake jobs; the
kill-and-resume test kills it mid-run.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from esper.data.tasks import get_task_spec
from esper.datagen.configs import ActionProbabilities, StepMetadata, state_hash
from esper.datagen.jobs import GenerationJobs, JobHost, generation_pool
from esper.datagen.orchestrator import GenerationOrchestrator
from esper.datagen.plans import EpisodeTask, TwinPlan
from esper.datagen.policies import BehaviorPolicy
from esper.datagen.records import feature_schema
from esper.datagen.schema import SCHEMA_VERSION
from esper.env.features import obs_dim
from esper.env.rewards import RewardFamily, ShapedRewardComponents
from esper.execution.actors import ActorPool
from esper.execution.workers import WorkerOptions
from esper.leyline import EnvObservation

CNN = get_task_spec("synthetic").action_space
NUM_JOINT_ACTIONS, OBS_DIM = CNN.num_joint_actions, obs_dim(CNN)  # 43 and 80 with the built-in blueprints

JOINT_OF_OP = {"WAIT": 0, "GERMINATE": 2, "CULL": 37, "FOSSILIZE": 40}
TIMESTAMP_KEYS = ("started_at", "ended_at", "timestamp")
KILL_MATRIX = (["baseline"], ["baseline", "aggressive"], 4)  # env ids, policy ids, episodes per combination
# Each family's total as a multiple of the stored gap reward, so tests can tell which family a reward came from.
FAMILY_SCALE = {RewardFamily.GAP: 1.0, RewardFamily.CONTRIBUTION: 2.0, RewardFamily.LOSS: -1.0,
                RewardFamily.SPARSE: 0.5}


def reward_families(gap: float) -> dict[str, Any]:
    """Every family's components of a step whose gap reward is `gap` (the others: `FAMILY_SCALE` × gap)."""
    return {f.value: ShapedRewardComponents(f.value, gap=FAMILY_SCALE[f] * gap).to_dict() for f in RewardFamily}


def make_decision(
    op: str = "WAIT",
    *,
    timestep: int = 0,
    epoch: int = 1,
    plateau: int = 0,
    has_seed: bool = False,
    features: Sequence[float | None] | None = None,
    gap: float = 0.0,
    valid: Sequence[bool] | None = None,
) -> dict[str, Any]:
    """One well-formed step: uniform op probabilities (ε = 1), the stored reward equal to `gap` (its return-to-go
    too: `make_episode` sums the episode's)."""
    features = [0.1 * (i % 7) for i in range(OBS_DIM)] if features is None else list(features)
    probs = ActionProbabilities.from_decision({o: 0.25 for o in JOINT_OF_OP}, op, 1.0, was_exploratory=True)
    joint = 0.25 if op == "WAIT" else 0.25 / 3
    return {
        "observation": {"epoch": epoch, "plateau_epochs": plateau, "has_active_seed": has_seed,
                        "features": features},
        "action": {
            "action": op, "slot": None if op == "WAIT" else "early", "joint_index": JOINT_OF_OP[op],
            "action_probabilities": probs.to_dict(), "joint_behavior_prob": joint,
            "joint_behavior_logp": math.log(joint), "reason": "test",
        },
        "rewards": reward_families(gap),
        "valid_joint_actions": [True] * NUM_JOINT_ACTIONS if valid is None else list(valid),
        "outcome": {"reward": gap, "return_to_go": gap, "accuracy_after": 50.0},
        "step_metadata": StepMetadata(timestep, False, state_hash([f or 0.0 for f in features]), int(has_seed),
                                      None, 0.5).to_dict(),
        "timestamp": datetime.now(UTC).isoformat(),
    }


def make_episode(
    episode_id: str = "baseline_baseline_0000",
    ops: Sequence[str] = ("WAIT", "GERMINATE", "FOSSILIZE", "CULL"),
    *,
    policy_id: str = "baseline",
    env_id: str = "baseline",
    seed: int = 42,
    twin_id: str = "baseline_seed42",
    task: str = "synthetic",
    created: int = 1,
    fossilized: int = 1,
    culled: int = 0,
    gaps: Sequence[float] | None = None,
) -> dict[str, Any]:
    """A well-formed episode of `ops`, its stored gap rewards `gaps` (default 0.1·t at step t)."""
    gaps = [0.1 * t for t in range(len(ops))] if gaps is None else list(gaps)
    decisions = [make_decision(op, timestep=t, epoch=t + 1, plateau=t % 4, has_seed=t % 2 == 1, gap=gap)
                 for t, (op, gap) in enumerate(zip(ops, gaps, strict=True))]
    for t, decision in enumerate(decisions):
        decision["outcome"]["return_to_go"] = math.fsum(gaps[t:])
    return {
        "schema_version": SCHEMA_VERSION, "episode_id": episode_id, "random_seed": seed, "task": task,
        "topology": "cnn", "feature_schema": feature_schema(CNN), "reward_family": "gap",
        "max_epochs": len(ops) + 1, "episode_length": len(ops), "decisions": decisions,
        "behavior_policy": {"policy_id": policy_id}, "environment": {"config_id": env_id},
        "twin": {"twin_id": twin_id, "val_accuracy_curve": [10.0] * (len(ops) + 1),
                 "val_loss_curve": [2.0] * (len(ops) + 1)},
        "final_features": [0.0] * OBS_DIM, "total_seeds_created": created, "total_seeds_fossilized": fossilized,
        "total_seeds_culled": culled, "started_at": datetime.now(UTC).isoformat(),
    }


def generated_files(out: Path, jobs: GenerationJobs, matrix: tuple[list[str], list[str], int], settings: dict[str, Any],
                    workers: WorkerOptions, devices: tuple[str, ...] = ("cpu",)) -> dict[str, Any]:
    """`matrix` (env ids, policy ids, episodes each) generated through the orchestrator on `workers`: every file
    written but the manifest, without its timestamps, by path; the two episodes of the matrix must complete."""
    with GenerationOrchestrator(out, *matrix, settings=settings) as orchestrator, \
            generation_pool(workers, jobs, devices) as pool:
        assert orchestrator.run(pool)["completed"] == 2
    files = sorted(p for p in out.rglob("*.json") if p.name != "manifest.json")
    return {str(p.relative_to(out)): without_timestamps(json.loads(p.read_text())) for p in files}


def logged_runs(log: Path) -> list[tuple[str, int]]:
    """(job id, worker pid) of every fake job run logged in `log`, sorted."""
    return sorted((name, int(pid)) for name, pid, _ in (p.name.split("__") for p in log.iterdir()))


def episode_ids(out: Path) -> list[str]:
    """Ids of the episode files in a datagen output directory."""
    return sorted(p.stem for p in out.glob("*.json") if not p.name.startswith(".") and p.name != "manifest.json")


def without_timestamps(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_timestamps(v) for k, v in value.items() if k not in TIMESTAMP_KEYS}
    if isinstance(value, list):
        return [without_timestamps(v) for v in value]
    return value


@dataclass(frozen=True)
class FakeOptions:
    """How the fake jobs behave: episode length, delay, ids that always fail, ids whose worker dies, and where to
    log each run."""

    max_epochs: int = 5
    delay_s: float = 0.0
    fail_ids: frozenset[str] = frozenset()
    crash_ids: frozenset[str] = frozenset()
    log_dir: str | None = None


def _log(options: FakeOptions, name: str) -> None:
    if options.log_dir is not None:
        with open(Path(options.log_dir) / f"{name}__{os.getpid()}__{time.monotonic_ns()}", "w") as f:
            f.write(name)


def fake_twin_fn(twin: TwinPlan, options: FakeOptions, device: str) -> dict[str, Any]:
    _log(options, twin.twin_id)
    if twin.twin_id in options.fail_ids:
        raise RuntimeError(f"planned failure of twin {twin.twin_id}")
    rng = random.Random(twin.random_seed)
    return {"val_accuracy_curve": [10.0 + e + rng.random() for e in range(options.max_epochs)],
            "val_loss_curve": [2.0 - 0.1 * e for e in range(options.max_epochs)]}


def fake_episode_fn(task: EpisodeTask, options: FakeOptions, device: str) -> dict[str, Any]:
    """A deterministic episode derived from the plan's seed and twin (the gap reward uses the twin curve)."""
    plan = task.plan
    _log(options, plan.episode_id)
    if plan.episode_id in options.crash_ids:
        os._exit(3)
    if plan.episode_id in options.fail_ids:
        raise RuntimeError(f"planned failure of {plan.episode_id}")
    time.sleep(options.delay_s)
    rng = random.Random(plan.episode_id)
    ops = [rng.choice(list(JOINT_OF_OP)) for _ in range(options.max_epochs - 1)]
    gaps = [task.twin.accuracy_curve[t + 1] - task.twin.accuracy_curve[t] for t in range(len(ops))]
    episode = make_episode(plan.episode_id, ops, policy_id=plan.get_policy_config().policy_id,
                           env_id=plan.env_config_id, seed=plan.seed, twin_id=plan.twin.twin_id, gaps=gaps)
    episode["twin"] = plan.twin.twin_block(task.twin)
    episode["max_epochs"] = options.max_epochs
    episode["worker"] = {"device": device, "threads": torch.get_num_threads()}
    return episode


def fake_pool(options: FakeOptions, workers: int = 0, episode_fn: Any = fake_episode_fn) -> ActorPool[JobHost]:
    """Datagen workers computing the fake jobs (in this process by default)."""
    return generation_pool(WorkerOptions(workers=workers), GenerationJobs(episode_fn, fake_twin_fn, options))


def main(argv: Sequence[str]) -> None:
    """Generate a small matrix with slow fake jobs (the kill-and-resume test's subject)."""
    from unit.datagen import support  # pickle the job functions by their importable name, not __main__

    out, log, workers = argv[0], argv[1], int(argv[2])
    options = FakeOptions(delay_s=0.25, log_dir=log)
    with support.fake_pool(options, workers) as pool, GenerationOrchestrator(
            out, KILL_MATRIX[0], KILL_MATRIX[1], KILL_MATRIX[2], settings={"max_epochs": options.max_epochs}) as orch:
        orch.run(pool)


if __name__ == "__main__":
    main(sys.argv[1:])


def joint_probabilities(policy: BehaviorPolicy, obs: EnvObservation) -> list[float]:
    """Behaviour probability of each joint action under `obs`, from the policy's own analysis (sums to 1)."""
    analysis = policy.analyse(obs)
    return [analysis.joint_prob(CNN.from_joint_index(i)) for i in range(NUM_JOINT_ACTIONS)]
