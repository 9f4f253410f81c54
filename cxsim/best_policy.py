"""``--ppo.keep-best``: a run ends with the policy that did best on tasks it had not
trained on, not with whatever its last update left.

Every batch of rollouts is sampled from the policy as it stands, on tasks no earlier batch
drew (training task seeds are never reused), so the batch's success rate scores that
policy on unseen tasks at no extra cost. A policy *version* lasts from one actor step to
the next; its score pools every batch sampled from it (the warm-up's, and those after an
update the skip left out). Before each actor step the version it replaces is closed: if it
scored strictly above every earlier version, the run saves its weights as the best. After
the last iteration one more batch, on fresh tasks, scores the final version.

A version's score is the lower end of the 95% Wilson interval of its success rate, not the
rate: a batch of 32 is noisy, and the most of ~17 noisy rates is mostly luck. So a version
scored on many rollouts (a solved base, whose all-success batches leave the weights alone)
is not replaced by one that drifted and then had a lucky 32 of 32, and ties keep the
earlier version. The reported Compacted Pass@1 still comes from the evaluation's own tasks,
so the pick does not bias the report.

Which version the run ends with is the rule's (``--ppo.keep-best-rule``):

- ``highest-bound``: the best version, as above. From a base that solves nearly every task
  it keeps the base; on a run still climbing it can pick an early version whose one lucky
  batch outscored a later, better policy (docs/results/stability.md).
- ``unless-worse``: the last version, unless the best one did better than it beyond
  chance: the lower end of the 95% interval of their difference (Newcombe's hybrid score
  interval, ``cxsim.tables.paired_difference`` at one seed) is above 0.

Every closed version's counts are kept (``versions``), so either rule, or another, can be
recomputed from ``results.json`` without a run.

Pure bookkeeping, no torch: the run (cxsim/pipeline/training_run.py) sums the successes over
ranks and writes the weights.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from cxsim.evaluation import wilson_interval
from cxsim.tables import Proportion, paired_difference

KeepBestRule = Literal["highest-bound", "unless-worse"]
KEEP_BEST_RULES: tuple[str, ...] = ("highest-bound", "unless-worse")


@dataclass
class BestPolicy:
    """The versions' scores so far and which one is best (kept in each checkpoint)."""

    version: int = 0
    """Actor steps the current weights have taken (0: the starting policy)."""
    successes: float = 0.0
    """Successful rollouts sampled from the current version so far."""
    rollouts: float = 0.0
    """Rollouts sampled from the current version so far."""
    best_version: int | None = None
    """The best closed version, None before the first close."""
    best_score: float = -1.0
    """Its score: the lower end of the 95% Wilson interval of its success rate."""
    best_rate: float = 0.0
    """Its success rate."""
    best_rollouts: float = 0.0
    """How many rollouts that rate is over."""
    versions: list[list[float]] = field(default_factory=list)
    """Every scored version closed so far: ``[version, successes, rollouts]``."""

    def observe(self, successes: float, rollouts: float) -> None:
        """A batch sampled from the current version: ``successes`` of ``rollouts``."""
        if rollouts < 0 or not 0 <= successes <= rollouts:
            raise ValueError(f"{successes} successes of {rollouts} rollouts is not a batch")
        self.successes += successes
        self.rollouts += rollouts

    def close(self) -> bool:
        """Ends the current version (its weights are about to change). True when it scored
        strictly above every earlier version: save its weights now. A version no batch
        scored is passed over."""
        scored = self.rollouts > 0
        score = wilson_interval(self.successes, round(self.rollouts))[0] if scored else -1.0
        if scored:
            self.versions.append([self.version, self.successes, self.rollouts])
        better = scored and score > self.best_score
        if better:
            self.best_version, self.best_score = self.version, score
            self.best_rate, self.best_rollouts = self.successes / self.rollouts, self.rollouts
        self.version += 1
        self.successes = self.rollouts = 0.0
        return better

    def kept_version(self, rule: KeepBestRule) -> int | None:
        """The version a finished run ends with under ``rule`` (None: no version scored)."""
        if rule not in KEEP_BEST_RULES:
            raise ValueError(f"keep-best rule {rule!r} is unknown; choose one of {KEEP_BEST_RULES}")
        if rule == "highest-bound" or not self.versions or self.best_version is None:
            return self.best_version
        last, last_successes, last_rollouts = self.versions[-1]
        if self.best_version == last:
            return self.best_version
        successes = round(self.best_rate * self.best_rollouts, 6)  # a count, up to rounding
        best = Proportion(successes, round(self.best_rollouts))
        difference = paired_difference([best], [Proportion(last_successes, round(last_rollouts))])
        return self.best_version if difference.low > 0 else int(last)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, saved: dict[str, Any] | None) -> BestPolicy:
        """A fresh tracker (``saved`` None), or the one a checkpoint kept."""
        return cls(**saved) if saved else cls()
