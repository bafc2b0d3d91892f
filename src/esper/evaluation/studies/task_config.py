"""The training configs of a single-task study: the preset's with the plan's overrides (and, once the study has
chosen them, best-fixed's blueprints and the teacher), each training run on its own seed stream, a run that already
trained continued in its own setting, and --ppo runs in the setting they trained in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from esper.env.charges import AUTO_COST
from esper.env.reward_setting import RewardSetting
from esper.env.rewards import RewardFamily
from esper.evaluation.param_cost import resolve_auto_cost
from esper.evaluation.ppo_runs import saved_run
from esper.evaluation.selection_record import read_selection_record
from esper.evaluation.studies.paired import WORKER_FIELDS
from esper.evaluation.studies.plan import StudyPlan
from esper.evaluation.study import STUDY_PRESETS, run_config
from esper.evaluation.teacher_choice import TeacherChoice
from esper.leyline.errors import UserInputError
from esper.simic.ppo.checkpoint import read_policy_checkpoint, resume_config, saved_config
from esper.simic.ppo.config import TrainingConfig, charge_fields
from esper.simic.ppo.teacher import NO_TEACHER
from esper.storage.rundir import checkpoints_dir
from esper.tamiyo import read_heuristic_record

__all__ = ["DEFAULT_TEACHER", "base_config", "chooses_teacher", "run_configs", "teacher_label"]

DEFAULT_TEACHER = "heuristic"
"""The teacher of a study's policies where it chooses none (no selection seeds) or before it has chosen."""
_PLACEMENT = tuple(f"execution.{name}" for name in ("device", "devices", *WORKER_FIELDS))
"""Overrides (by dotted key) that change where a study runs, not what it measures."""


def preset_config(plan: StudyPlan, blueprints: list[str] | None, teacher: str | None = None) -> TrainingConfig:
    """The preset's config with the overrides (and `blueprints`, and `teacher` unless the overrides name one: the
    learned arm of a study is a residual policy on a teacher, `--set teacher=none` a policy learned from scratch), its
    charge as given."""
    overrides = dict(plan.overrides)
    overrides.setdefault("ppo.teacher", teacher or DEFAULT_TEACHER)
    across = sorted({"family", "reward.type_param_costs"} & set(overrides))
    if across:
        raise UserInputError(f"--set {across[0]}=... trains a policy across a task family: run `esper study --family "
                             f"NAME` instead, which trains it on the family's training types and measures it on the "
                             f"held-out ones")
    if plan.blueprints_from_selection and "ppo.blueprints" in overrides:
        raise UserInputError("--blueprints-from-selection takes the policy's blueprints from best-fixed: drop "
                             "--set blueprints=... or the flag")
    if blueprints is not None:
        overrides["ppo.blueprints"] = blueprints
    base = TrainingConfig.preset(STUDY_PRESETS[plan.preset or "quick"].training)
    return base.with_overrides(**charge_fields(base.reward, overrides))


def _cost_from_record(plan: StudyPlan, reward: RewardSetting) -> RewardSetting:
    """With a selection record, a λ the reward asks to measure ('auto') is the λ the record's teacher was chosen by
    and `heuristic:tuned` tuned for: the study then optimizes the objective its references were chosen on."""
    if plan.selection_record is None:
        return reward
    record = read_selection_record(plan.selection_record)
    field = "compute_cost" if reward.charge == "compute" else "param_cost"
    if reward.charge != record.charge or getattr(reward, field) != AUTO_COST:
        return reward  # a charge or λ of its own: `recorded_selection` refuses it if it differs from the record's
    return reward.with_overrides(**{field: record.cost})


def _requested_config(plan: StudyPlan, blueprints: list[str] | None, teacher: str | None) -> TrainingConfig:
    """`preset_config`, its charge measured (or, with a selection record, the λ its teacher was chosen by)."""
    config = preset_config(plan, blueprints, teacher)
    return resolve_auto_cost(config.with_overrides(reward=_cost_from_record(plan, config.reward)), plan.data,
                             plan.hooks.note)


def chooses_teacher(plan: StudyPlan, selection_seeds: int) -> bool:
    """Whether the study chooses its policies' teacher on the selection seeds: by the `gap` reward's objective, so not
    for another reward, nor when the overrides name one."""
    return (plan.ppo is None and selection_seeds > 0 and "ppo.teacher" not in plan.overrides
            and preset_config(plan, None).reward.reward_family == RewardFamily.GAP)


