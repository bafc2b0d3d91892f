"""A study on one task (a study preset): best-fixed and best-rule chosen on selection seeds (or reused from a record),
the policies' teacher chosen by the reward's objective, K PPO runs, each final policy's replay source, and every
controller on paired evaluation seeds, reported in results.json and summary.md."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

from esper.data.readers import SPLITS
from esper.data.tasks import get_task_spec
from esper.env.logs import StepRow
from esper.env.rewards import RewardFamily
from esper.evaluation.comparison import parse_controllers
from esper.evaluation.episodes import EpisodePlan
from esper.evaluation.exploration import off_teacher_effect
from esper.evaluation.phases import Phase, PhaseRunner
from esper.evaluation.results import ComparisonResult
from esper.evaluation.run_data import data_record, load_splits
from esper.evaluation.runs import NO_COST, Cost, RunLabels, add_costs, episodes_cost, static_episode_cost
from esper.evaluation.selection import BEST_FIXED, Selection, chosen_blueprints, run_selection
from esper.evaluation.selection_record import (
    SELECTION_RECORD_FILE,
    RecordedSelection,
    read_selection_record,
    recorded_selection,
    write_selection_record,
)
from esper.evaluation.studies.paired import measured_setting, open_study, phase_runner, runs_already
from esper.evaluation.studies.plan import StudyPlan
from esper.evaluation.studies.result import StudyResult, StudyStatus
from esper.evaluation.studies.steps import Study, StudyPhase
from esper.evaluation.studies.task_config import (
    DEFAULT_TEACHER,
    base_config,
    chooses_teacher,
    run_configs,
    teacher_label,
)
from esper.evaluation.studies.training import train_run
from esper.evaluation.study import (
    STUDY_PRESETS,
    TUNED_HEURISTIC,
    StudyObjective,
    StudyResults,
    evaluation_plan,
    replay_seed_count,
    replay_source_phases,
    selection_plan,
    study_controllers,
    study_results,
    teacher_overrides,
    training_cost,
)
from esper.evaluation.study_report import SUMMARY_FILE, mark_rerun, summary_markdown
from esper.evaluation.teacher_choice import TeacherChoice, choose_teacher, with_tuned
from esper.evaluation.tuning import RECORD_FILE as TUNED_RECORD_FILE
from esper.execution.devices import resolve_devices
from esper.leyline.errors import UserInputError
from esper.leyline.seeding import SeedStream
from esper.simic.ppo.controller import decides_as_its_teacher
from esper.storage.rundir import checkpoints_dir, write_text_atomic

__all__ = ["TaskStudy", "study_dir"]


def study_dir(plan: StudyPlan) -> Path:
    """The plan's run_dir, else its default directory, named like every command's by the task and base seed the study
    runs on (its --ppo runs' with --ppo): two studies on different tasks never look alike."""
    if plan.run_dir is not None:
        return plan.run_dir
    base = base_config(plan)
    return plan.default_dir(base.episode.task, base.seed)


def _check_flags(plan: StudyPlan, selection_seeds: int) -> None:
    if plan.blueprints_from_selection and (plan.ppo is not None or selection_seeds == 0):
        raise UserInputError("--blueprints-from-selection trains the policy on best-fixed's blueprints, so it needs "
                             "selection seeds (not --selection-seeds 0) and a policy to train (not --ppo)")
    if (plan.selection_record is not None or plan.selection_only) and (plan.ppo is not None or selection_seeds == 0):
        flag = "--selection-record" if plan.selection_record is not None else "--selection-only"
        raise UserInputError(f"{flag} is about the selection of a study that trains its policies: drop it, --ppo or "
                             f"--selection-seeds 0")
    if plan.selection_record is not None and plan.selection_only:
        raise UserInputError("--selection-only runs the selection that --selection-record reuses: drop one of them")


class TaskStudy(Study):
    """The study of one task. Built, it has checked the plan, loaded the data and opened (or continued) the study
    directory; nothing else has run."""

    def __init__(self, plan: StudyPlan) -> None:
        if plan.ignore_precheck:
            raise UserInputError("--ignore-precheck overrides the pre-check of a --family study: drop it or pass "
                                 "--family")
        self.plan, self.preset_name = plan, plan.preset or "quick"
        self.preset = STUDY_PRESETS[self.preset_name]
        self.seeds = plan.seeds or self.preset.seeds
        self.baselines = self.preset.baselines if plan.baselines is None else plan.baselines
        parse_controllers((*self.baselines, *plan.controllers))  # an unknown or repeated spec fails here
        self.selection_seeds = self.preset.selection_seeds if plan.selection_seeds is None else plan.selection_seeds
        if plan.ppo is not None and plan.runs is not None and plan.runs != len(plan.ppo):
            raise UserInputError(f"--runs {plan.runs} but {len(plan.ppo)} --ppo run(s): each --ppo directory is one "
                                 f"training run; drop --runs")
        self.runs = len(plan.ppo) if plan.ppo is not None else (plan.runs or self.preset.runs)
        self.path = path = study_dir(plan)
        self.settings = {
            "preset": self.preset_name, "seeds": self.seeds, "selection_seeds": self.selection_seeds,
            "runs": self.runs, "controllers": list(plan.controllers),
            **({} if plan.baselines is None else {"baselines": list(plan.baselines)}),
            "ppo": None if plan.ppo is None else [str(p) for p in plan.ppo], "tie_threshold": plan.tie_threshold,
            "max_test_samples": plan.max_test_samples, "blueprints_from_selection": plan.blueprints_from_selection,
            "plugins": list(plan.plugins),
            **({} if plan.selection_record is None else {"selection_record": str(plan.selection_record)})}
        self.train_dirs = list(plan.ppo) if plan.ppo is not None else [path / "train" / f"run-{r}"
                                                                       for r in range(self.runs)]
        _check_flags(plan, self.selection_seeds)
        self.chooses = chooses_teacher(plan, self.selection_seeds)
        # bad settings fail before anything is written
        self.configs = run_configs(plan, self.train_dirs, None, teacher_pending=self.chooses)
        self.config = self.configs[0][0]  # the base: selection and evaluation seeds come from its seed
        # Selection and the teacher's choice run before the policies' teacher is known: their phases record the default
        self.before = self.config.with_overrides(**{"ppo.blueprints": None,
                                                    **({"ppo.teacher": DEFAULT_TEACHER} if self.chooses else {})})
        self.reused: RecordedSelection | None = None
        if plan.selection_record is not None:
            self.reused = recorded_selection(
                plan.selection_record, read_selection_record(plan.selection_record), preset=self.preset_name,
                plan=selection_plan(self.config, plan.max_test_samples), seeds=self.selection_seeds,
                objective=self.before.charge_and_cost(), wants_teacher=self.chooses)
        execution = self.config.execution
        self.cache = load_splits(plan.data, get_task_spec(self.config.episode.task),
                                 resolve_devices(execution.device, execution.devices), SPLITS, plan.hooks.note)
        self.directory, self.fresh = open_study(path, plan, self.settings, self.config.episode)
        mark_rerun(path, self.seeds, self.runs)
        watch = shlex.join(["tensorboard", "--logdir", str(path)])
        plan.hooks.note(f"Study directory: {path} ({self.runs} training run(s); {watch})")
        self.given = tuple(f"policy {r}" for r in range(self.runs)) if plan.ppo is not None else ()
        self.chosen: dict[str, str] = {}
        self.selection_cost: Cost | None = None
        self.found: Selection | None = None
        self.choice: TeacherChoice | None = None
        self.sources: list[ComparisonResult] = []
        self.comparison: ComparisonResult | None = None
        self.episodes: EpisodePlan | None = None
        self.copies: dict[str, str] = {}  # run inits whose episodes are their teacher's (`_inits_as_teacher`)
        self.results: StudyResults | None = None

    def _selection_runner(self) -> PhaseRunner:
        return phase_runner(self.plan, self.before, self.settings, self.cache, self.path)

    def _policy_runner(self) -> PhaseRunner:
        return phase_runner(self.plan, self.config, self.settings, self.cache, self.path)

    def selection(self) -> StudyPhase:
        searches = self.reused is None and self.selection_seeds > 0
        return StudyPhase("selection", (), ("chosen", "selection cost"), None if searches else 0, self._select)

    def _select(self) -> None:
        """best-fixed and best-rule: from the record, or chosen on the selection seeds in greedy rounds."""
        if self.reused is not None:
            record = self.reused.record
            self.plan.hooks.note(f"Selection: reused from {self.reused.path} ({record.command}; esper "
                                 f"{record.esper_commit[:12]})")
            self.chosen, self.selection_cost = self.reused.chosen, self.reused.selection_cost
        elif self.selection_seeds > 0:
            self.found = run_selection(selection_plan(self.config, self.plan.max_test_samples),
                                       self.path / "selection", self.selection_seeds, self._selection_runner())
            self.chosen = self.found.chosen
            self.selection_cost = episodes_cost(e for r in self.found.rounds for e in r.episodes)

    def teacher_choice(self) -> StudyPhase:
        chooses_now = self.chooses and self.reused is None
        return StudyPhase("teacher choice", ("chosen", "selection cost"), ("teacher",), None if chooses_now else 0,
                          self._choose)

    def _choose(self) -> StudyStatus | None:
        """The teacher, from the record or chosen on the selection seeds; a selection made here is recorded in
        STUDY_DIR/selection-record.json (for later studies of the same preset and seeds)."""
        plan, path = self.plan, self.path
        if self.reused is not None and self.chooses:
            self.choice = self.reused.teacher_choice(path / "teacher" / TUNED_RECORD_FILE)
        elif self.found is not None:
            episodes = selection_plan(self.config, plan.max_test_samples)
            if self.chooses:
                self.choice = choose_teacher(episodes, path / "teacher", self.selection_seeds, self.found,
                                             self._selection_runner(), StudyObjective(*self.before.charge_and_cost()),
                                             command=plan.command)
            assert self.selection_cost is not None
            write_selection_record(path / SELECTION_RECORD_FILE, preset=self.preset_name, plan=episodes,
                                   seeds=self.selection_seeds, objective=self.before.charge_and_cost(),
                                   selection=self.found, selection_cost=self.selection_cost, choice=self.choice,
                                   command=plan.command)
        if self.choice is not None:
            plan.hooks.note("Teacher: " + self.choice.label + " (" + ", ".join(
                f"{k} {v:+.2f} pp" for k, v in self.choice.scores.items()) + " on the selection seeds' objective)")
        return StudyStatus.SELECTION_ONLY if plan.selection_only else None

    def policy_setting(self) -> StudyPhase:
        return StudyPhase("policy setting", ("chosen", "teacher"), ("policy configs",), 0, self._set_policies)

    def _set_policies(self) -> None:
        """The policies' blueprints (best-fixed's, where the plan asks) and teacher, now that both are chosen."""
        blueprints = chosen_blueprints(self.chosen[BEST_FIXED]) if self.plan.blueprints_from_selection else None
        if blueprints is not None or self.choice is not None:
            self.configs = run_configs(self.plan, self.train_dirs, blueprints,
                                       None if self.choice is None else self.choice.spec)
            self.config = self.configs[0][0]

    def training(self, run: int) -> StudyPhase | None:
        if self.plan.ppo is not None:
            return None
        cost = self.config.ppo.total_episodes() * self.config.episode.max_epochs
        return StudyPhase(f"training run {run}", ("policy configs",), (f"policy {run}",), cost,
                          lambda: self._train(run))

    def _train(self, run: int) -> StudyStatus | None:
        config, checkpoint = self.configs[run]
        trained = train_run(self.plan, config, checkpoint, self.train_dirs[run], self.cache, run,
                            self.preset.training)
        return None if trained else StudyStatus.STOPPED

    def replay_source(self, run: int) -> StudyPhase:
        cost = replay_seed_count(self.selection_seeds) * self.config.episode.max_epochs
        return StudyPhase(f"replay source of run {run}", (f"policy {run}", "policy configs"),
                          (f"replay source {run}",), cost, lambda: self._replay_source(run))

    def _replay_source(self, run: int) -> None:
        """Run `run`'s final policy on the selection seeds: the episodes its open-loop replay is read from."""
        episodes = evaluation_plan(self.config, SeedStream.SELECTION, self.plan.max_test_samples)
        phase = replay_source_phases(self.path / "replay-source", episodes, self.train_dirs,
                                     replay_seed_count(self.selection_seeds))[run]
        self.sources.append(self._policy_runner()(phase))

    def evaluation(self) -> StudyPhase:
        runs = range(self.runs)
        return StudyPhase("evaluation", ("chosen", "teacher", *(f"policy {r}" for r in runs),
                                         *(f"replay source {r}" for r in runs)), ("comparison",), None,
                          self._evaluate)

    def _evaluate(self) -> None:
        """Every controller on the paired evaluation seeds: the baselines, the chosen references, each run's init,
        final policy and replay, the teacher and any extra controllers."""
        choice, plan = self.choice, self.plan
        teacher = teacher_label(self.config.ppo.teacher, choice)
        tuned = choice is not None and choice.tuned_path is not None and TUNED_HEURISTIC not in self.baselines
        extra = [*([TUNED_HEURISTIC] if tuned else []), *plan.controllers]
        if teacher is not None and teacher not in (*self.baselines, *self.chosen, *extra):
            extra.append(teacher)
        replay_dirs = [self.path / "replay-source" / f"run-{r}" for r in range(self.runs)]
        specs, labels = study_controllers(self.baselines, self.train_dirs, replay_dirs, self.chosen, extra)
        episodes = evaluation_plan(self.config, max_test_samples=plan.max_test_samples,
                                   allow_setting_change=plan.allow_setting_change)
        self.episodes = episodes = with_tuned(episodes, choice)
        match = [RunLabels(r).final for r in range(self.runs)] if "static:matched" in self.baselines else None
        self.copies = copies = self._inits_as_teacher(teacher)
        run = [(s, n) for s, n in zip(specs, labels, strict=True) if n not in copies]
        comparison = self._policy_runner()(Phase("evaluation", self.path / "eval", episodes, [s for s, _ in run],
                                                 [n for _, n in run], self.seeds, match))
        self.comparison = comparison.with_copies(copies, labels) if copies else comparison

    def _inits_as_teacher(self, teacher: str | None) -> dict[str, str]:
        """Each run's init that was trained with the evaluated teacher and decides as it in every state
        (`decides_as_its_teacher`), as the teacher's label: its paired episodes are the teacher's, copied rather than
        run a second time. An evaluation already under way that runs an init (recorded by an earlier esper) keeps
        running it, so that its finished episodes are kept."""
        if teacher is None:
            return {}
        spec = self.config.ppo.teacher if self.choice is None else self.choice.spec
        copies = {}
        for r, ((config, _), train_dir) in enumerate(zip(self.configs, self.train_dirs, strict=True)):
            init = checkpoints_dir(train_dir) / "init.pt"
            if (config.ppo.teacher == spec and not runs_already(self.path / "eval", f"ppo:{init}", self.path)
                    and decides_as_its_teacher(init)):
                copies[RunLabels(r).init] = teacher
        return copies

    def report(self) -> StudyPhase:
        return StudyPhase("report", ("comparison", "selection cost", "teacher"), ("results",), 0, self._report)

    def _report(self) -> None:
        """results.json (the comparison with the study's results beside it) and summary.md."""
        comparison, choice, config, cost = self.comparison, self.choice, self.config, self.selection_cost
        assert comparison is not None and self.episodes is not None
        twin = static_episode_cost(comparison)
        results = study_results(
            comparison, self.runs, chosen=self.chosen, selection=cost,
            training=[training_cost(d, twin, group_size=c.ppo.group_size, reward_family=c.reward.reward_family)
                      for (c, _), d in zip(self.configs, self.train_dirs, strict=True)],
            replay_sources=[episodes_cost(s.episodes) for s in self.sources],
            teacher=teacher_label(config.ppo.teacher, choice),
            objective=(StudyObjective(*config.charge_and_cost()) if config.reward.reward_family == RewardFamily.GAP
                       else None),
            extra_costs=None if choice is None or choice.tuned_cost is None else {TUNED_HEURISTIC: choice.tuned_cost},
            teacher_cost=NO_COST if choice is None or cost is None else add_costs(cost, choice.cost),
            overrides=teacher_overrides(self.path / "eval" / StepRow.FILE, self.runs),
            off_teacher=[off_teacher_effect(d, c.ppo.group_size)
                         for (c, _), d in zip(self.configs, self.train_dirs, strict=True)])
        self.results = results = replace(results, copies=self.copies or None)
        episodes = self.episodes
        augmentation = data_record(episodes.task, episodes.episode.augment)["augmentation"]
        reward = episodes.describe_reward()
        provenance = None if self.reused is None else self.reused.provenance()
        comparison.write(self.directory, {"study": {
            "preset": self.preset_name, "seeds": self.seeds, "selection_seeds": self.selection_seeds,
            "reward": reward, "augmentation": augmentation, "training": measured_setting(config),
            "chosen": self.chosen, "teacher_choice": None if choice is None else choice.to_dict(),
            "selection_record": provenance, **results.to_dict()}})
        title = (f"esper study --preset {self.preset_name} ({config.episode.task}; augmentation {augmentation}; reward "
                 f"{reward})")
        write_text_atomic(self.path / SUMMARY_FILE, summary_markdown(
            comparison, results, title=title, command=self.plan.command, chosen=self.chosen,
            policy_blueprints=config.ppo.blueprints, selection_record=provenance))

    def result(self, status: StudyStatus, phase: str | None) -> StudyResult:
        summary = self.path / SUMMARY_FILE if self.results is not None else None
        return StudyResult(status, phase, self.path, self.config, summary, self.comparison, self.results)
