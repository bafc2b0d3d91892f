"""Dataset health checks: does a generated dataset give an offline learner something to learn from?

An offline learner can only value actions the data contains, in states where the data shows alternatives, with
behaviour probabilities it can trust. The checks measure exactly that (coverage, entropy, policy diversity,
per-state action diversity, mask and probability consistency, lifecycle coverage, finiteness). Errors are
blocking; warnings are reported. Non-finite numbers are stored as null in episode files, so null counts as
non-finite wherever a number is required.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from esper.datagen.configs import OP_NAMES
from esper.datagen.schema import read_json, write_strict_json
from esper.leyline.errors import UserInputError

__all__ = [
    "DatasetHealthCheck",
    "HealthCheckResult",
    "check_action_coverage",
    "check_action_entropy",
    "check_behavior_probability_consistency",
    "check_finite_values",
    "check_lifecycle_coverage",
    "check_mask_validity",
    "check_policy_diversity",
    "check_single_action_clusters",
    "count_actions",
    "load_episodes",
    "save_report",
]

PROB_TOLERANCE = 1e-6
_MAX_EXAMPLES = 5  # offending steps listed in a result's details


@dataclass(frozen=True)
class HealthCheckResult:
    """Outcome of one check; `passed` is False only for errors (warnings pass)."""

    name: str
    passed: bool
    level: str  # "ok" | "warning" | "error"
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ok(name: str, message: str, **details: Any) -> HealthCheckResult:
    return HealthCheckResult(name, True, "ok", message, details)


def _warn(name: str, message: str, **details: Any) -> HealthCheckResult:
    return HealthCheckResult(name, True, "warning", message, details)


def _error(name: str, message: str, **details: Any) -> HealthCheckResult:
    return HealthCheckResult(name, False, "error", message, details)


def _decisions(episodes: Iterable[Mapping[str, Any]]) -> Iterator[tuple[str, int, Mapping[str, Any]]]:
    for episode in episodes:
        for t, decision in enumerate(episode.get("decisions", [])):
            yield str(episode.get("episode_id", "?")), t, decision


def count_actions(episodes: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Op counts over all decisions, every op listed (an op never taken counts 0)."""
    counts = Counter(str(d.get("action", {}).get("action")) for _, _, d in _decisions(episodes))
    return {op: counts.get(op, 0) for op in OP_NAMES} | {op: n for op, n in counts.items() if op not in OP_NAMES}


def check_action_coverage(
    action_counts: Mapping[str, int], min_pct: float = 0.02, warn_pct: float = 0.05
) -> HealthCheckResult:
    """Every op must be a noticeable share of the data, or its value cannot be learned."""
    name, total = "action_coverage", sum(action_counts.values())
    if total == 0:
        return _error(name, "No actions in the dataset")
    shares = {op: n / total for op, n in action_counts.items()}
    low = sorted(op for op, s in shares.items() if s < min_pct)
    thin = sorted(op for op, s in shares.items() if min_pct <= s < warn_pct)
    if low:
        return _error(name, f"Ops below {min_pct:.0%} of actions: {', '.join(low)}", shares=shares, low=low)
    if thin:
        return _warn(name, f"Ops below {warn_pct:.0%} of actions: {', '.join(thin)}", shares=shares, thin=thin)
    return _ok(name, "Every op is adequately covered", shares=shares)


def check_action_entropy(
    action_counts: Mapping[str, int], min_entropy: float = 0.3, warn_entropy: float = 0.5
) -> HealthCheckResult:
    """Shannon entropy (nats) of the op shares; details include it normalized by ln(#ops)."""
    name, total = "action_entropy", sum(action_counts.values())
    if total == 0:
        return _error(name, "No actions in the dataset")
    entropy = -sum((n / total) * math.log(n / total) for n in action_counts.values() if n > 0)
    max_entropy = math.log(len(action_counts)) if len(action_counts) > 1 else 0.0
    details = {"entropy": entropy, "normalized": entropy / max_entropy if max_entropy > 0 else 0.0}
    if entropy < min_entropy:
        return _error(name, f"Op entropy {entropy:.3f} nats < {min_entropy}", **details)
    if entropy < warn_entropy:
        return _warn(name, f"Op entropy {entropy:.3f} nats < {warn_entropy}", **details)
    return _ok(name, f"Op entropy {entropy:.3f} nats", **details)