def ppo_run_config(plan: StudyPlan, train_dir: Path) -> TrainingConfig:
    """The config a --ppo run trained with; only where it runs may change."""
    latest = checkpoints_dir(train_dir) / "latest.pt"
    if not train_dir.is_dir():
        raise FileNotFoundError(f"--ppo {train_dir} is not a directory: pass PPO run directories (each holding "
                                f"checkpoints/init.pt and final.pt)")
    if not latest.exists():
        raise FileNotFoundError(f"{latest} not found: --ppo needs PPO run directories with checkpoints")
    setting = sorted(k for k in plan.overrides if k not in _PLACEMENT)
    if setting:
        raise UserInputError(f"--ppo evaluates the policies in the setting they trained in, so "
                             f"{', '.join(setting)} cannot be changed; to test one elsewhere run esper compare "
                             f"--controllers static heuristic ppo:{train_dir}/checkpoints/init.pt ppo:{train_dir} with "
                             f"the settings you want")
    return saved_config(read_policy_checkpoint(latest), latest).with_overrides(**plan.overrides)


def base_config(plan: StudyPlan) -> TrainingConfig:
    """The config the study is named by (task and base seed): its first --ppo run's, else the preset's."""
    return ppo_run_config(plan, plan.ppo[0]) if plan.ppo is not None else preset_config(plan, None)


def run_configs(plan: StudyPlan, train_dirs: list[Path], blueprints: list[str] | None, teacher: str | None = None,
                *, teacher_pending: bool = False) -> list[tuple[TrainingConfig, Path | None]]:
    """Each training run's config and the checkpoint it continues from (None: it starts now). Run r trains on the
    base config's setting with its own seed (`run_config`); --ppo runs bring their own configs, which must agree on
    everything but the seed. `teacher_pending`: the study chooses the teacher later, so a saved run keeps its own
    for now."""
    if plan.ppo is not None:
        configs = [ppo_run_config(plan, d) for d in train_dirs]
        first = _all_but_seed(configs[0])
        for d, c in zip(train_dirs[1:], configs[1:], strict=True):
            other = _all_but_seed(c)
            if other != first:
                differing = sorted(k for k in first if first[k] != other.get(k))
                raise UserInputError(f"--ppo {d} trained in another setting than {train_dirs[0]} "
                                     f"({', '.join(differing)}): a study compares runs of one setting")
        return [(c, checkpoints_dir(d) / "latest.pt") for c, d in zip(configs, train_dirs, strict=True)]
    base = _requested_config(plan, blueprints, teacher)
    out: list[tuple[TrainingConfig, Path | None]] = []
    for r, d in enumerate(train_dirs):
        requested = run_config(base, r)
        saved = None if plan.overwrite else saved_run(d)
        if saved is None:
            out.append((requested, None))
            continue
        if plan.blueprints_from_selection and blueprints is None:  # before selection: check everything else
            requested = requested.with_overrides(**{"ppo.blueprints": saved[0].ppo.blueprints})
        if teacher_pending and teacher is None:  # before the teacher's choice, likewise
            requested = requested.with_overrides(**{"ppo.teacher": saved[0].ppo.teacher})
        out.append((resume_config(_teacher_moved(saved[0], requested.ppo.teacher), requested), saved[1]))
    return out


def _teacher_moved(saved: TrainingConfig, teacher: str) -> TrainingConfig:
    """`saved`, taught by `teacher` where its own teacher is the same heuristic (the same thresholds for the same
    setting) recorded at another path: the study's tuned heuristic, named by its new path in a study copied
    elsewhere."""
    paths = [spec.partition(":") for spec in (saved.ppo.teacher, teacher)]
    if any(kind != "heuristic" or not Path(path).is_file() for kind, _, path in paths) or paths[0] == paths[1]:
        return saved
    old, new = (read_heuristic_record(Path(path)) for _, _, path in paths)
    same = (old.thresholds, old.setting) == (new.thresholds, new.setting)
    return saved.with_overrides(**{"ppo.teacher": teacher}) if same else saved


def _all_but_seed(config: TrainingConfig) -> dict[str, Any]:
    return {k: v for k, v in config.dotted_dict().items() if k != "seed"}


def teacher_label(teacher: str, choice: TeacherChoice | None) -> str | None:
    """How the evaluation names the policies' `teacher`: the chosen reference, or the spec the overrides named (None:
    none)."""
    if choice is not None:
        return choice.label
    return None if teacher == NO_TEACHER else teacher
