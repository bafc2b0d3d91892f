"""A study across a task family's instance types: the pre-check first (is there anything for a per-run controller to
win?), then best-rule on the training types and every held-out type's references, K PPO runs across the training
types, each run's replay source on every training type, and every run's policies on the held-out types."""

from __future__ import annotations

import shlex
from collections.abc import Callable

from esper.data.families import Family, get_family
from esper.data.readers import SPLITS
from esper.data.tasks import DataCache, get_task_spec
from esper.evaluation.family_policy import PolicyResults, heldout_policies, policy_markdown, replay_source
from esper.evaluation.heldout import HeldOutType, run_heldout, select_rule, write_heldout
from esper.evaluation.param_cost import resolve_auto_cost
from esper.evaluation.phases import PhaseRunner
from esper.evaluation.ppo_runs import saved_run
from esper.evaluation.precheck import Precheck, run_precheck, type_config
from esper.evaluation.studies.paired import WORKER_FIELDS, open_study, phase_runner
from esper.evaluation.studies.plan import StudyPlan
from esper.evaluation.studies.result import StudyResult, StudyStatus
from esper.evaluation.studies.steps import Study, StudyPhase
from esper.evaluation.studies.training import train_run
from esper.evaluation.study import STUDY_PRESETS, run_config
from esper.execution.devices import resolve_devices
from esper.leyline.errors import UserInputError
from esper.simic.ppo.checkpoint import resume_config
from esper.simic.ppo.config import TrainingConfig, family_fields

__all__ = ["FamilyStudy"]

_NOT_WITH_FAMILY = (("preset", "--preset"), ("ppo", "--ppo"), ("controllers", "--controller"),
                    ("baselines", "--baselines"),
                    ("blueprints_from_selection", "--blueprints-from-selection"),
                    ("allow_setting_change", "--allow-setting-change"))
"""What a single-task study takes and a family study does not (its types carry task and sample cap)."""
_SET_BY_TYPE = ("episode.task", "episode.max_train_samples")


def _check_plan(plan: StudyPlan) -> None:
    for name, flag in _NOT_WITH_FAMILY:
        if getattr(plan, name):
            raise UserInputError(f"{flag} does not apply to --family: a family's types bring their own task, sample "
                                 f"cap and host; drop {flag}")
    fixed = [k.rpartition(".")[2] for k in _SET_BY_TYPE if k in plan.overrides]
    if fixed:
        raise UserInputError(f"--family sets {', '.join(fixed)} per instance type: drop --set {fixed[0]}=... (a "
                             f"family with other types is a new family version)")


def _runs(plan: StudyPlan, family: Family) -> int:
    """The plan's runs, or the study preset's number of training runs for the family's preset."""
    if plan.runs is not None:
        return plan.runs
    if family.preset not in STUDY_PRESETS:
        raise UserInputError(f"Family {family.key} trains in preset '{family.preset}', which has no study preset to "
                             f"take a number of training runs from: pass --runs K")
    return STUDY_PRESETS[family.preset].runs


