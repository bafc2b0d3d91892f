"""`esper datagen`: a tiny real generation end to end, resume, health check, report, export, and bad input → exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from esper.cli.main import main
from esper.cli.train_iql import failed_health_checks
from esper.datagen.orchestrator import GenerationOrchestrator
from esper.datagen.plans import paired_seed
from esper.datagen.reader import read_episodes
from esper.datagen.schema import write_strict_json
from unit.datagen.support import make_episode

TINY = ["--task", "synthetic", "--envs", "baseline", "--policies", "random", "periodic", "--episodes-per-combo", "1",
        "--max-epochs", "3", "--max-train-samples", "64", "--max-val-samples", "32"]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("datagen") / "data"
    # two policies cannot pass the diversity checks: generation exits as `--health-check` does on it (1)
    assert main(["datagen", "--output-dir", str(out), *TINY]) == 1
    return out


def test_generation_writes_episodes_twins_manifest_and_health(generated: Path) -> None:
    episodes = read_episodes(generated)
    assert sorted(e["episode_id"] for e in episodes) == ["baseline_periodic_0000", "baseline_random-eps1.0_0000"]
    assert all(e["episode_length"] == 2 and e["max_train_samples"] == 64 for e in episodes)
    assert (generated / "twins" / f"baseline_seed{paired_seed('baseline', 0)}.json").is_file()
    manifest = json.loads((generated / "manifest.json").read_text())
    assert manifest["total_planned"] == 2 and manifest["settings"]["max_epochs"] == 3
    health = json.loads((generated / "health_report.json").read_text())
    assert set(health) >= {"action_coverage", "mask_validity", "finite_values"}


def test_rerunning_resumes_without_regenerating(generated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = {p.name: p.read_text() for p in generated.glob("*_0000.json")}
    assert main(["datagen", "--output-dir", str(generated), *TINY]) == 1  # the same dataset, the same verdict
    assert "0 to generate" in capsys.readouterr().out
    assert {p.name: p.read_text() for p in generated.glob("*_0000.json")} == before


def test_health_check_command(generated: Path, tmp_path: Path) -> None:
    (generated / "health_report.json").unlink()
    assert main(["datagen", "--health-check", str(generated)]) == 1  # two policies and three ops: blocking
    assert json.loads((generated / "health_report.json").read_text())["policy_diversity"]["level"] == "error"
    assert "policy_diversity" in failed_health_checks(generated)  # what `train iql` warns about
    healthy = tmp_path / "healthy"
    ops = ("WAIT", "GERMINATE", "FOSSILIZE", "CULL", "WAIT")
    for i, policy in enumerate(("baseline", "aggressive", "conservative", "random", "periodic", "anti-kasmina",
                                "quick-culler", "patient-culler")):
        episode = make_episode(f"baseline_{policy}_0000", ops[i % 2:] + ops[:i % 2], policy_id=policy)
        write_strict_json(healthy / f"baseline_{policy}_0000.json", episode)
    assert main(["datagen", "--health-check", str(healthy)]) == 0
    assert all(r["passed"] for r in json.loads((healthy / "health_report.json").read_text()).values())


def test_report_on_a_dataset_directory(generated: Path, tmp_path: Path) -> None:
    assert main(["report", str(generated), "--out", str(tmp_path / "plots")]) == 0
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["actions.png", "lifecycle.png", "returns.png"]


def test_export_to_minari(generated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("minari")
    pytest.importorskip("h5py")
    import minari

    root = tmp_path / "minari"
    assert main(["datagen", "export", str(generated), "--format", "minari", "--out", "esper/tiny-v0",
                 "--minari-root", str(root)]) == 0
    assert f"to {root.resolve() / 'esper' / 'tiny-v0'}:" in " ".join(capsys.readouterr().out.split())  # where it went
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINARI_DATASETS_PATH", str(root))
        dataset = minari.load_dataset("esper/tiny-v0")
        assert dataset.total_steps == 4
        recovered = dataset.recover_environment()  # the Gymnasium env of the dataset's setting
    config = recovered.unwrapped.config
    assert (config.task, config.max_epochs, config.max_train_samples, config.max_val_samples) == ("synthetic", 3, 64,
                                                                                                  32)


def test_dry_run_prints_the_matrix_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "dry"
    assert main(["datagen", "--output-dir", str(out), "--task", "synthetic", "--envs", "baseline", "wide",
                 "--episodes-per-combo", "2", "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "Matrix: 44 episodes and 4 static twins" in printed and "wide_periodic_0001" not in printed
    assert not out.exists()


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "Traceback" not in err
    return " ".join(err.split())


def _older_episode(out: Path) -> None:
    episode = make_episode()
    episode["schema_version"] = "2.1.0"
    write_strict_json(out / "baseline_baseline_0000.json", episode)


@pytest.mark.parametrize(("args", "prepare", "message"), [
    (["--envs", "nosuch"], None, "Unknown environment preset(s) nosuch"),
    (["--policies", "baseline", "nosuch"], None, "Unknown behaviour policy preset(s) nosuch"),
    (["--task", "cifar10"], None, "has no parameter cost for the gap reward"),
    (["--devices", "cuda:7"], None, "Device 'cuda:7' is not available"),
    (["--executor", "ray"], None, "The Ray executor needs workers >= 1 (--workers N)"),
    ([], lambda out: (out.mkdir(), (out / "broken.json").write_text("{oops")), "is not valid JSON"),
    ([], _older_episode, "has episode schema '2.1.0'; this esper reads schema 3.0.0 only: regenerate the dataset"),
    ([], lambda out: GenerationOrchestrator(out, ["wide"], ["random"], 1, settings={}).close(),
     "holds a different generation matrix"),
])
def test_bad_input_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                          prepare: Any, message: str) -> None:
    out = tmp_path / "out"
    if prepare is not None:
        prepare(out)
    assert main(["datagen", "--output-dir", str(out), *TINY, *args]) == 2  # the last --task wins
    assert message in _error_line(capsys)


def test_ray_without_the_extra_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    assert main(["datagen", "--output-dir", str(tmp_path / "out"), *TINY, "--executor", "ray", "--workers", "1"]) == 2
    assert "[dist] extra" in _error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_health_check_of_a_missing_or_older_directory_exits_2(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["datagen", "--health-check", str(tmp_path / "missing")]) == 2
    assert "does not exist" in _error_line(capsys)
    _older_episode(tmp_path)
    assert main(["datagen", "--health-check", str(tmp_path)]) == 2
    assert "has episode schema '2.1.0'; this esper reads schema 3.0.0 only" in _error_line(capsys)
    assert main(["datagen"]) == 2
    assert "Give --output-dir DIR" in _error_line(capsys)
