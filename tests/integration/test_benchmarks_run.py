"""Every script in benchmarks/ runs end to end at a tiny size, so a benchmark that the code has moved away from fails
here rather than at `make bench`; the diagnostics' tables are checked too. No timing is asserted."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
TINY = ["--max-epochs", "2", "--train-samples", "64", "--val-samples", "32"]
TINY_STUDY = ("--runs 1 --seeds 1 --selection-seeds 0 --max-test-samples 32 --set n_episodes=2 --set n_envs=2 "
              "--set group_size=1 --set max_epochs=3 --set max_train_samples=64 --set max_val_samples=32 "
              "--set param_cost=1.0")


def _script(name: str, *args: str, cwd: Path) -> str:
    """The script's stdout; it must exit 0."""
    path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    result = subprocess.run([sys.executable, str(BENCHMARKS / name), *args], capture_output=True, text=True,
                            timeout=600, env=env, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _rows(out: str, bars: int) -> dict[str, list[str]]:
    """A rich table's rows with `bars` vertical bars, by their first cell."""
    return {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:-1]]
            for line in out.splitlines() if line.count("│") == bars}


def _count_syncs(out: str, tmp: Path) -> None:
    rows = _rows(out, 5)
    assert {"train", "validation", "counterfactuals", "probes", "telemetry", "decision"} <= set(rows)
    assert rows["all but decision, other"] == ["2", "0.50", "1.00"]  # one read per group-epoch
    assert "esper.execution.readout" in out  # the call sites


def _bench_gpu(out: str, tmp: Path) -> None:
    assert "device cpu (" in out and "× 1 env" in out
    rows = [line.split("│")[1:-1] for line in out.splitlines() if line.count("│") == 8]
    assert [(r[0].strip(), r[1].strip(), r[3].strip()) for r in rows] == [("1", "in process", "1.00"),
                                                                       ("2", "in process", rows[1][3].strip())]
    assert float(rows[1][2]) > 0


def _epoch_costs(out: str, tmp: Path) -> None:
    rows = _rows(out, 5)
    assert {"train", "validation", "counterfactuals", "probes", "telemetry", "decision", "other", "all"} <= set(rows)
    shares = [float(cells[1].rstrip("%")) for phase, cells in rows.items() if phase not in ("all", "phase")]
    assert abs(sum(shares) - 100.0) < 0.5  # every CPU second charged to exactly one phase
    assert float(rows["train"][0]) > 0 and float(rows["probes"][0]) > 0  # the grow: rule's TRAINING seeds probe
    assert "memory format: contiguous / channels_last" in out


def _epoch_phases(out: str, tmp: Path) -> None:
    charged = dict(line.split(": ", 1) for line in out.splitlines())
    assert list(charged) == ["train", "validation", "counterfactuals", "probes", "telemetry", "decision", "other"]


def _bench_vectorized(out: str, tmp: Path) -> None:
    rows = _rows(out, 13)
    assert all(rows[k][8] == rows[k][9] for k in ("1", "2"))  # batch loads as expected: they do not grow with envs
    assert "each shared batch loaded once per device: batch-first" in out


def _bench_kasmina(out: str, tmp: Path) -> None:
    assert "model (no seeds) / plain host" in out and "counterfactual extra" in out
    diff = float(out.rsplit("max |diff| = ", 1)[1].split()[0])
    assert diff < 1e-4  # the cached-prefix counterfactuals and probes compute the naive forwards' logits


def _bench_workers(out: str, tmp: Path) -> None:
    assert "in process" in _rows(out, 8)["2"] and "paired episodes of static, heuristic" in out


def _calibrate_param_cost(out: str, tmp: Path) -> None:
    record = json.loads((tmp / "param_cost.json").read_text())
    assert record["param_cost"] >= 0 and "slope" in out


def _bench_peer(out: str, tmp: Path) -> None:
    assert "maskable ppo / esper ppo" in out
    report = json.loads((tmp / "bench" / "bench_peer.json").read_text())
    assert {r["env_epochs"] for r in report["training"].values()} == {8}
    episodes = report["comparison"]["episodes"]
    labels = ["static", "esper ppo (init)", "esper ppo (final)", "maskable ppo (init)", "maskable ppo (final)"]
    assert report["comparison"]["controllers"] == labels
    seeds = {label: sorted(e["env_seed"] for e in episodes if e["controller"] == label) for label in labels}
    assert len(set(map(tuple, seeds.values()))) == 1 and len(seeds["static"]) == 2  # the same paired seeds for all


