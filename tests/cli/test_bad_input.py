"""Every bad-input path of the command line, table-driven: exit 2, one stderr line that names the problem (and how
to fix it), no traceback, and nothing left behind (no run directory, no change to existing files)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from esper.cli.main import main
from esper.simic.ppo.checkpoint import PPOLearnerState
from esper.simic.ppo.config import TrainingConfig

pytestmark = pytest.mark.smoke

QUIET = ["--no-tui", "--no-tensorboard"]
SMALL = ["--max-train-samples", "64", "--max-val-samples", "64", "--max-epochs", "3", "--param-cost", "1.0"]
HEURISTIC = ["train", "heuristic", *SMALL, *QUIET]
COMPARE = ["compare", "--episodes", "1", *SMALL, *QUIET]
PPO = ["train", "ppo", "--preset", "quick", "--device", "cpu", *QUIET]
STUDY = ["study", "--preset", "quick", "--device", "cpu", *QUIET]
FIX_WORDS = ("pass", "use", "choose", "set it", "see '", "rerun", "check", "drop", "evaluate", "retrain", "start",
             "must be", "expected", "choose from", "available:")


@dataclass(frozen=True)
class Fixtures:
    """Files the cases point at, built once: a plain file, checkpoints good and broken, fake run directories."""

    root: Path

    def __getattr__(self, name: str) -> str:
        return str(self.root / name)


def _policy_config(**changes: Any) -> TrainingConfig:
    base = {"max_epochs": 3, "n_envs": 2, "group_size": 1, "device": "cpu", "reward_family": "contribution",
            "max_train_samples": 64, "max_val_samples": 64}  # the setting of COMPARE
    return TrainingConfig.preset("quick").with_overrides(**{**base, **changes})


def _save_policy(path: Path, config: TrainingConfig, edit: Callable[[dict[str, Any]], None] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    PPOLearnerState.new(config, torch.device("cpu")).save(path)
    if edit is not None:
        data = torch.load(path, weights_only=True)
        edit(data)
        torch.save(data, path)


def _nan_weight(data: dict[str, Any]) -> None:
    name = next(iter(data["agent"]["network"]))
    data["agent"]["network"][name] = torch.full_like(data["agent"]["network"][name], float("nan"))


def _wrong_shape(data: dict[str, Any]) -> None:
    name = next(k for k, v in data["agent"]["network"].items() if v.dim() == 2)
    data["agent"]["network"][name] = torch.zeros(3, 3)


def _flat_config(data: dict[str, Any]) -> None:
    """The checkpoint as an esper before the config's sections wrote it: every setting at the top level."""
    config = data["config"]
    data["config"] = {**{k: v for section in ("episode", "ppo", "reward", "execution") for k, v in
                         config.pop(section).items()}, **config}


def _fake_run(path: Path, command: str, config: dict[str, Any], episodes: int = 1) -> None:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"command": command, "argv": [], "config": config}))
    (path / "episodes.jsonl").write_text("".join(json.dumps({"controller": "static", "episode": e}) + "\n"
                                                 for e in range(episodes)))


