"""What every command shares, checked over the whole parser tree: no abbreviated flags, the same scale-down flags
under the TrainingConfig names, --help's default run-directory name as the commands really spell it, the run
directory printed before any work, and --config-json taking an inline object as well as a file."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from esper.cli.main import build_parser, main
from esper.cli.options import SCALE_FIELDS, scale_changes
from esper.cli.study import study_plan
from esper.cli.train_ppo import effective_config, flag_overrides
from esper.data.tasks import get_task_spec
from esper.env.setting import EpisodeScale
from esper.evaluation.studies import StudyHooks
from esper.evaluation.studies.task import study_dir
from esper.evaluation.study import STUDY_PRESETS
from esper.evaluation.study_report import REFERENCE_STUDY, demo_note
from esper.simic.ppo.config import TrainingConfig

pytestmark = pytest.mark.smoke

REQUIRED = {  # the least each command needs to parse
    "esper train ppo": [], "esper train heuristic": [], "esper train iql": ["--dataset", "d"],
    "esper compare": ["--controllers", "static"], "esper study": [],
    "esper evaluate-offline": ["--data", "d", "--controller", "iql:x"], "esper datagen": [],
    "esper datagen export": ["d", "--out", "esper/x-v0"], "esper report": ["r"],
    "esper tune heuristic": ["--budget", "100"],
}
EPISODE_COMMANDS = ("esper train ppo", "esper train heuristic", "esper compare", "esper study", "esper datagen",
                    "esper tune heuristic")


def _commands() -> dict[str, argparse.ArgumentParser]:
    """Every parser that takes options of its own, by its prog ("esper study"), found by walking the subparsers."""
    found: dict[str, argparse.ArgumentParser] = {}
    todo = [build_parser()]
    while todo:
        parser = todo.pop()
        children = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        todo += [child for action in children for child in action.choices.values()]
        if parser.prog in REQUIRED:
            found[parser.prog] = parser
    return found


def _argv(prog: str, *extra: str) -> list[str]:
    """The argv of `prog` with `extra` options: options come before a command's own subcommand and positionals."""
    words = prog.split()[1:]
    return [*words, *extra, *REQUIRED[prog]]


def _abbreviations(parser: argparse.ArgumentParser) -> list[str]:
    """A unique prefix of each of `parser`'s switch flags (no value to supply): what argparse used to expand."""
    flags = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
    switches = [s for a in parser._actions if a.nargs == 0 for s in a.option_strings if s.startswith("--")]
    return [flag[:-1] for flag in switches
            if flag[:-1] not in flags and sum(f.startswith(flag[:-1]) for f in flags) == 1 and flag != "--help"]


def test_every_command_is_found() -> None:
    assert set(_commands()) == set(REQUIRED)