def check_policy_diversity(
    episodes: Sequence[Mapping[str, Any]], min_policies: int = 5, warn_policies: int = 8
) -> HealthCheckResult:
    """Distinct behaviour policy ids (ε variants count separately)."""
    name = "policy_diversity"
    policies = sorted({str(e.get("behavior_policy", {}).get("policy_id")) for e in episodes
                       if e.get("behavior_policy", {}).get("policy_id") is not None})
    details = {"num_policies": len(policies), "policies": policies}
    if len(policies) < min_policies:
        return _error(name, f"{len(policies)} behaviour policies < {min_policies}", **details)
    if len(policies) < warn_policies:
        return _warn(name, f"{len(policies)} behaviour policies < {warn_policies}", **details)
    return _ok(name, f"{len(policies)} behaviour policies", **details)


def check_single_action_clusters(
    episodes: Sequence[Mapping[str, Any]], max_single_action_pct: float = 0.50
) -> HealthCheckResult:
    """Share of coarse state clusters (epoch // 5, min(plateau, 5), has seed) in which only one op was ever taken:
    there the data shows no alternative to compare against."""
    name = "single_action_clusters"
    ops_by_cluster: dict[tuple[int, int, bool], set[str]] = {}
    for _, _, d in _decisions(episodes):
        obs = d.get("observation", {})
        key = (int(obs.get("epoch", 0)) // 5, min(int(obs.get("plateau_epochs", 0)), 5),
               bool(obs.get("has_active_seed", False)))
        ops_by_cluster.setdefault(key, set()).add(str(d.get("action", {}).get("action")))
    if not ops_by_cluster:
        return _error(name, "No decisions in the dataset")
    single = sum(1 for ops in ops_by_cluster.values() if len(ops) == 1)
    share = single / len(ops_by_cluster)
    details = {"single_action_clusters": single, "total_clusters": len(ops_by_cluster), "share": share}
    if share > max_single_action_pct:
        return _error(name, f"{share:.0%} of state clusters hold a single op (> {max_single_action_pct:.0%})",
                      **details)
    return _ok(name, f"{share:.0%} of state clusters hold a single op", **details)


def check_mask_validity(episodes: Sequence[Mapping[str, Any]]) -> HealthCheckResult:
    """Every executed joint action must be valid under the mask logged with it."""
    name, bad, checked = "mask_validity", [], 0
    for episode_id, t, d in _decisions(episodes):
        checked += 1
        index, mask = d.get("action", {}).get("joint_index"), d.get("valid_joint_actions")
        if not isinstance(index, int) or not isinstance(mask, list) or not 0 <= index < len(mask) or not mask[index]:
            bad.append(f"{episode_id}[{t}]")
    if bad:
        return _error(name, f"{len(bad)} of {checked} actions are invalid under their logged mask",
                      invalid=len(bad), examples=bad[:_MAX_EXAMPLES])
    return _ok(name, f"All {checked} actions are valid under their masks")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _probability_problem(d: Mapping[str, Any]) -> str | None:
    action = d.get("action", {})
    probs = action.get("action_probabilities")
    if not isinstance(probs, Mapping) or not isinstance(probs.get("behavior_probs"), Mapping):
        return "no behaviour probabilities"
    behavior = {op: _number(p) for op, p in probs["behavior_probs"].items()}
    if any(p is None for p in behavior.values()):
        return "non-numeric behaviour probability"
    total = sum(p for p in behavior.values() if p is not None)
    if abs(total - 1.0) > PROB_TOLERANCE:
        return f"behaviour probabilities sum to {total:.8f}"
    sampled, prob = probs.get("sampled_action"), _number(probs.get("behavior_prob"))
    if sampled != action.get("action") or sampled not in behavior:
        return f"sampled op {sampled!r} is not the executed op {action.get('action')!r}"
    op_prob = behavior[sampled]
    if prob is None or op_prob is None or abs(prob - op_prob) > PROB_TOLERANCE:
        return f"behavior_prob {prob} != behavior_probs[{sampled}] {op_prob}"
    joint, logp = _number(action.get("joint_behavior_prob")), _number(action.get("joint_behavior_logp"))
    if joint is None or not 0.0 < joint <= op_prob + PROB_TOLERANCE:
        return f"joint_behavior_prob {joint} is not in (0, behavior_prob]"
    if logp is None or abs(math.exp(logp) - joint) > PROB_TOLERANCE:
        return f"joint_behavior_logp {logp} is not log(joint_behavior_prob)"
    return None


