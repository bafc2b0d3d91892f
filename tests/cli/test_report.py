"""`esper report`: PNGs for fake heuristic / compare / ppo run directories, clear errors for missing files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from esper.cli import report_plots
from esper.cli.main import main
from esper.cli.report import render_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EPOCHS = 5
OPS = ("WAIT", "GERMINATE", "FOSSILIZE", "CULL")
# early: germinated at 1, fossilized at 5; mid: germinated at 2, culled at 4 (slot empties); late: never used.
EARLY = {1: "GERMINATED", 2: "TRAINING", 3: "BLENDING", 4: "PROBATIONARY", 5: "FOSSILIZED"}
MID = {2: "GERMINATED", 3: "TRAINING"}
ACTIONS = {1: ("GERMINATE", "early"), 2: ("GERMINATE", "mid"), 4: ("CULL", "mid"), 5: ("FOSSILIZE", "early")}


@pytest.fixture(autouse=True)
def _low_dpi(monkeypatch: pytest.MonkeyPatch) -> None:
    """Same figures at a lower resolution: rasterizing is most of the cost and these tests check files, not pixels."""
    monkeypatch.setattr(report_plots, "DPI", 50)


def _seed(stage: str | None, blueprint: str) -> dict[str, Any] | None:
    return None if stage is None else {"stage": stage, "blueprint": blueprint, "alpha": 0.5, "counterfactual": 0.7}


def step_rows(controller: str, episode: int, env: int, batch: int, *, active: bool = True,
              base_acc: float = 60.0) -> list[dict[str, Any]]:
    rows = []
    for epoch in range(1, EPOCHS + 1):
        op, slot = ACTIONS.get(epoch, ("WAIT", None)) if active else ("WAIT", None)
        early = _seed(EARLY.get(epoch), "conv_light") if active else None
        mid = _seed(MID.get(epoch), "attention") if active else None
        comps = {"attribution": 0.2 * epoch, "proxy": 0.0, "blending_warning": -0.1 if epoch == 3 else 0.0,
                 "probation_warning": 0.0, "pbrs": 0.3, "rent": -0.15, "action_shaping": -0.02 if op != "WAIT" else 0.0,
                 "terminal": 3.0 if epoch == EPOCHS else 0.0, "governor_penalty": 0.0, "loss_primary": 0.0,
                 "sparse_terminal": 0.0, "family": "contribution", "val_acc": base_acc + 3 * epoch}
        total = sum(v for k, v in comps.items() if k not in ("family", "val_acc"))
        rows.append({
            "batch": batch, "env": env, "episode": episode, "epoch": epoch, "controller": controller, "op": op,
            "slot": slot, "blueprint": "conv_light" if op == "GERMINATE" else None, "blend": None, "success": True,
            "reason": "test", "train_loss": 1.0 / epoch, "train_acc": base_acc + 2 * epoch, "val_loss": 1.1 / epoch,
            "val_acc": base_acc + 3 * epoch, "rollback": False,
            "slots": {"early": early, "mid": mid, "late": None},
            "seed_params": (12_000 if early else 0) + (30_000 if mid else 0),
            "reward_components": {**comps, "total": total}, "reward": total,
        })
    return rows


def episode_row(controller: str, episode: int, env: int, batch: int, *, active: bool = True,
                base_acc: float = 60.0) -> dict[str, Any]:
    curve = [base_acc + 3 * e for e in range(1, EPOCHS + 1)]
    counts = {"WAIT": 1, "GERMINATE": 2, "FOSSILIZE": 1, "CULL": 1} if active else {
        "WAIT": EPOCHS, "GERMINATE": 0, "FOSSILIZE": 0, "CULL": 0}
    return {"controller": controller, "env_id": env, "episode": episode, "batch": batch, "env_seed": 42 + episode,
            "final_accuracy": curve[-1], "best_accuracy": max(curve), "seeds_created": 2 if active else 0,
            "seeds_fossilized": 1 if active else 0, "seeds_culled": 1 if active else 0,
            "params_added": 12_000 if active else 0, "action_counts": counts, "accuracy_curve": curve,
            "total_reward": 4.2, "rollbacks": 0}


def _write(run: Path, command: str, files: dict[str, Any]) -> Path:
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"command": command, "argv": [], "config": {}}))
    for name, content in files.items():
        text = "".join(json.dumps(r) + "\n" for r in content) if name.endswith(".jsonl") else json.dumps(content)
        (run / name).write_text(text)
    return run


def make_heuristic(root: Path) -> Path:
    steps = [r for ep in range(2) for r in step_rows("heuristic", ep, 0, ep, base_acc=60 + 2 * ep)]
    episodes = [episode_row("heuristic", ep, 0, ep, base_acc=60 + 2 * ep) for ep in range(2)]
    return _write(root / "heuristic", "heuristic", {"steps.jsonl": steps, "episodes.jsonl": episodes})


def make_compare(root: Path) -> Path:
    controllers = ("static", "heuristic", "random")
    steps, episodes = [], []
    for ep in range(2):
        for env, c in enumerate(controllers):
            active, acc = c != "static", 58 + 2 * env + ep
            steps += step_rows(c, ep, env, ep, active=active, base_acc=acc)
            episodes.append(episode_row(c, ep, env, ep, active=active, base_acc=acc))
    per = {}
    for c in controllers:
        eps = [e for e in episodes if e["controller"] == c]
        fa = [e["final_accuracy"] for e in eps]
        mean = sum(fa) / len(fa)
        per[c] = {"episodes": len(eps), "final_accuracy": {"mean": mean, "std": 0.7},
                  "best_accuracy": {"mean": mean, "std": 0.7},
                  "params_added": {"mean": float(eps[0]["params_added"]), "std": 500.0},
                  **{k: float(eps[0][k]) for k in ("seeds_created", "seeds_fossilized", "seeds_culled")},
                  "total_reward": {"mean": 4.2, "std": 0.1},
                  "action_mix": {op: n / EPOCHS for op, n in eps[0]["action_counts"].items()},
                  "accuracy_curve_mean": eps[0]["accuracy_curve"]}
    pairwise = {a: {b: {"wins": 2, "losses": 0, "ties": 0, "mean_delta": 2.0, "ci95": [1.0, 3.0],
                        "verdict": "better"} for b in controllers if b != a} for a in controllers}
    results = {"reference": "static", "controllers": list(controllers), "tie_threshold": 0.5, "seed": 42,
               "per_controller": per, "pairwise": pairwise, "episodes": episodes}
    return _write(root / "compare", "compare", {"results.json": results, "steps.jsonl": steps,
                                                "episodes.jsonl": episodes})


def make_ppo(root: Path) -> Path:
    steps, episodes, history = [], [], []
    for batch in range(2):
        for env in range(2):
            acc = 55 + 5 * batch + env
            steps += step_rows("ppo", 2 * batch + env, env, batch, base_acc=acc)
            episodes.append(episode_row("ppo", 2 * batch + env, env, batch, base_acc=acc))
        history.append({
            "batch": batch, "episodes_completed": 2 * batch + 2, "avg_accuracy": 75.5 - 5 * batch,  # best batch 0
            "rolling_accuracy": 70.5 + 2.5 * batch, "avg_reward": 4.2,
            "action_shares": {"WAIT": 0.2, "GERMINATE": 0.4, "FOSSILIZE": 0.2, "CULL": 0.2},
            "reward_components": {"attribution": 0.6, "pbrs": 0.3, "rent": -0.15, "action_shaping": -0.016,
                                  "terminal": 0.6, "total": 1.334},
            "policy_loss": -0.01, "value_loss": 0.5 - 0.1 * batch, "entropy": 1.9 - 0.1 * batch,
            "entropy_op": 1.2, "approx_kl": 0.004 + 0.002 * batch, "clip_fraction": 0.05,
            "explained_variance": 0.1 + 0.3 * batch, "ratio_max": 1.3, "ratio_min": 0.75,
        })
    return _write(root / "ppo", "ppo", {"history.jsonl": history, "steps.jsonl": steps, "episodes.jsonl": episodes})


EXPECTED = {
    "heuristic": (make_heuristic, {"accuracy.png", "loss.png", "lifecycle.png", "actions.png", "rewards.png",
                                   "params.png"}),
    "compare": (make_compare, {"compare_final_accuracy.png", "compare_curves.png", "compare_loss.png",
                               "compare_params.png", "compare_actions.png", "lifecycle.png"}),
    "ppo": (make_ppo, {"accuracy.png", "loss.png", "lifecycle.png", "actions.png", "rewards.png", "ppo_health.png"}),
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_report_writes_valid_pngs(tmp_path: Path, kind: str) -> None:
    make, expected = EXPECTED[kind]
    run = make(tmp_path)
    written = render_report(run)
    assert {p.name for p in written} == expected
    for path in written:
        assert path.parent == run / "report"
        data = path.read_bytes()
        assert len(data) > 1000 and data.startswith(PNG_MAGIC), path


@pytest.mark.parametrize(("kind", "missing"), [("heuristic", "steps.jsonl"), ("compare", "results.json"),
                                               ("ppo", "history.jsonl"), ("compare", "config.json")])
def test_missing_file_is_named(tmp_path: Path, kind: str, missing: str) -> None:
    run = EXPECTED[kind][0](tmp_path)
    (run / missing).unlink()
    with pytest.raises(FileNotFoundError, match=missing.replace(".", r"\.")):
        render_report(run)


def test_empty_log_and_unknown_run_type(tmp_path: Path) -> None:
    run = make_heuristic(tmp_path)
    (run / "steps.jsonl").write_text("")
    with pytest.raises(ValueError, match=r"steps\.jsonl"):
        render_report(run)
    (run / "config.json").write_text(json.dumps({"command": "datagen"}))
    with pytest.raises(ValueError, match="datagen"):
        render_report(run)


def test_cli_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_heuristic(tmp_path)
    assert main(["report", str(run), "--out", str(tmp_path / "plots")]) == 0
    assert "lifecycle.png" in capsys.readouterr().out
    assert {p.name for p in (tmp_path / "plots").iterdir()} == EXPECTED["heuristic"][1]
    assert not (run / "report").exists()
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (run / "episodes.jsonl").unlink()
    assert main(["report", str(run)]) == 2
    assert "episodes.jsonl" in capsys.readouterr().err
