"""Comparison results: per-controller summaries and paired statistics; `results.json` written and read back.

An unfinished comparison's results say so: results.json has `complete` (false), `episodes_done` and
`episodes_planned` (paired episodes) and `pending_controllers` (those still to run, e.g. static:matched, which needs
the others' results first); results.csv starts with an "# incomplete: k of n paired episodes" line and the printed
table's title with the same words.

The primary metric is final accuracy on the held-out test split, which no controller, reward or gate has seen; the
validation accuracy the controllers acted on is reported beside it. Episodes without a test score (logs from before
test scores, PPO training episodes) fall back to validation accuracy, and `pairwise[a][b]["metric"]` says which.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal, TypedDict, get_args, get_origin, get_type_hints, is_typeddict

from esper.env import EpisodeResult
from esper.evaluation.stats import MeanCI, MeanStd, PairStats, compare_pair, mean_ci, mean_std
from esper.leyline import LifecycleOp
from esper.storage.rows import LogFormatError, row_fields
from esper.storage.rundir import RunDirectory, write_text_atomic

__all__ = ["ComparisonResult", "ControllerStats", "Metric", "PairComparison"]

Metric = Literal["test_accuracy", "val_accuracy"]


class ControllerStats(TypedDict):
    """One controller's summary over its episodes (results.json "per_controller").

    `final_accuracy` is on the validation split; the test keys are None unless every episode has a test score, so
    a mean is never over a subset of the paired seeds. `train_flops` and `wall_seconds` are 0 for episodes logged
    before costs were recorded.
    """

    episodes: int
    final_accuracy: MeanCI
    final_test_accuracy: MeanCI | None
    final_test_loss: MeanStd | None
    best_accuracy: MeanStd
    params_added: MeanStd
    total_params: MeanStd
    train_flops: MeanStd
    wall_seconds: MeanStd
    seeds_created: float
    seeds_fossilized: float
    seeds_culled: float
    total_reward: MeanStd
    action_mix: dict[str, float]
    accuracy_curve_mean: list[float]


class PairComparison(PairStats):
    """results.json `pairwise[a][b]`: a against b on paired episodes.

    The top-level `PairStats` keys are on `metric`: test accuracy when both controllers have a test score for every
    episode, else validation accuracy. `val` is always the validation comparison (equal to the top level when that
    is the metric), so a reader can set the two side by side.
    """

    metric: Metric
    val: PairStats


_ADDED_STATS = frozenset({"final_test_accuracy", "final_test_loss", "train_flops", "wall_seconds"})
_ADDED_PAIR = frozenset({"metric", "val"})
"""Keys results.json gained with test scores; a file without them is read as validation-only."""
_PROGRESS = frozenset({"complete", "episodes_done", "episodes_planned", "pending_controllers"})
"""Keys results.json gained to say whether the run is finished (derived, except the plan and what is pending)."""
_SCHEMA = frozenset({"reference", "controllers", "tie_threshold", "seed", "per_controller", "pairwise", "matched",
                     "episodes"})
"""The keys every results.json has; any other key beside them and `_PROGRESS` was written as `extra`."""


@dataclass
class ComparisonResult:
    """Per-controller summaries and pairwise paired statistics; `to_dict` is results.json, `from_dict` reads it."""

    FILE: ClassVar[str] = "results.json"

    controllers: list[str]
    episodes: list[EpisodeResult]
    tie_threshold: float
    seed: int
    per_controller: dict[str, ControllerStats] = field(default_factory=dict)
    pairwise: dict[str, dict[str, PairComparison]] = field(default_factory=dict)
    matched: dict[str, Any] = field(default_factory=dict)  # how static:matched was widened, when it ran
    planned: int = 0  # paired episodes the run was asked for
    pending: list[str] = field(default_factory=list)  # controllers of the run that have not run yet

    @classmethod
    def from_episodes(cls, controllers: list[str], episodes: list[EpisodeResult], *, tie_threshold: float,
                      seed: int, planned: int | None = None, pending: Sequence[str] = ()) -> ComparisonResult:
        """Summaries and paired statistics of `episodes`; an episode difference is a tie when |Δ| < `tie_threshold`
        (pass one test sample's worth, `stats.one_sample_pp`). `seed` is the comparison's seed, kept for the record:
        the statistics themselves are deterministic. An unfinished run passes the paired episodes it was asked for
        (`planned`; default: those it holds) and the controllers it has not run yet (`pending`)."""
        by = _by_controller(controllers, episodes)
        done = min((len(eps) for eps in by.values()), default=0)
        result = cls(controllers, episodes, tie_threshold, seed, planned=done if planned is None else planned,
                     pending=list(pending))
        for c, eps in by.items():
            actions = {op.name: statistics.fmean(e.action_counts[op.name] / max(1, sum(e.action_counts.values()))
                                                 for e in eps) for op in LifecycleOp}
            test_accuracy, test_loss = _test_scores(eps)
            flops, seconds = _costs(eps)
            result.per_controller[c] = {
                "episodes": len(eps),
                "final_accuracy": mean_ci([e.final_accuracy for e in eps]),
                "final_test_accuracy": test_accuracy,
                "final_test_loss": test_loss,
                "best_accuracy": mean_std([e.best_accuracy for e in eps]),
                "params_added": mean_std([float(e.params_added) for e in eps]),
                "total_params": mean_std([float(e.host_params + e.params_added) for e in eps]),
                "train_flops": flops,
                "wall_seconds": seconds,
                "seeds_created": statistics.fmean(e.seeds_created for e in eps),
                "seeds_fossilized": statistics.fmean(e.seeds_fossilized for e in eps),
                "seeds_culled": statistics.fmean(e.seeds_culled for e in eps),
                "total_reward": mean_std([e.total_reward for e in eps]),
                "action_mix": actions,
                "accuracy_curve_mean": [statistics.fmean(vals) for vals in zip(*(e.accuracy_curve for e in eps))],
            }
        for a in controllers:
            result.pairwise[a] = {}
            for b in controllers:
                if a != b:
                    result.pairwise[a][b] = _pair(by[a], by[b], tie_threshold)
        return result

    def with_copies(self, copies: Mapping[str, str], controllers: list[str]) -> ComparisonResult:
        """These results with each label of `copies` added as a controller of its own, holding the episodes of the
        controller it names (one that provably plays them bit for bit), the controllers in the order `controllers`."""
        missing = sorted(set(copies.values()) - set(self.controllers))
        if missing or sorted(controllers) != sorted([*self.controllers, *copies]):
            raise ValueError(f"copies {dict(copies)} of {missing or self.controllers} do not make {controllers}")
        copied = [replace(e, controller=label) for label, source in copies.items()
                  for e in self.episodes if e.controller == source]
        result = ComparisonResult.from_episodes(controllers, [*self.episodes, *copied], seed=self.seed,
                                                tie_threshold=self.tie_threshold, planned=self.planned,
                                                pending=self.pending)
        result.matched = self.matched
        return result

    @property
    def reference(self) -> str:
        return self.controllers[0]

    @property
    def episodes_done(self) -> int:
        """Paired episodes that every controller of the results has finished."""
        return min((len(eps) for eps in _by_controller(self.controllers, self.episodes).values()), default=0)

    @property
    def complete(self) -> bool:
        return self.episodes_done >= self.planned and not self.pending

    def incomplete_note(self) -> str | None:
        """"incomplete: k of n paired episodes" (and what has not run) while the run is unfinished; None after."""
        if self.complete:
            return None
        waiting = f"; {', '.join(self.pending)} still to run" if self.pending else ""
        return (f"incomplete: {self.episodes_done} of {self.planned} paired episodes{waiting} (rerun the command "
                f"that wrote it to finish)")

    CSV_FILE: ClassVar[str] = "results.csv"
    CSV_COLUMNS: ClassVar[tuple[str, ...]] = (
        "controller", "episode", "env_seed", "final_test_accuracy", "final_test_loss", "final_accuracy",
        "final_loss", "best_accuracy", "host_width", "host_params", "params_added", "seeds_created",
        "seeds_fossilized", "seeds_culled", "rollbacks", "total_reward", "train_flops", "wall_seconds")
    """results.csv: one row per (controller, episode), `final_accuracy` being validation accuracy: the table to load
    with pandas (`pd.read_csv`) or a spreadsheet."""

    def to_csv(self) -> str:
        """The table; an unfinished run's starts with a "# incomplete: …" line (`pd.read_csv(path, comment="#")`)."""
        out = io.StringIO()
        note = self.incomplete_note()
        if note is not None:
            out.write(f"# {note}\n")
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.CSV_COLUMNS)
        for e in self.episodes:
            row = e.to_dict()
            writer.writerow(["" if row[c] is None else row[c] for c in self.CSV_COLUMNS])
        return out.getvalue()

    def write(self, run_dir: RunDirectory, extra: Mapping[str, Any] | None = None) -> None:
        """results.csv, then results.json (with `extra` keys beside the statistics), each written atomically: a
        results.json never has an older CSV beside it."""
        write_text_atomic(run_dir.path / self.CSV_FILE, self.to_csv())
        run_dir.write_json(self.FILE, {**self.to_dict(), **(extra or {})})

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": self.reference, "controllers": self.controllers, "tie_threshold": self.tie_threshold,
            "seed": self.seed, "per_controller": self.per_controller, "pairwise": self.pairwise,
            "matched": self.matched, "complete": self.complete, "episodes_done": self.episodes_done,
            "episodes_planned": self.planned, "pending_controllers": self.pending,
            "episodes": [e.to_dict() for e in self.episodes],
        }

    @classmethod
    def from_written(cls, data: Mapping[str, Any], *, source: str = FILE
                     ) -> tuple[ComparisonResult, dict[str, Any]]:
        """Read back `write()` output: the comparison, and the `extra` keys written beside it (a study's own
        results)."""
        extra = {k: v for k, v in data.items() if k not in _SCHEMA | _PROGRESS}
        return cls.from_dict({k: v for k, v in data.items() if k not in extra}, source=source), extra

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = FILE) -> ComparisonResult:
        """Read back `to_dict()` output; a different schema is a LogFormatError naming `source` and the key.

        A results.json from before test scores (none of the `_ADDED_STATS`/`_ADDED_PAIR` keys) still reads: its test
        and cost summaries are computed from its episodes (so: no test scores) and its pairs are marked validation
        accuracy, with `val` a copy of them. One from before the completeness keys (`_PROGRESS`) reads as the
        paired episodes it holds.
        """
        progress = _PROGRESS if _PROGRESS & set(data) else set()
        _check_keys(data, {*_SCHEMA, *progress}, source)
        if not isinstance(data["controllers"], list) or not isinstance(data["episodes"], list):
            raise LogFormatError(f"{source}: 'controllers' and 'episodes' must be lists")
        controllers = [str(c) for c in data["controllers"]]
        if not controllers or data["reference"] != controllers[0]:
            raise LogFormatError(f"{source}: 'reference' must be the first of 'controllers' (got "
                                 f"{data['reference']!r} and {controllers})")
        _check_keys(data["per_controller"], set(controllers), f"{source} per_controller")
        _check_keys(data["pairwise"], set(controllers), f"{source} pairwise")
        names, required = row_fields(EpisodeResult)
        episodes = []
        for n, e in enumerate(data["episodes"]):
            if not isinstance(e, dict) or not required <= set(e) <= names:
                raise LogFormatError(f"{source} episodes[{n}] does not match the EpisodeResult schema "
                                     f"(fields {sorted(names)}); was it written by another esper version?")
            episodes.append(EpisodeResult(**e))
        by = _by_controller(controllers, episodes)
        per_controller: dict[str, Any] = {}
        pairwise: dict[str, dict[str, Any]] = {}
        for c in controllers:
            stats = data["per_controller"][c]
            if isinstance(stats, dict) and not _ADDED_STATS & set(stats):
                if not by[c]:
                    raise LogFormatError(f"{source}: no episodes of {c!r} to complete its summary from")
                test_accuracy, test_loss = _test_scores(by[c])
                flops, seconds = _costs(by[c])
                stats = {**stats, "final_test_accuracy": test_accuracy, "final_test_loss": test_loss,
                         "train_flops": flops, "wall_seconds": seconds}
            _check_typed(stats, ControllerStats, f"{source} per_controller[{c!r}]")
            per_controller[c] = stats
            _check_keys(data["pairwise"][c], set(controllers) - {c}, f"{source} pairwise[{c!r}]")
            pairwise[c] = {}
            for other in data["pairwise"][c]:
                pair = data["pairwise"][c][other]
                if isinstance(pair, dict) and not _ADDED_PAIR & set(pair):
                    pair = {**pair, "metric": "val_accuracy", "val": dict(pair)}
                _check_typed(pair, PairComparison, f"{source} pairwise[{c!r}][{other!r}]")
                pairwise[c][other] = pair
        result = cls(controllers, episodes, float(data["tie_threshold"]), int(data["seed"]), per_controller, pairwise,
                     dict(data["matched"]))
        if progress:
            planned, pending = data["episodes_planned"], data["pending_controllers"]
            if not isinstance(planned, int) or not isinstance(pending, list):
                raise LogFormatError(f"{source}: 'episodes_planned' must be an integer and 'pending_controllers' a "
                                     f"list; was it written by another esper version?")
            result.planned, result.pending = planned, [str(c) for c in pending]
        else:
            result.planned = result.episodes_done
        return result


