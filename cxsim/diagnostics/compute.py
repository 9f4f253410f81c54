"""Compute accounting: tokens, forward/backward passes and wall-clock, per iteration
and per success (the paper reports none of these; docs/method.md section 6)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from cxsim.diagnostics._common import as_records

COUNTERS: tuple[str, ...] = (
    "tokens_generated",  # sampled by the agents, summaries included
    "tokens_prefilled",  # encoded but not generated (prompts, observations, resumes)
    "tokens_summarised",  # summary tokens written (a part of tokens_generated)
    "actor_forward_tokens",  # tokens through the policy in training (re-scoring, updates)
    "actor_backward_tokens",
    "critic_forward_tokens",  # value passes: re-scoring and critic updates
    "critic_backward_tokens",
    "wall_clock_s",
)


class TokenRecord(Protocol):
    success: bool
    tokens_generated: int
    tokens_prefilled: int
    tokens_summarised: int


@dataclass
class ComputeMeter:
    """Accumulates compute over iterations; :meth:`as_dict` gives totals and rates.

    Typical use in a training loop::

        meter = ComputeMeter(actor_params=n_actor, critic_params=n_critic)
        with meter.timed("rollout"):
            batch = collect_rollouts(...)
        meter.add_records(batch.records)
        meter.add(actor_forward_tokens=..., critic_backward_tokens=..., iterations=1)
        writer_log(meter.as_dict())

    ``actor_params`` / ``critic_params`` (parameter counts), when given, add an
    approximate FLOP count: ``2 P`` per token forward and ``4 P`` per token
    backward, ignoring the attention term that grows with context length.
    Sampling counts as actor forward work (generated + prefilled tokens).
    """

    actor_params: int | None = None
    critic_params: int | None = None
    totals: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0.0))
    phases: dict[str, float] = field(default_factory=dict)
    """Wall-clock seconds by phase name (from :meth:`timed`)."""
    iterations: int = 0
    rollouts: int = 0
    successes: int = 0

    def add(
        self,
        *,
        iterations: int = 0,
        rollouts: int = 0,
        successes: int = 0,
        **counts: float,
    ) -> None:
        """Adds to the counters; ``counts`` keys must be names in :data:`COUNTERS`."""
        unknown = set(counts) - set(COUNTERS)
        if unknown:
            raise ValueError(f"unknown counters {sorted(unknown)}; choose from {COUNTERS}")
        for name, value in counts.items():
            self.totals[name] += float(value)
        self.iterations += iterations
        self.rollouts += rollouts
        self.successes += successes

    def add_records(self, records: Sequence[TokenRecord | Mapping]) -> None:
        """Adds the rollouts' token counts, their number and their successes."""
        recs = as_records(records)
        self.add(
            rollouts=len(recs),
            successes=sum(bool(r.success) for r in recs),
            tokens_generated=sum(r.tokens_generated for r in recs),
            tokens_prefilled=sum(r.tokens_prefilled for r in recs),
            tokens_summarised=sum(r.tokens_summarised for r in recs),
        )

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        """Adds the block's wall-clock time to ``wall_clock_s`` and to ``phase``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            self.totals["wall_clock_s"] += elapsed
            self.phases[phase] = self.phases.get(phase, 0.0) + elapsed

    @classmethod
    def merged(cls, meters: Sequence[ComputeMeter]) -> ComputeMeter:
        """One meter for data-parallel ranks that each metered their own shard.

        Token counts, rollouts and successes add up over the ranks; wall-clock (in
        total and by phase) is the slowest rank's, since the ranks run side by side;
        iterations are the ranks' common count. Parameter counts are the first rank's.
        """
        if not meters:
            raise ValueError("merged needs at least one meter")
        phases = {name for m in meters for name in m.phases}
        totals = {name: sum(m.totals[name] for m in meters) for name in COUNTERS}
        totals["wall_clock_s"] = max(m.totals["wall_clock_s"] for m in meters)
        return cls(
            actor_params=meters[0].actor_params,
            critic_params=meters[0].critic_params,
            totals=totals,
            phases={p: max(m.phases.get(p, 0.0) for m in meters) for p in sorted(phases)},
            iterations=max(m.iterations for m in meters),
            rollouts=sum(m.rollouts for m in meters),
            successes=sum(m.successes for m in meters),
        )

    def as_dict(self) -> dict[str, float]:
        """``compute/{name}`` (total), ``compute/{name}_per_iter`` and
        ``compute/{name}_per_success`` for every counter (FLOPs included when
        parameter counts are known, wall-clock phases as ``wall_{phase}_s``);
        ``compute/iterations``, ``compute/rollouts``, ``compute/successes``.
        A rate is left out while its denominator is 0."""
        totals = dict(self.totals)
        totals.update({f"wall_{phase}_s": secs for phase, secs in self.phases.items()})
        if self.actor_params is not None:
            sampled = totals["tokens_generated"] + totals["tokens_prefilled"]
            forward = sampled + totals["actor_forward_tokens"]
            totals["actor_flops"] = self.actor_params * (
                2 * forward + 4 * totals["actor_backward_tokens"]
            )
        if self.critic_params is not None:
            totals["critic_flops"] = self.critic_params * (
                2 * totals["critic_forward_tokens"] + 4 * totals["critic_backward_tokens"]
            )
        out = {
            "compute/iterations": float(self.iterations),
            "compute/rollouts": float(self.rollouts),
            "compute/successes": float(self.successes),
        }
        for name, value in totals.items():
            out[f"compute/{name}"] = value
            if self.iterations:
                out[f"compute/{name}_per_iter"] = value / self.iterations
            if self.successes:
                out[f"compute/{name}_per_success"] = value / self.successes
        return out
