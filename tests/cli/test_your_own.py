"""The README's "Your own blueprint, your own data", run as written: a blueprint and a task defined only in a plugin
module drive `fixed:`, `grow:`, `random`, `train ppo`, `compare` and `study`, and an `.npz` file of 16×16 images in 5
classes runs `compare` and a `quick` study.

The plugin's blueprint makes the CNN policy head 6 blueprints long (52 joint actions, 83 features), so any count of
blueprints fixed in the code (5, 43, 80, the 12 germinations per slot) breaks these runs. Every command runs in a
process of its own: the plugin's registrations must not leak into the other tests' registries.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from esper.kasmina.hosts import CNNHost

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "tests" / "fixtures" / "my_plugin.py"
SECTION = (ROOT / "README.md").read_text(encoding="utf-8").split("## Your own blueprint, your own data\n", 1)[1]
SECTION = SECTION.split("\n## ", 1)[0]
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", SECTION, re.S)
COMMANDS = [line for block in re.findall(r"```bash\n(.*?)```", SECTION, re.S)
            for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "esper", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=900)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the README's plugin and .npz file, after every command of the section ran there."""
    work = tmp_path_factory.mktemp("your_own")
    (work / "my_plugin.py").write_text(PYTHON_BLOCKS[0], encoding="utf-8")
    subprocess.run([sys.executable, "-c", PYTHON_BLOCKS[1]], cwd=work, check=True, timeout=120)
    for command in COMMANDS:
        args = shlex.split(command, comments=True)
        assert args[0] == "esper", command
        done = _run(args[1:], work)
        assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return work


def test_the_section_is_what_this_test_runs() -> None:
    assert PYTHON_BLOCKS[0] == PLUGIN.read_text(encoding="utf-8")  # the fixture is the README's plugin
    assert len(PYTHON_BLOCKS) == 2 and len(COMMANDS) == 6
    assert [c.split()[1] for c in COMMANDS] == ["compare", "train", "compare", "study", "compare", "study"]


def _compare_of(work: Path, controller: str) -> Path:
    [run] = [p for p in (work / "runs").glob("compare_*")
             if any(c.startswith(controller) for c in json.loads((p / "results.json").read_text())["controllers"])]
    return run


def test_fixed_grow_and_random_build_and_grow_the_plugin_blueprint_on_the_plugin_task(work: Path) -> None:
    run = _compare_of(work, "grow:pointwise@late")
    assert json.loads((run / "config.json").read_text())["config"]["task"] == "stripes"
    episodes = _rows(run / "episodes.jsonl")
    host = {e["controller"]: e["host_params"] for e in episodes}
    assert host["fixed:pointwise@mid"] == host["static"] + 16 * 16  # a 1×1 convolution over the mid slot's channels
    steps = _rows(run / "steps.jsonl")
    grown = {(s["slot"], s["blueprint"]) for s in steps if s["controller"] == "grow:pointwise@late" and s["op"] ==
             "GERMINATE"}
    assert grown == {("late", "pointwise")}
    assert any(s["controller"] == "random" and s["op"] != "WAIT" for s in steps)
    assert {e["controller"] for e in episodes} == {"static", "fixed:pointwise@mid", "grow:pointwise@late", "random"}


def test_ppo_learns_over_the_plugin_blueprint_and_its_checkpoint_records_them(work: Path) -> None:
    checkpoint = torch.load(work / "runs" / "stripes" / "checkpoints" / "final.pt", weights_only=True)
    assert checkpoint["blueprints"] == ["noop", "conv_light", "attention", "norm", "depthwise", "pointwise"]
    assert checkpoint["plugins"] == [str(work / "my_plugin.py")]
    network = checkpoint["agent"]["network"]
    assert network["heads.blueprint.2.weight"].shape[0] == 6 and network["trunk.0.weight"].shape[1] == 83
    assert len(_rows(work / "runs" / "stripes" / "history.jsonl")) == 1
    run = _compare_of(work, "ppo:")
    assert {e["controller"] for e in _rows(run / "episodes.jsonl")} == {"static", "ppo:stripes"}


def test_the_policy_is_refused_without_its_plugin_naming_the_fix(work: Path) -> None:
    done = _run(["compare", "--controllers", "static", "ppo:runs/stripes", "--episodes", "1", "--max-epochs", "3"],
                work)
    assert done.returncode == 2
    assert "trained on task 'stripes'" in done.stderr and f"--plugin {work / 'my_plugin.py'}" in done.stderr
    done = _run(["compare", "--controllers", "static", "fixed:pointwise@mid", "--episodes", "1"], work)
    assert done.returncode == 2 and "unknown blueprint 'pointwise'" in done.stderr and "--plugin" in done.stderr


def test_a_study_trains_and_evaluates_on_the_plugin_task(work: Path) -> None:
    [study] = [p for p in (work / "runs").glob("study_*") if "stripes" in (p / "config.json").read_text()]
    results = json.loads((study / "results.json").read_text())
    assert "fixed:pointwise@mid" in results["controllers"]
    checkpoint = torch.load(study / "train" / "run-0" / "checkpoints" / "final.pt", weights_only=True)
    assert len(checkpoint["blueprints"]) == 6
    assert (study / "summary.md").is_file()
    # it ends with its plots (the in-process study tests skip them): every phase's and the compute figure
    assert (study / "report" / "accuracy_vs_compute.png").is_file()
    assert (study / "report" / "eval" / "compare_final_accuracy.png").is_file()
    assert (study / "report" / "train" / "run-0" / "ppo_health.png").is_file()


def test_an_npz_of_16px_images_in_5_classes_runs_compare_and_a_quick_study(work: Path) -> None:
    [run] = [p for p in (work / "runs").glob("compare_npz-shapes16-*")]
    assert json.loads((run / "config.json").read_text())["config"]["task"] == "npz:shapes16.npz"
    host = CNNHost(in_channels=1, num_classes=5, channels=(8, 16, 32))  # the data's channels and classes
    assert {e["host_params"] for e in _rows(run / "episodes.jsonl") if e["controller"] == "static"} == {
        sum(p.numel() for p in host.parameters())}
    [study] = [p for p in (work / "runs").glob("study_*") if "npz:shapes16.npz" in (p / "config.json").read_text()]
    assert {"static", "heuristic"} <= set(json.loads((study / "results.json").read_text())["controllers"])
