"""Golden runs: fixed-seed CPU commands whose logs pin esper's behaviour.

`python tests/golden/cases.py record` reruns every case and rewrites `tests/golden/data/`; do that only when a change
is *meant* to alter behaviour, and say so in the commit (`record ppo_tiny` rerecords one case). `test_golden.py`
reruns the cases and compares.

Portability. Both the recording and the test run esper through `pinned_esper.py` with `PINNED_ENV`, which fixes the
float path (scalar ATen kernels, MKL's CPU-independent mode, no oneDNN or NNPACK, one thread). On x86-64 with MKL
that path gives the same bits on AVX2-only and AVX-512 CPUs whatever `ATEN_CPU_CAPABILITY` the caller set, so the
logs are compared exactly, floats to 1e-5 relative. Elsewhere (aarch64 builds use OpenBLAS and other kernels) the
float path cannot be pinned: `portable_differences` then compares exactly what does not depend on rounding (file
structure, keys, counts, decisions, stages, controller names) and only the presence and finiteness of floats.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
LAUNCHER = Path(__file__).parent / "pinned_esper.py"
PINNED_ENV = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "OMP_NUM_THREADS": "1",
              "MKL_NUM_THREADS": "1"}
# Free text that prints floats (e.g. "policy (value -0.16)"): on an unpinned float path only its words must match.
FREE_TEXT_KEYS = frozenset({"reason"})
_NUMBER = re.compile(r"[-+]?\d+(\.\d+)?")
# Wall-clock measurements differ run to run; everything else must not.
VOLATILE_KEYS = frozenset({"rollout_seconds", "update_seconds", "env_epochs_per_second", "wall_seconds"})
CAPS = ["--max-train-samples", "512", "--max-val-samples", "256"]


@dataclass(frozen=True)
class GoldenCase:
    name: str
    argv: tuple[str, ...]
    logs: tuple[str, ...]
    slow: bool = False


CASES = (
    GoldenCase("ppo_quick", ("train", "ppo", "--preset", "quick"), ("history.jsonl", "episodes.jsonl"), slow=True),
    GoldenCase("heuristic_2ep", ("train", "heuristic", "--episodes", "2", "--seed", "7", "--max-train-samples",
                                 "2048", "--max-val-samples", "512"), ("episodes.jsonl",), slow=True),
    GoldenCase("ppo_tiny", ("train", "ppo", "--preset", "quick", "--set", "n_episodes=4", "--set", "max_epochs=5",
                            "--set", "max_train_samples=512", "--set", "max_val_samples=256"),
               ("history.jsonl", "episodes.jsonl", "steps.jsonl")),
    GoldenCase("heuristic_tiny", ("train", "heuristic", "--episodes", "1", "--max-epochs", "20", "--seed", "42",
                                  "--max-train-samples", "192", "--max-val-samples", "96", "--max-test-samples", "256"),
               ("episodes.jsonl", "steps.jsonl")),
    GoldenCase("compare_tiny", ("compare", "--controllers", "static", "heuristic", "random", "--episodes", "1",
                                "--max-epochs", "14", "--seed", "3", "--max-train-samples", "192",
                                "--max-val-samples", "96", "--max-test-samples", "256"),
               ("episodes.jsonl", "steps.jsonl")),
)


def run_case(case: GoldenCase, run_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Run the case's command into `run_dir` and return its normalized logs."""
    cmd = [sys.executable, str(LAUNCHER), *case.argv, "--run-dir", str(run_dir), "--no-tui", "--no-tensorboard",
           "--telemetry-level", "minimal"]
    env = {**os.environ, **PINNED_ENV}
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800, env=env)
    return {name: [normalize(json.loads(line)) for line in (run_dir / name).read_text().splitlines() if line]
            for name in case.logs}


def normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    return value


def differences(expected: Any, actual: Any, where: str = "") -> list[str]:
    """Where two normalized logs differ: exact for everything but floats, which may differ in the last digits."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        if set(expected) != set(actual):
            return [f"{where}: keys {sorted(set(expected) ^ set(actual))} differ"]
        return [d for k in expected for d in differences(expected[k], actual[k], f"{where}.{k}")]
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{where}: {len(expected)} entries expected, got {len(actual)}"]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in differences(e, a, f"{where}[{i}]")]
    if isinstance(expected, float) and isinstance(actual, float):
        if math.isclose(expected, actual, rel_tol=1e-5, abs_tol=1e-6):
            return []
    elif expected == actual and type(expected) is type(actual):
        return []
    return [f"{where}: expected {expected!r}, got {actual!r}"]


def float_path_pinned() -> bool:
    """Whether `PINNED_ENV` fixes every float this machine computes (x86-64 with PyTorch's MKL build)."""
    import torch

    return platform.machine().lower() in {"x86_64", "amd64"} and torch.backends.mkl.is_available()


def portable_differences(expected: Any, actual: Any, where: str = "") -> list[str]:
    """Where two logs differ in what no float rounding can change: structure, keys, ints, strings, decisions."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        if set(expected) != set(actual):
            return [f"{where}: keys {sorted(set(expected) ^ set(actual))} differ"]
        return [d for k in expected for d in portable_differences(expected[k], actual[k], f"{where}.{k}")]
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{where}: {len(expected)} entries expected, got {len(actual)}"]
        return [d for i, (e, a) in enumerate(zip(expected, actual))
                for d in portable_differences(e, a, f"{where}[{i}]")]
    if isinstance(expected, float) and isinstance(actual, float):
        if math.isfinite(expected) == math.isfinite(actual):
            return []
    elif where.rsplit(".", 1)[-1] in FREE_TEXT_KEYS and isinstance(expected, str) and isinstance(actual, str):
        if _NUMBER.sub("#", expected) == _NUMBER.sub("#", actual):
            return []
    elif expected == actual and type(expected) is type(actual):
        return []
    return [f"{where}: expected {expected!r}, got {actual!r}"]


def record(names: list[str], scratch: Path) -> None:
    DATA.mkdir(exist_ok=True)
    for case in CASES:
        if names and case.name not in names:
            continue
        logs = run_case(case, scratch / case.name)
        (DATA / f"{case.name}.json").write_text(json.dumps(logs, indent=1, sort_keys=True) + "\n")
        print(f"recorded {case.name}")


if __name__ == "__main__":
    import tempfile

    if len(sys.argv) < 2 or sys.argv[1] != "record":
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as tmp:
        record(sys.argv[2:], Path(tmp))