@pytest.fixture(scope="module")
def fx(tmp_path_factory: pytest.TempPathFactory) -> Fixtures:
    root = tmp_path_factory.mktemp("bad_input")
    (root / "afile").write_text("not a directory\n")
    (root / "bad.json").write_text("{not json")
    (root / "list.json").write_text("[1, 2]")
    (root / "corrupt.pt").write_bytes(os.urandom(256))
    (root / "latin1.txt").write_bytes(b"caf\xe9 \xff\xfe" * 50)
    (root / "userdir").mkdir()
    (root / "userdir" / "notes.txt").write_text("mine")
    (root / "emptydir").mkdir()
    config = _policy_config()
    _save_policy(root / "ok.pt", config)
    _save_policy(root / "nan.pt", config, _nan_weight)
    _save_policy(root / "noagent.pt", config, lambda d: d.pop("agent"))
    _save_policy(root / "shape.pt", config, _wrong_shape)
    _save_policy(root / "longer.pt", _policy_config(max_epochs=5))
    _save_policy(root / "twoslots.pt", _policy_config(slots=["early", "mid"]))
    _save_policy(root / "moredata.pt", _policy_config(max_train_samples=128))
    _save_policy(root / "badconfig.pt", config, lambda d: d["config"]["ppo"].update(lr=-1.0))
    _save_policy(root / "flatconfig.pt", config, _flat_config)
    ppo_run = root / "ppo_run"
    _save_policy(ppo_run / "checkpoints" / "latest.pt", config)
    (ppo_run / "config.json").write_text(json.dumps({"command": "ppo", "argv": [], "config": config.to_dict()}))
    flat_run = root / "ppo_flat_run"
    _save_policy(flat_run / "checkpoints" / "latest.pt", config, _flat_config)
    (flat_run / "config.json").write_text(json.dumps({"command": "ppo", "argv": [], "config": config.to_dict()}))
    (root / "ppo_fresh" / "checkpoints").mkdir(parents=True)
    (root / "ppo_fresh" / "config.json").write_text(json.dumps({"command": "ppo", "argv": [], "config": {}}))
    _fake_run(root / "compare_run", "compare", {"seed": 7})
    (root / "report_unknown").mkdir()
    (root / "report_unknown" / "config.json").write_text(json.dumps({"command": "datagen"}))
    _own_data(root)
    return Fixtures(root)


def _own_data(root: Path) -> None:
    """Images of one's own that would mislead a run: a folder with an empty class folder, an .npz whose val split
    lacks a class of train."""
    from PIL import Image

    for split, name, n in (("train", "c0", 3), ("train", "c1", 3), ("train", "c2", 0), ("test", "c0", 1)):
        (root / "empty_class" / split / name).mkdir(parents=True)
        for i in range(n):
            Image.fromarray(np.full((4, 4), i, np.uint8)).save(root / "empty_class" / split / name / f"{i}.png")
    images = np.zeros((6, 4, 4), np.uint8)
    np.savez(root / "val_lacks.npz", x_train=images, y_train=np.arange(6) % 3, x_test=images, y_test=np.arange(6) % 3,
             x_val=images[:2], y_val=np.array([0, 1]))


@dataclass(frozen=True)
class Case:
    name: str
    argv: Callable[[Fixtures], list[str]]
    expect: str  # the problem, as the message names it