@pytest.mark.parametrize("prog", sorted(REQUIRED))
def test_no_command_accepts_an_abbreviated_flag(prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`esper study --preset quick --run 2` once ran a whole study into a directory named 2 (`--run` was taken for
    `--runs-root`): every unique prefix of a flag is now an error naming the flag and the command's help."""
    parser = build_parser()
    parser.parse_args(_argv(prog))  # the command parses without the abbreviation
    abbreviations = _abbreviations(_commands()[prog])
    assert abbreviations, prog
    for abbreviation in abbreviations:
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args(_argv(prog, abbreviation))
        assert exit_info.value.code == 2
        assert capsys.readouterr().err == (f"error: unrecognized arguments: {abbreviation} "
                                           f"(see '{prog} --help')\n")


@pytest.mark.parametrize("prog", EPISODE_COMMANDS)
def test_every_episode_command_takes_the_scale_down_flags(prog: str, tmp_path: Path) -> None:
    """The same four flags (and --augment) everywhere, each stored under the EpisodeScale field it sets; --task takes
    any task the lookup resolves (here the user's own images) as its canonical name, and names a missing file at
    once."""
    images = tmp_path / "Faces.npz"
    rng = np.random.default_rng(0)
    np.savez(images, x_train=rng.random((8, 6, 6), dtype=np.float32), y_train=np.arange(8) % 2,
             x_test=rng.random((4, 6, 6), dtype=np.float32), y_test=np.arange(4) % 2)
    task = f"npz:{images}"
    args = build_parser().parse_args(_argv(prog, "--task", task, "--max-epochs", "3",
                                           "--max-train-samples", "64", "--max-val-samples", "32"))
    assert scale_changes(args) == {"task": get_task_spec(task).name, "max_epochs": 3, "max_train_samples": 64,
                                   "max_val_samples": 32}
    assert tuple(EpisodeScale.model_fields) == SCALE_FIELDS and "augment" in SCALE_FIELDS
    assert list(TrainingConfig.dotted(dict.fromkeys(SCALE_FIELDS))) == [f"episode.{f}" for f in SCALE_FIELDS]
    assert "augment" not in vars(args)  # not given: the task's own, and the default run directory it always had
    args = build_parser().parse_args(_argv(prog, "--task", task, "--augment", "flip,crop"))
    assert args.augment == "crop,flip"
    with pytest.raises(SystemExit):
        build_parser().parse_args(_argv(prog, "--task", f"npz:{tmp_path / 'missing.npz'}"))


@pytest.mark.parametrize("prog", ["esper train ppo", "esper study"])
def test_the_scale_down_flags_set_the_training_config(prog: str) -> None:
    """`train ppo` and `study` once needed `--set max_epochs=...`; the flags are that, and win over --set."""
    args = build_parser().parse_args(_argv(prog, "--preset", "quick", "--task", "fashion_mnist", "--max-epochs", "3",
                                           "--max-train-samples", "64", "--max-val-samples", "32", "--set",
                                           "max_epochs=7"))
    episode = TrainingConfig.preset("quick").with_overrides(**flag_overrides(args)).episode
    assert (episode.task, episode.max_epochs, episode.max_train_samples, episode.max_val_samples) == (
        "fashion_mnist", 3, 64, 32)
    unset = build_parser().parse_args(_argv(prog, "--preset", "quick"))
    assert not {f"episode.{f}" for f in SCALE_FIELDS} & set(flag_overrides(unset))  # no flag: the preset's values


def test_config_json_takes_an_inline_object_or_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def config(value: str) -> TrainingConfig:
        return effective_config(build_parser().parse_args(["train", "ppo", "--preset", "quick", "--config-json",
                                                           value]))

    assert config('{"n_episodes": 8, "lr": 0.001}').ppo.n_episodes == 8
    assert config('{"ppo": {"n_episodes": 8}, "reward.gamma": 1.0}').reward.gamma == 1.0
    path = tmp_path / "c.json"
    path.write_text('{"n_episodes": 12}')
    assert config(str(path)).ppo.n_episodes == 12
    code = main(["train", "ppo", "--preset", "quick", "--config-json", "n_episodes=8", "--run-dir",
                 str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "not found: n_episodes=8" in err and "inline JSON object such as" in err
    assert not (tmp_path / "run").exists()


def _help_default(prog: str) -> str:
    """The default run-directory name `prog --help` gives, e.g. "compare_<task>_s<seed>_<digest>"."""
    text = " ".join(_commands()[prog].format_help().split())
    found = re.search(r"\(default: <runs- ?root>/(\S+);", text)
    assert found, text
    return found.group(1)


def _name_pattern(name: str) -> str:
    """The regular expression of a name --help spells with placeholders."""
    pattern = re.escape(name)
    for placeholder, regex in (("<task>", "[a-z_0-9]+"), ("<preset>", "[a-z_0-9]+"), ("<seed>", r"\d+"),
                               ("<digest>", "[0-9a-f]{8}")):
        pattern = pattern.replace(placeholder, regex)
    return pattern


@pytest.mark.parametrize("prog", ["esper train ppo", "esper train heuristic", "esper train iql", "esper compare",
                                  "esper study"])
def test_help_gives_the_default_run_directory_with_its_settings_digest(prog: str) -> None:
    """Once "<command>_<task>_<time>_s<seed>": the real names end in a digest of the settings, not a time."""
    name = _help_default(prog)
    assert name.startswith(prog.split()[-1] + "_") and name.endswith("_s<seed>_<digest>"), name


def test_a_study_directory_names_its_task_and_seed_as_every_command_does(tmp_path: Path) -> None:
    """Two quick studies on different tasks were both `study_quick_s42_*`; and `--set seed=7` ran seed 7 in s42."""
    def named(*argv: str) -> str:
        args = build_parser().parse_args(["study", "--preset", "quick", "--runs-root", str(tmp_path), *argv])
        args.argv = []  # main records it
        return study_dir(study_plan(args, StudyHooks())).name

    synthetic, fashion, seven = named(), named("--task", "fashion_mnist"), named("--set", "seed=7")
    pattern = _name_pattern(_help_default("esper study"))
    assert all(re.fullmatch(pattern, name) for name in (synthetic, fashion, seven)), (synthetic, fashion, seven)
    assert synthetic.startswith("study_synthetic_s42_") and fashion.startswith("study_fashion_mnist_s42_")
    assert seven.startswith("study_synthetic_s7_")


def test_a_run_prints_its_directory_first_and_it_is_the_name_help_gives(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The run directory is the first line a command prints (so TensorBoard can watch a long run from the start),
    and its default name is the one --help describes."""
    root = tmp_path / "runs"
    assert main(["train", "heuristic", "--max-epochs", "2", "--max-train-samples", "32", "--max-val-samples", "32",
                 "--param-cost", "1", "--runs-root", str(root), "--no-tui"]) == 0
    [run] = root.iterdir()
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"Run directory: {run} (watch it: tensorboard --logdir {run / 'tb'})"
    assert re.fullmatch(_name_pattern(_help_default("esper train heuristic")), run.name), run.name


def test_the_demo_says_what_it_shows_and_names_a_reference_study_that_exists() -> None:
    args = build_parser().parse_args(shlex.split(REFERENCE_STUDY)[1:])
    assert STUDY_PRESETS["quick"].workflow_demo and not STUDY_PRESETS[args.preset].workflow_demo
    note = demo_note(STUDY_PRESETS["quick"], 10)
    assert "10-epoch episodes" in note and "heuristic ends where static does" in note and REFERENCE_STUDY in note
    assert len(note.splitlines()) <= 3
    shorter, longer = demo_note(STUDY_PRESETS["quick"], 3), demo_note(STUDY_PRESETS["quick"], 40)
    assert "its 3-epoch episodes are too short" in shorter and "10-epoch" not in shorter  # the run's own length
    assert "its 40-epoch episodes are longer than the preset's 10" in longer and "too short" not in longer