def _by_controller(controllers: Sequence[str], episodes: Sequence[EpisodeResult]) -> dict[str, list[EpisodeResult]]:
    """Each controller's episodes in episode order, so that index i pairs the same seed across controllers."""
    return {c: sorted((e for e in episodes if e.controller == c), key=lambda e: e.episode) for c in controllers}


def _tested(eps: Sequence[EpisodeResult]) -> bool:
    """Every episode was scored on the test split; only then is a test mean over the same seeds as the others."""
    return bool(eps) and all(e.final_test_accuracy is not None and e.final_test_loss is not None for e in eps)


def _test_accuracies(eps: Sequence[EpisodeResult]) -> list[float]:
    return [e.final_test_accuracy for e in eps if e.final_test_accuracy is not None]


def _test_scores(eps: Sequence[EpisodeResult]) -> tuple[MeanCI | None, MeanStd | None]:
    """(test accuracy, test loss) summaries, or (None, None) unless every episode was scored on the test split."""
    if not _tested(eps):
        return None, None
    return mean_ci(_test_accuracies(eps)), mean_std([e.final_test_loss for e in eps if e.final_test_loss is not None])


def _costs(eps: Sequence[EpisodeResult]) -> tuple[MeanStd, MeanStd]:
    return mean_std([float(e.train_flops) for e in eps]), mean_std([e.wall_seconds for e in eps])