class FamilyStudy(Study):
    """The study of a task family. Built, it has checked the plan, loaded every type's data and opened (or continued)
    the study directory; nothing else has run."""

    def __init__(self, plan: StudyPlan) -> None:
        assert plan.family is not None
        family = get_family(plan.family)
        self.plan, self.family = plan, family
        _check_plan(plan)
        self.selection_seeds = family.selection_seeds if plan.selection_seeds is None else plan.selection_seeds
        if self.selection_seeds == 0:
            raise UserInputError("--family needs selection seeds: its pre-check searches best-fixed on them; pass "
                                 "--selection-seeds 1 or more")
        self.seeds, self.runs = plan.seeds or family.seeds, _runs(plan, family)
        base = TrainingConfig.preset(family.preset)
        self.config = base.with_overrides(**family_fields(family, base.reward, dict(plan.overrides)))
        self.settings = {"family": family.to_dict(), "selection_seeds": self.selection_seeds, "seeds": self.seeds,
                         "runs": self.runs, "tie_threshold": plan.tie_threshold,
                         "max_test_samples": plan.max_test_samples, "plugins": list(plan.plugins)}
        self.cache = DataCache(plan.data)
        devices = resolve_devices(self.config.execution.device, self.config.execution.devices)
        for itype in family.types:  # a missing dataset fails before anything is written
            self.cache.preload(get_task_spec(type_config(self.config, family, itype).episode.task), devices, SPLITS)
        path = plan.run_dir or plan.default_dir(family.key.replace("-", "_"), self.config.seed)
        self.directory, self.fresh = open_study(path, plan, self.settings, self.config.episode)
        self.path = path = self.directory.path
        watch = shlex.join(["tensorboard", "--logdir", str(path)])
        plan.hooks.note(f"Study directory: {path} (family {family.key}: {len(family.training)} training types, "
                        f"{len(family.held_out)} held out; {self.runs} training run(s); {watch})")
        self.train_dirs = [path / "train" / f"run-{r}" for r in range(self.runs)]
        self.check: Precheck | None = None
        self.best_rule = ""
        self.types: list[HeldOutType] = []
        self.policy: PolicyResults | None = None

    def _runner(self, policy: bool = False) -> Callable[[TrainingConfig], PhaseRunner]:
        """Each type's phase runner; the policies' phases record the policies' training setting too, so the
        evaluation of policies trained otherwise is refused, never taken for theirs."""
        settings = self.settings if not policy else {**self.settings, "policy": {
            k: v for k, v in self.config.dotted_dict().items() if k.removeprefix("execution.") not in WORKER_FIELDS}}
        return lambda type_conf: phase_runner(self.plan, type_conf, settings, self.cache, self.path)

    def precheck(self) -> StudyPhase:
        return StudyPhase("pre-check", (), ("precheck",), None, self._precheck)

    def _precheck(self) -> StudyStatus | None:
        """Best-fixed on each training type, SBS and VBS: a family one fixed architecture serves is refused."""
        self.check = check = run_precheck(self.family, self.config, self.path / "precheck", self.selection_seeds,
                                          self._runner(), self.plan.max_test_samples)
        self.plan.hooks.note(check.markdown())
        if not check.passed and not self.plan.ignore_precheck:
            return StudyStatus.REFUSED
        self.plan.hooks.note(f"Pre-check {'passed' if check.passed else 'overridden (--ignore-precheck)'}; table: "
                             f"{self.path / 'precheck' / 'summary.md'}.")
        return None

    def selection(self) -> StudyPhase:
        return StudyPhase("selection", ("precheck",), ("best-rule", "held-out references"), None, self._select)

    def _select(self) -> None:
        """best-rule on the training types, then each held-out type's VBS search and references on evaluation seeds."""
        assert self.check is not None
        plan, runner = self.plan, self._runner()
        self.best_rule, _ = select_rule(self.family, self.config, self.path / "rules", self.selection_seeds, runner,
                                        plan.max_test_samples)
        self.types = run_heldout(self.family, self.config, self.check, self.best_rule, self.path / "heldout",
                                 seeds=self.seeds, selection_seeds=self.selection_seeds, runner=runner,
                                 max_test_samples=plan.max_test_samples)

    def policy_setting(self) -> StudyPhase:
        return StudyPhase("policy setting", (), ("policy configs",), None, self._set_policies)

    def _set_policies(self) -> None:
        """λ_p per training type, measured where the config asks for it."""
        self.config = resolve_auto_cost(self.config, self.plan.data, self.plan.hooks.note)

    def training(self, run: int) -> StudyPhase:
        cost = self.config.ppo.total_episodes() * self.config.episode.max_epochs
        return StudyPhase(f"training run {run}", ("policy configs",), (f"policy {run}",), cost,
                          lambda: self._train(run))

    def _train(self, run: int) -> StudyStatus | None:
        """Train (or continue) run `run` across the training types, on its own seed stream."""
        requested, train_dir = run_config(self.config, run), self.train_dirs[run]
        saved = saved_run(train_dir)
        config = requested if saved is None else resume_config(saved[0], requested)
        trained = train_run(self.plan, config, None if saved is None else saved[1], train_dir, self.cache, run,
                            self.family.preset)
        return None if trained else StudyStatus.STOPPED

    def replay_source(self, run: int) -> StudyPhase:
        cost = self.selection_seeds * self.config.episode.max_epochs * len(self.family.training)
        return StudyPhase(f"replay source of run {run}", (f"policy {run}", "policy configs"),
                          (f"replay source {run}",), cost, lambda: self._replay_source(run))

    def _replay_source(self, run: int) -> None:
        replay_source(self.family, self.config, self.path / "replay-source", self.train_dirs, run,
                      self.selection_seeds, self._runner(policy=True), self.plan.max_test_samples)

    def evaluation(self) -> StudyPhase:
        runs = range(self.runs)
        cost = self.seeds * self.config.episode.max_epochs * 3 * self.runs * len(self.family.held_out)
        return StudyPhase("evaluation", ("held-out references", *(f"policy {r}" for r in runs),
                                         *(f"replay source {r}" for r in runs)), ("policy results",), cost,
                          self._evaluate)

    def _evaluate(self) -> None:
        """Each run's init, final policy and replay on every held-out type's evaluation seeds."""
        replay_dirs = [self.path / "replay-source" / f"run-{r}" for r in range(self.runs)]
        self.policy = heldout_policies(self.family, self.config, self.types, self.path / "heldout",
                                       train_dirs=self.train_dirs, replay_dirs=replay_dirs, seeds=self.seeds,
                                       runner=self._runner(policy=True), max_test_samples=self.plan.max_test_samples)

    def report(self) -> StudyPhase:
        return StudyPhase("report", ("held-out references", "policy results"), ("summary",), 0, self._report)

    def _report(self) -> None:
        """heldout.json and heldout/summary.md: the references and what the policies did on the held-out types."""
        assert self.policy is not None
        write_heldout(self.path / "heldout", self.family, self.types, self.policy.to_dict(),
                      policy_markdown(self.family, self.policy))

    def result(self, status: StudyStatus, phase: str | None) -> StudyResult:
        summary = {StudyStatus.REFUSED: self.path / "precheck" / "summary.md",
                   StudyStatus.COMPLETE: self.path / "heldout" / "summary.md"}.get(status)
        return StudyResult(status, phase, self.path, self.config, summary, precheck=self.check, policy=self.policy)
