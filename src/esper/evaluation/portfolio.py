"""Single best and virtual best: how much a per-run choice of architecture could gain over one fixed choice.

Algorithm selection measures the value of choosing per instance with two oracles: the single best solver (SBS), the
one choice that is best on average over the instances, and the virtual best solver (VBS), the best choice of each
instance. A growth controller that looks at *this* run can at most close the gap between them; where VBS − SBS is
small, one fixed architecture serves every instance and there is nothing for a per-run controller to win. A task
family is therefore pre-checked before any policy trains: the gap must reach a threshold (3 pp), or the family is
redesigned.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["GAP_THRESHOLD_PP", "Portfolio", "gap_closed", "portfolio"]

GAP_THRESHOLD_PP = 3.0
"""The least mean VBS − SBS (pp, over the training types) for which a family is worth a learned controller."""


@dataclass(frozen=True)
class Portfolio:
    """SBS over the types it was chosen on, and each type's VBS, with the scores that chose them."""

    sbs: str
    vbs: dict[str, str]
    scores: dict[str, dict[str, float]]  # type → candidate → score (e.g. mean validation accuracy on selection seeds)

    def gap(self, itype: str) -> float:
        """VBS − SBS on `itype`, by the scores the choice was made on."""
        return self.scores[itype][self.vbs[itype]] - self.scores[itype][self.sbs]

    def mean_gap(self, types: Sequence[str]) -> float:
        return statistics.fmean(self.gap(t) for t in types)


def portfolio(scores: Mapping[str, Mapping[str, float]], training: Sequence[str]) -> Portfolio:
    """SBS: the candidate with the best mean score over the `training` types among those scored on every one of them
    (the first on a tie); VBS: each type's best candidate. `scores[type][candidate]`."""
    if not training:
        raise ValueError("a portfolio needs at least one training type")
    common = set.intersection(*(set(scores[t]) for t in training))
    if not common:
        raise ValueError("no candidate was scored on every training type")
    ordered = [c for c in scores[training[0]] if c in common]
    sbs = max(ordered, key=lambda c: statistics.fmean(scores[t][c] for t in training))
    vbs = {t: max(scores[t], key=lambda c: scores[t][c]) for t in scores}
    return Portfolio(sbs, vbs, {t: dict(s) for t, s in scores.items()})


def gap_closed(policy: float, sbs: float, vbs: float) -> float | None:
    """The share of the SBS → VBS gap a policy closes (1: it reaches VBS, 0: SBS, negative: worse than SBS); None
    where VBS does not beat SBS (there is no gap to close)."""
    gap = vbs - sbs
    return None if gap <= 0 else (policy - sbs) / gap