def _pair(a: Sequence[EpisodeResult], b: Sequence[EpisodeResult], tie_threshold: float) -> PairComparison:
    """a against b on the test accuracy when both were tested on every episode, else on the validation accuracy."""
    val = compare_pair([e.final_accuracy for e in a], [e.final_accuracy for e in b], tie_threshold=tie_threshold)
    if not (_tested(a) and _tested(b)):
        return {**val, "metric": "val_accuracy", "val": val.copy()}
    test = compare_pair(_test_accuracies(a), _test_accuracies(b), tie_threshold=tie_threshold)
    return {**test, "metric": "test_accuracy", "val": val}


def _check_keys(value: Any, keys: set[str], where: str) -> None:
    if not isinstance(value, dict) or set(value) != keys:
        got = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise LogFormatError(f"{where} does not match the comparison schema (keys {sorted(keys)}, got {got}); "
                             f"was it written by another esper version?")


def _check_typed(value: Any, schema: type, where: str) -> None:
    """`value` has exactly the keys of the TypedDict `schema`, recursively for nested (optional) TypedDicts, and a
    Literal-typed key holds one of its values."""
    hints = get_type_hints(schema)
    _check_keys(value, set(hints), where)
    for key, hint in hints.items():
        members = get_args(hint) if get_origin(hint) is not Literal else ()
        if get_origin(hint) is Literal and value[key] not in get_args(hint):
            raise LogFormatError(f"{where}[{key!r}] must be one of {list(get_args(hint))} (got {value[key]!r})")
        if value[key] is None and type(None) in members:
            continue
        for member in (hint, *members):
            if is_typeddict(member):
                _check_typed(value[key], member, f"{where}[{key!r}]")