CASES = [
    # numbers of TrainingConfig (train ppo --set, --config-json) and of the flags
    Case("lr-infinite", lambda f: [*PPO, "--set", "lr=Infinity"], "lr"),
    Case("lr-nan", lambda f: [*PPO, "--set", "lr=NaN"], "lr"),
    Case("max-grad-norm-negative", lambda f: [*PPO, "--set", "max_grad_norm=-1"], "max_grad_norm"),
    Case("value-coef-negative", lambda f: [*PPO, "--set", "value_coef=-1"], "value_coef"),
    Case("hidden-dim-huge", lambda f: [*PPO, "--set", "hidden_dim=1000000"], "hidden_dim"),
    Case("n-envs-huge", lambda f: [*PPO, "--set", "n_envs=100000"], "n_envs"),
    Case("n-envs-bool", lambda f: [*PPO, "--set", "n_envs=true"], "n_envs"),
    Case("config-seed-negative", lambda f: [*PPO, "--set", "seed=-1"], "seed"),
    Case("config-seed-huge", lambda f: [*PPO, "--set", "seed=12345678901234567890123"], "seed"),
    Case("gamma-above-one", lambda f: [*PPO, "--set", "gamma=1.5"], "gamma"),
    Case("episode-length-huge", lambda f: [*PPO, "--set", "max_epochs=100000"], "max_epochs"),
    Case("batch-size-zero", lambda f: [*PPO, "--set", "batch_size=0"], "batch_size"),
    Case("entropy-negative", lambda f: [*PPO, "--set", "entropy_coef=-0.1"], "entropy_coef"),
    Case("clip-ratio-zero", lambda f: [*PPO, "--set", "clip_ratio=0"], "clip_ratio"),
    Case("unknown-key", lambda f: [*PPO, "--set", "no_such_key=1"], "no_such_key"),
    Case("set-without-equals", lambda f: [*PPO, "--set", "lr"], "KEY=VALUE"),
    Case("ppo-episodes-zero", lambda f: [*PPO, "--episodes", "0"], "--episodes"),
    Case("ppo-seed-huge", lambda f: [*PPO, "--seed", "12345678901234567890123"], "--seed"),
    Case("config-json-missing", lambda f: [*PPO, "--config-json", f.nothere], "not found"),
    Case("config-json-invalid", lambda f: [*PPO, "--config-json", str(f.root / "bad.json")], "not valid JSON"),
    Case("config-json-not-object", lambda f: [*PPO, "--config-json", str(f.root / "list.json")], "JSON object"),
    Case("config-json-directory", lambda f: [*PPO, "--config-json", f.emptydir], "emptydir"),
    Case("preset-unknown", lambda f: [*PPO, "--preset", "nope"], "nope"),
    # a misspelt name is answered with the name meant
    Case("preset-typo", lambda f: [*PPO, "--preset", "quik"], "did you mean 'quick'"),
    Case("study-preset-typo", lambda f: [*STUDY, "--preset", "fashion-mnist"], "did you mean 'fashion_mnist'"),
    Case("family-typo", lambda f: [*STUDY, "--family", "synthetic-shift-v2"], "did you mean 'synthetic-shift-v1'"),
    Case("task-typo", lambda f: [*HEURISTIC, "--task", "synthtic"], "did you mean 'synthetic'"),
    Case("task-form-typo", lambda f: [*HEURISTIC, "--task", "npx:digits.npz"], "did you mean 'npz:digits.npz'"),
    Case("controller-typo", lambda f: [*COMPARE, "--controllers", "static", "heuristc"], "did you mean 'heuristic'"),
    Case("controller-typo-with-argument", lambda f: [*COMPARE, "--controllers", "static", "fixd:norm@mid"],
         "did you mean 'fixed:norm@mid'"),
    Case("blueprint-typo", lambda f: [*COMPARE, "--controllers", "static", "fixed:conv_lite@mid"],
         "did you mean 'conv_light'"),
    Case("match-typo", lambda f: [*COMPARE, "--controllers", "static", "static:matched", "heuristic", "--match",
                                  "heuristc"], "did you mean 'heuristic'"),
    Case("policy-blueprint-typo", lambda f: [*PPO, "--set", 'blueprints=["nrom"]'], "did you mean 'norm'"),
    Case("heuristic-seed-huge", lambda f: [*HEURISTIC, "--seed", "12345678901234567890123"], "--seed"),
    Case("heuristic-seed-negative", lambda f: [*HEURISTIC, "--seed", "-1"], "--seed"),
    Case("heuristic-seed-text", lambda f: [*HEURISTIC, "--seed", "abc"], "--seed"),
    Case("max-epochs-zero", lambda f: [*HEURISTIC, "--max-epochs", "0"], "--max-epochs"),
    Case("max-epochs-huge", lambda f: [*HEURISTIC, "--max-epochs", "100000"], "--max-epochs"),
    Case("episodes-zero", lambda f: [*HEURISTIC, "--episodes", "0"], "--episodes"),
    Case("samples-zero", lambda f: [*HEURISTIC, "--max-train-samples", "0"], "--max-train-samples"),
    Case("param-cost-infinite", lambda f: [*HEURISTIC, "--param-cost", "inf"], "--param-cost"),
    Case("param-cost-nan", lambda f: [*HEURISTIC, "--param-cost", "nan"], "--param-cost"),
    Case("compute-cost-negative", lambda f: [*HEURISTIC, "--charge", "compute", "--compute-cost", "-1"],
         "--compute-cost"),
    Case("charge-unknown", lambda f: [*HEURISTIC, "--charge", "flops"], "flops"),
    Case("compute-cost-without-its-charge", lambda f: [*HEURISTIC, "--compute-cost", "0.5"], "charge 'compute'"),
    Case("max-seeds-above-slots", lambda f: [*HEURISTIC, "--max-seeds", "9"], "--max-seeds"),
    Case("task-unknown", lambda f: [*HEURISTIC, "--task", "imagenet"], "imagenet"),
    Case("slot-unknown", lambda f: [*HEURISTIC, "--slots", "deep"], "deep"),
    Case("telemetry-level-unknown", lambda f: [*HEURISTIC, "--telemetry-level", "loud"], "loud"),
    Case("device-bogus", lambda f: [*HEURISTIC, "--device", "bogus"], "bogus"),
    Case("device-missing-gpu", lambda f: [*HEURISTIC, "--device", "cuda:7"], "cuda:7"),
    Case("tie-threshold-negative", lambda f: [*COMPARE, "--controllers", "static", "--tie-threshold", "-1"],
         "--tie-threshold"),
    Case("study-seeds-zero", lambda f: [*STUDY, "--seeds", "0"], "--seeds"),
    Case("study-lr-infinite", lambda f: [*STUDY, "--set", "lr=Infinity"], "lr"),
    Case("study-ppo-not-a-directory", lambda f: [*STUDY, "--ppo", f.afile], "--ppo"),
    Case("study-ppo-with-other-setting", lambda f: [*STUDY, "--ppo", str(f.ppo_run), "--set", "max_train_samples=512"],
         "max_train_samples cannot be changed"),
    # controllers and checkpoints
    Case("controller-unknown", lambda f: [*COMPARE, "--controllers", "static", "oracle"], "oracle"),
    Case("controller-duplicate", lambda f: [*COMPARE, "--controllers", "static", "static"], "distinct"),
    Case("checkpoint-missing", lambda f: [*COMPARE, "--controllers", "static", f"ppo:{f.nothere}.pt"], "not found"),
    Case("checkpoint-corrupt", lambda f: [*COMPARE, "--controllers", "static", f"ppo:{f.root}/corrupt.pt"],
         "corrupt.pt"),
    Case("checkpoint-nan-weights", lambda f: [*COMPARE, "--controllers", "static", f"ppo:{f.root}/nan.pt"],
         "non-finite"),
    Case("checkpoint-without-agent", lambda f: [*COMPARE, "--controllers", "static", f"ppo:{f.root}/noagent.pt"],
         "'agent'"),
    Case("checkpoint-wrong-shape", lambda f: [*COMPARE, "--controllers", "static", f"ppo:{f.root}/shape.pt"],
         "size mismatch"),
    Case("checkpoint-invalid-config", lambda f: [*COMPARE, "--controllers", "static", f"ppo:{f.root}/badconfig.pt"],
         "Invalid config: ppo.lr"),
    Case("checkpoint-flat-config", lambda f: [*COMPARE, "--controllers", "static", f"ppo:{f.root}/flatconfig.pt"],
         "written by an esper whose config had no sections"),
    Case("resume-flat-checkpoint", lambda f: [*PPO, "--resume", f.ppo_flat_run],
         "written by an esper whose config had no sections"),
    Case("set-unknown-key", lambda f: [*PPO, "--set", "ppo.gama=0.9"], "Unknown training config keys: ['ppo.gama']"),
    Case("set-setting-in-another-section", lambda f: [*PPO, "--set", "ppo.gamma=0.9"],
         "(did you mean 'reward.gamma'?)"),
    Case("config-json-section-not-an-object", lambda f: [*PPO, "--config-json", '{"ppo": 3}'],
         "'ppo' is a section"),
    Case("checkpoint-other-length", lambda f: [*COMPARE, "--controllers", "static", f"ppo:{f.root}/longer.pt"],
         "--max-epochs 5"),
    Case("checkpoint-other-caps", lambda f: [*COMPARE, "--controllers", "static", f"ppo:{f.root}/moredata.pt"],
         "--max-train-samples 128"),
    Case("checkpoint-other-slots", lambda f: [*COMPARE, "--controllers", "static", f"ppo:{f.root}/twoslots.pt"],
         "slots"),
    Case("checkpoint-run-dir-without-final", lambda f: [*COMPARE, "--controllers", "static", f"ppo:{f.ppo_run}"],
         "final.pt"),
    # run directories
    Case("run-dir-is-a-file", lambda f: [*HEURISTIC, "--run-dir", f.afile], "is a file"),
    Case("run-dir-under-a-file", lambda f: [*HEURISTIC, "--run-dir", f.afile + "/sub"], "afile/sub"),
    Case("runs-root-is-a-file", lambda f: [*HEURISTIC, "--runs-root", f.afile], "afile"),
    Case("run-dir-of-the-user", lambda f: [*HEURISTIC, "--run-dir", f.userdir], "not an esper run directory"),
    Case("overwrite-refuses-a-user-dir", lambda f: [*HEURISTIC, "--run-dir", f.userdir, "--overwrite"],
         "not an esper run directory"),
    Case("run-dir-of-another-command", lambda f: [*HEURISTIC, "--run-dir", f.compare_run], "'compare' run"),
    Case("compare-rerun-other-arguments", lambda f: [*COMPARE, "--controllers", "static", "--run-dir",
                                                     f.compare_run], "other arguments"),
    Case("ppo-run-dir-is-a-file", lambda f: [*PPO, "--run-dir", f.afile], "is a file"),
    Case("ppo-runs-root-is-a-file", lambda f: [*PPO, "--runs-root", f.afile], "afile"),
    Case("resume-not-there", lambda f: [*PPO, "--resume", f.nothere], "not found"),
    Case("resume-without-checkpoint", lambda f: [*PPO, "--resume", f.ppo_fresh], "nothing to resume"),
    Case("resume-and-overwrite", lambda f: [*PPO, "--resume", f.ppo_run, "--overwrite"], "--overwrite"),
    Case("resume-with-other-run-dir", lambda f: [*PPO, "--resume", f.ppo_run, "--run-dir", f.emptydir],
         "drop --run-dir"),
    Case("resume-changes-a-fixed-field", lambda f: [*PPO, "--resume", f.ppo_run, "--set", "lr=0.001"], "lr"),
    # data
    Case("data-path-missing", lambda f: [*HEURISTIC, "--data-path", f.nothere], "nothere"),
    Case("data-path-directory", lambda f: [*HEURISTIC, "--data-path", f.emptydir], "emptydir"),
    Case("data-path-not-utf8", lambda f: [*HEURISTIC, "--task", "tinystories", "--data-path",
                                          str(f.root / "latin1.txt")], "latin1.txt"),
    Case("data-path-too-small", lambda f: [*HEURISTIC, "--task", "tinystories", "--data-path", f.afile], "afile"),
    Case("dataset-missing", lambda f: [*HEURISTIC, "--task", "cifar10", "--data-dir", f.emptydir], "--download"),
    Case("folder-empty-class", lambda f: [*COMPARE, "--controllers", "static", "--task", f"folder:{f.empty_class}"],
         "train/c2 is empty"),
    Case("npz-val-lacks-a-class", lambda f: [*COMPARE, "--controllers", "static", "--task",
                                             f"npz:{f.root}/val_lacks.npz"],
         "the validation split has no sample of class(es) [2]"),
    Case("augment-unknown", lambda f: [*COMPARE, "--controllers", "static", "--augment", "rotate"],
         "augmentation 'rotate' is not one of none, crop, flip, crop,flip"),
    Case("augment-without-images", lambda f: [*HEURISTIC, "--task", "synthetic_text", "--augment", "flip"],
         "no images to augment"),
    Case("ppo-augment-without-images", lambda f: [*PPO, "--task", "synthetic_text", "--augment", "crop"],
         "no images to augment"),
    # report
    Case("report-not-there", lambda f: ["report", f.nothere], "does not exist"),
    Case("report-a-file", lambda f: ["report", f.afile], "is a file"),
    Case("report-not-a-run", lambda f: ["report", f.emptydir], "config.json"),
    Case("report-unknown-run-type", lambda f: ["report", f.report_unknown], "datagen"),
    Case("report-out-is-a-file", lambda f: ["report", f.compare_run, "--out", f.afile], "--out"),
]