def check_behavior_probability_consistency(episodes: Sequence[Mapping[str, Any]]) -> HealthCheckResult:
    """Logged probabilities must be a distribution, name the executed op, and agree with the joint probability
    (which refines the op's probability and is logged with its log): importance weights depend on them."""
    name, bad, checked = "behavior_probability_consistency", [], 0
    for episode_id, t, d in _decisions(episodes):
        checked += 1
        problem = _probability_problem(d)
        if problem is not None:
            bad.append(f"{episode_id}[{t}]: {problem}")
    if bad:
        return _error(name, f"{len(bad)} of {checked} steps log inconsistent behaviour probabilities",
                      inconsistent=len(bad), examples=bad[:_MAX_EXAMPLES])
    return _ok(name, f"Behaviour probabilities consistent on all {checked} steps")


def check_lifecycle_coverage(episodes: Sequence[Mapping[str, Any]], warn_germinating: float = 0.8
                             ) -> HealthCheckResult:
    """Seeds must reach an end of life (fossilized or culled) somewhere, and most episodes must germinate."""
    name = "lifecycle_coverage"
    if not episodes:
        return _error(name, "No episodes in the dataset")
    fossilized = sum(int(e.get("total_seeds_fossilized") or 0) for e in episodes)
    culled = sum(int(e.get("total_seeds_culled") or 0) for e in episodes)
    germinating = sum(1 for e in episodes if int(e.get("total_seeds_created") or 0) > 0) / len(episodes)
    details = {"fossilized": fossilized, "culled": culled, "germinating_share": germinating}
    if fossilized + culled == 0:
        return _error(name, "No seed was fossilized or culled in any episode", **details)
    if germinating < warn_germinating:
        return _warn(name, f"Only {germinating:.0%} of episodes germinate (< {warn_germinating:.0%})", **details)
    return _ok(name, f"{fossilized} fossilized, {culled} culled; {germinating:.0%} of episodes germinate", **details)


def _non_finite(values: Any) -> bool:
    items = values.values() if isinstance(values, Mapping) else values if isinstance(values, list) else [values]
    return any((n := _number(v)) is None or not math.isfinite(n) for v in items)


def check_finite_values(episodes: Sequence[Mapping[str, Any]]) -> HealthCheckResult:
    """Features (per step and final) and rewards (the stored one and every family's total) must be finite numbers."""
    name, bad = "finite_values", []
    for episode in episodes:
        if "final_features" in episode and _non_finite(episode["final_features"]):
            bad.append(f"{episode.get('episode_id', '?')}: final_features")
    for episode_id, t, d in _decisions(episodes):
        fields = {
            "features": d.get("observation", {}).get("features"),
            "reward": d.get("outcome", {}).get("reward"),
            **{f"rewards.{family}": components.get("total")
               for family, components in d.get("rewards", {}).items()},
        }
        bad.extend(f"{episode_id}[{t}]: {k}" for k, v in fields.items() if v is None or _non_finite(v))
    if bad:
        return _error(name, f"{len(bad)} non-finite or missing feature/reward entries", count=len(bad),
                      examples=bad[:_MAX_EXAMPLES])
    return _ok(name, "All features and rewards are finite")