@dataclass(frozen=True)
class Smoke:
    """A tiny run of one script (`{tmp}` in an argument: the test's temporary directory) and what its output
    must show; `needs`: a module of an optional extra, without which the run is skipped."""

    args: tuple[str, ...]
    check: Callable[[str, Path], None]
    needs: str | None = None


SMOKE = {
    "bench_gpu.py": Smoke(("--device", "cpu", "--envs", "1", "2", "--no-workers", *TINY), _bench_gpu),
    "bench_kasmina.py": Smoke(("--repeats", "1", "--batch-size", "8", "--val-samples", "64", "--loop-seconds", "0.01",
                               "--threads", "1"), _bench_kasmina),
    "bench_peer.py": Smoke(("--max-epochs", "2", "--env-epochs", "8", "--n-envs", "4", "--eval-seeds", "2",
                            "--train-samples", "64", "--val-samples", "32", "--threads", "1", "--out", "{tmp}/bench"),
                           _bench_peer, needs="sb3_contrib"),
    "bench_vectorized.py": Smoke(("--envs", "1", "2", *TINY, "--threads", "1"), _bench_vectorized),
    # in process: worker placement is tests/integration/test_workers.py's, and starting one costs seconds
    "bench_workers.py": Smoke(("--envs", "2", "--workers", "0", "--group-size", "1", *TINY, "--compare-episodes", "1"),
                              _bench_workers),
    "calibrate_param_cost.py": Smoke(("--episodes", "2", "--max-epochs", "2", "--max-train-samples", "64",
                                      "--max-val-samples", "32", "--out", "{tmp}/param_cost.json"),
                                     _calibrate_param_cost),
    "count_syncs.py": Smoke(("--epochs", "2", "--controllers", "static", "ppo-init", "--calls"), _count_syncs),
    "epoch_costs.py": Smoke(("--epochs", "2", "--max-train-samples", "64", "--max-val-samples", "32"), _epoch_costs),
    "epoch_phases.py": Smoke((), _epoch_phases),
}


@pytest.mark.parametrize("name", sorted({p.name for p in BENCHMARKS.glob("*.py")} | set(SMOKE)))
def test_every_benchmark_runs_at_a_tiny_size(name: str, tmp_path: Path) -> None:
    assert (BENCHMARKS / name).is_file(), f"SMOKE names {name}, which benchmarks/ no longer has"
    smoke = SMOKE.get(name)
    assert smoke is not None, f"benchmarks/{name} has no smoke run: add a tiny one to SMOKE"
    if smoke.needs is not None:
        pytest.importorskip(smoke.needs, reason=f"{name} needs {smoke.needs} (an optional extra)")
    out = _script(name, *(a.replace("{tmp}", str(tmp_path)) for a in smoke.args), cwd=tmp_path)
    smoke.check(out, tmp_path)


def test_study_phases_are_timed_from_the_previous_phases_last_write(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    bench_gpu = importlib.import_module("bench_gpu")
    for phase, last_write in (("selection/round-1", 110.0), ("train/run-0", 150.0), ("eval", 190.0)):
        (tmp_path / phase / "sub").mkdir(parents=True)
        for name, when in (("config.json", last_write - 5), ("sub/episodes.jsonl", last_write)):
            (tmp_path / phase / name).write_text("{}")
            os.utime(tmp_path / phase / name, (when, when))
    (tmp_path / "config.json").write_text("{}")  # the study's own directory is not a phase
    seconds = bench_gpu.phase_seconds(tmp_path, started=100.0, finished=200.0)
    assert seconds == {"selection/round-1": 10.0, "train/run-0": 40.0, "eval": 40.0, "report": 10.0}


@pytest.mark.slow
def test_bench_gpu_on_workers_and_a_tiny_study_on_cpu(tmp_path: Path) -> None:
    out = _script("bench_gpu.py", "--device", "cpu", "--envs", "1", "2", *TINY, "--study", "quick",
                  "--study-args", TINY_STUDY, cwd=tmp_path)
    assert "2 workers" in out
    assert all(phase in out for phase in ("train/run-0", "replay-source/run-0", "eval", "report", "total"))