def _snapshot(*roots: Path) -> dict[str, tuple[int, int]]:
    """Every path under the roots with its size and modification time."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for root in roots for p in sorted(root.rglob("*"))}


def test_the_table_is_large_and_distinct() -> None:
    assert len(CASES) >= 40
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_exits_2_with_one_line_and_leaves_nothing(case: Case, fx: Fixtures, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # default run directories would appear under ./runs
    before = _snapshot(fx.root, tmp_path)
    code = main(case.argv(fx))  # argparse's errors too: main never raises SystemExit
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2, captured.err + captured.out
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err + captured.out
    message = lines[0]
    assert message.startswith("error: ") and case.expect in message, message
    assert any(word in message.lower() for word in FIX_WORDS), f"no fix named: {message}"
    assert _snapshot(fx.root, tmp_path) == before  # no run directory created, nothing existing touched


@pytest.mark.skipif(not Path("/sys").is_dir(), reason="needs a read-only /sys")
def test_unwritable_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Root may write anywhere a chmod forbids, but not into sysfs: a directory nobody can create there."""
    assert main([*HEURISTIC, "--run-dir", "/sys/esper_cannot_write_here"]) == 2
    err = capsys.readouterr().err
    assert "Cannot create run directory /sys/esper_cannot_write_here" in err and "--run-dir" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_data_path_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "corpus.txt"
    path.write_text("hello")
    path.chmod(0)
    assert main([*HEURISTIC, "--data-path", str(path), "--run-dir", str(tmp_path / "r")]) == 2
    assert str(path) in capsys.readouterr().err and not (tmp_path / "r").exists()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0 and capsys.readouterr().out.startswith("esper 0.")


@pytest.mark.parametrize(("argv", "code"), [
    ([], 2), (["--bogus"], 2), (["train"], 2), (["--plugin"], 2), (["compare", "--plugin"], 2),
    (["compare", "--task", "nope"], 2), (["compare", "--controllers", "statc"], 2), (["study", "--runs", "0"], 2),
    (["train", "ppo", "--preset", "quik"], 2), (["compare", "--help"], 0), (["--help"], 0),
], ids=repr)
def test_main_returns_every_exit_code(argv: list[str], code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`main(argv)` called from Python returns the code the shell would see, argparse's refusals and --help
    included; it raises nothing, SystemExit neither."""
    monkeypatch.chdir(tmp_path)
    assert main(argv) == code
    capsys.readouterr()


def test_a_setting_change_runs_when_asked_for(fx: Fixtures, tmp_path: Path) -> None:
    """The refusal above is a default, not a wall: --allow-setting-change evaluates the policy on other caps."""
    argv = [*COMPARE, "--controllers", "static", f"ppo:{fx.root}/moredata.pt", "--run-dir", str(tmp_path / "run")]
    assert main([*argv, "--allow-setting-change"]) == 0
