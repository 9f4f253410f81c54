"""What a function under test declares it implements, and what the check then leaves out.

A framework may implement one adaptive-lambda scope only, fixed lambda only,
group advantages only for groups of at least N rollouts, or never see rejected
summary attempts (its pipeline drops them before the call). Declared with
``cxsim conform --claims``, ``--lambda-kind``, ``--min-group``,
``--no-rejected-attempts`` and ``--no-trees`` (the function reads every rollout as a chain,
as it is under the strategies that do not branch), cases outside the claims are skipped and groups
below the smallest size removed from each batch; the report counts both and
says what was not checked (docs/conformance.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cxsim.conformance.batches import Batch, Case, select_rows
from cxsim.conformance.quantities import QUANTITIES, Quantity

SCOPE_CLAIMS: dict[str, tuple[str, ...]] = {
    "both": ("segment", "rollout"),
    "segment-scope": ("segment",),
    "rollout-scope": ("rollout",),
}
"""``--claims``: the adaptive-lambda scopes the function implements."""
LAMBDA_KINDS: dict[str, tuple[str, ...]] = {
    "both": ("fixed", "adaptive"),
    "fixed": ("fixed",),
    "adaptive": ("adaptive",),
}
"""``--lambda-kind``: fixed lambda, length-adaptive lambda, or both."""


def _applies(flag: str) -> tuple[str, ...]:
    """The quantities a declaration applies to: those whose record has ``flag`` set."""
    return tuple(name for name, q in QUANTITIES.items() if getattr(q, flag))


@dataclass(frozen=True)
class Claims:
    """The function's declared conventions; the defaults claim everything."""

    scope: str = "both"
    """Adaptive-lambda scope: "segment-scope", "rollout-scope" or "both"."""
    lambda_kind: str = "both"
    """"fixed", "adaptive" or "both"."""
    min_group: int = 1
    """Smallest group (rollouts) the group advantages are defined for."""
    rejected_attempts: bool = True
    """The function is given rejected summary attempts (rows without a trainable token)."""
    trees: bool = True
    """The function is given segment trees (``parent_index``: context strategies that branch,
    folding and memory-notes); False: chains only."""

    def __post_init__(self) -> None:
        if self.scope not in SCOPE_CLAIMS:
            raise ValueError(
                f"--claims must be one of {', '.join(SCOPE_CLAIMS)}, got {self.scope!r}"
            )
        if self.lambda_kind not in LAMBDA_KINDS:
            raise ValueError(
                f"--lambda-kind must be one of {', '.join(LAMBDA_KINDS)}, got {self.lambda_kind!r}"
            )
        if self.min_group < 1:
            raise ValueError(f"--min-group must be >= 1, got {self.min_group}")

    def check_applies(self, quantity: Quantity) -> None:
        """Raises ValueError for a declaration that means nothing for ``quantity``."""
        name = quantity.name
        if (self.scope, self.lambda_kind) != ("both", "both") and not quantity.lambdas:
            raise ValueError(
                f"--claims and --lambda-kind apply to {', '.join(_applies('lambdas'))}; "
                f"{name} has no lambda"
            )
        if self.min_group > 1 and not quantity.groups:
            raise ValueError(
                f"--min-group applies to {', '.join(_applies('groups'))}; {name} has no groups"
            )
        if not self.trees and not quantity.trees:
            raise ValueError(
                f"--no-trees applies to {', '.join(_applies('trees'))}; {name} has no tree cases"
            )
        if not self.rejected_attempts and not quantity.rejected:
            raise ValueError(
                f"--no-rejected-attempts applies to {', '.join(_applies('rejected'))}; "
                f"{name} has no rejected-attempt cases"
            )

    def excludes(self, case: Case, quantity: Quantity) -> str | None:
        """Why ``case`` lies outside the claims (what is then not checked), or None."""
        kinds = LAMBDA_KINDS[self.lambda_kind]
        if case.lam_kind is not None and quantity.lambdas and case.lam_kind not in kinds:
            return f"{case.lam_kind} lambda (--lambda-kind {self.lambda_kind})"
        if case.scope is not None and case.scope not in SCOPE_CLAIMS[self.scope]:
            return f"adaptive lambda over the {case.scope} (--claims {self.scope})"
        if case.rejected and not self.rejected_attempts:
            return "rejected summary attempts (--no-rejected-attempts)"
        if case.tree and not self.trees:
            return "segment trees (--no-trees)"
        if case.example is not None:
            kept, _ = self.restrict(case.example, quantity)
            if kept.num_rows == 0:
                return self.group_text()
        return None

    def group_text(self) -> str:
        return f"groups of fewer than {self.min_group} rollouts (--min-group {self.min_group})"

    def restrict(self, batch: Batch, quantity: Quantity) -> tuple[Batch, int]:
        """The batch without the groups smaller than ``min_group``, and how many were removed."""
        if self.min_group <= 1 or not quantity.groups:
            return batch, 0
        keep = torch.zeros(batch.num_rows, dtype=torch.bool)
        removed = 0
        for gid in batch.group_id.unique().tolist():
            rows = batch.group_id == gid
            if len(batch.rollout_id[rows].unique()) >= self.min_group:
                keep |= rows
            else:
                removed += 1
        return (batch, 0) if removed == 0 else (select_rows(batch, keep), removed)

    def describe(self) -> str:
        """One line for the report ("" when everything is claimed)."""
        parts = []
        if self.scope != "both":
            parts.append(f"adaptive lambda over the {SCOPE_CLAIMS[self.scope][0]} only")
        if self.lambda_kind != "both":
            parts.append(f"{self.lambda_kind} lambda only")
        if self.min_group > 1:
            parts.append(f"groups of at least {self.min_group} rollouts")
        if not self.rejected_attempts:
            parts.append("never given rejected summary attempts")
        if not self.trees:
            parts.append("chains only, never segment trees")
        return "claims: " + "; ".join(parts) if parts else ""