class DatasetHealthCheck:
    """All checks with their thresholds (shares are fractions: 0.02 = 2 %)."""

    def __init__(
        self,
        action_coverage_min: float = 0.02,
        action_coverage_warn: float = 0.05,
        entropy_min: float = 0.3,
        entropy_warn: float = 0.5,
        policy_diversity_min: int = 5,
        policy_diversity_warn: int = 8,
        single_action_max: float = 0.50,
    ) -> None:
        if not 0 <= action_coverage_min <= action_coverage_warn <= 1:
            raise UserInputError("action coverage thresholds need 0 <= min <= warn <= 1")
        if not 0 <= entropy_min <= entropy_warn:
            raise UserInputError("entropy thresholds need 0 <= min <= warn")
        if not 0 <= policy_diversity_min <= policy_diversity_warn:
            raise UserInputError("policy diversity thresholds need 0 <= min <= warn")
        if not 0 <= single_action_max <= 1:
            raise UserInputError("single_action_max must be in [0, 1]")
        self.action_coverage_min, self.action_coverage_warn = action_coverage_min, action_coverage_warn
        self.entropy_min, self.entropy_warn = entropy_min, entropy_warn
        self.policy_diversity_min, self.policy_diversity_warn = policy_diversity_min, policy_diversity_warn
        self.single_action_max = single_action_max

    def run_all(self, episodes: Sequence[Mapping[str, Any]]) -> dict[str, HealthCheckResult]:
        counts = count_actions(episodes)
        results = [
            check_action_coverage(counts, self.action_coverage_min, self.action_coverage_warn),
            check_action_entropy(counts, self.entropy_min, self.entropy_warn),
            check_policy_diversity(episodes, self.policy_diversity_min, self.policy_diversity_warn),
            check_single_action_clusters(episodes, self.single_action_max),
            check_mask_validity(episodes),
            check_behavior_probability_consistency(episodes),
            check_lifecycle_coverage(episodes),
            check_finite_values(episodes),
        ]
        return {r.name: r for r in results}

    @staticmethod
    def has_blocking_errors(results: Mapping[str, HealthCheckResult]) -> bool:
        return any(r.level == "error" and not r.passed for r in results.values())

    def print_report(self, results: Mapping[str, HealthCheckResult], console: Console | None = None) -> None:
        console = console if console is not None else Console()
        table = Table(title="Dataset health check")
        for column in ("", "check", "level", "message"):
            table.add_column(column)
        style = {"ok": "green", "warning": "yellow", "error": "red"}
        for name, r in results.items():
            mark = "[green]✓[/]" if r.passed else "[red]✗[/]"
            table.add_row(mark, name, f"[{style.get(r.level, 'white')}]{r.level}[/]", r.message)
        console.print(table)
        if self.has_blocking_errors(results):
            console.print("[bold red]BLOCKING ERRORS FOUND[/]: the dataset is not fit for offline training")
        else:
            console.print("[bold green]All critical checks passed[/]")


def save_report(results: Mapping[str, HealthCheckResult], path: Path) -> None:
    """Write the results as `health_report.json` (atomically)."""
    write_strict_json(path, {name: r.to_dict() for name, r in results.items()})


def load_episodes(directory: Path) -> list[dict[str, Any]]:
    """Every episode file of a datagen output directory (top-level `*.json` carrying an episode_id)."""
    episodes = []
    for path in sorted(directory.glob("*.json")):
        if path.name.startswith("."):
            continue
        data = read_json(path)
        if isinstance(data, dict) and "decisions" in data and "episode_id" in data:
            episodes.append(data)
    return episodes
