"""``compacted``: the paper's protocol (docs/method.md section 1).

Before each response, a full window (``C - |h_t| < T_comp``) is summarized by the same
policy: it is given ``h_t + q_sum`` and writes the summary S; the window is rebuilt as
``(s) + [u] + u_resume(S) + last k steps`` (the task only with ``keep_task``). While a
compaction is left, responses and observations never use the last ``|q_sum| +
max_summary_tokens`` tokens, so the summary prompt plus the summary always fit in C.

Segments: each closed window (trainable: the responses sampled in it), then the summary
segment ``h_t + q_sum + S`` (trainable: exactly S). The scripted oracle acts and writes the
scripted summaries itself, so its rollouts demonstrate both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cxsim.strategies.base import ContextStrategy
from cxsim.strategies.parts import RebuiltWindow, SegmentRecorder, SummaryPlan
from cxsim.strategies.strategy_types import SummaryAuthor

if TYPE_CHECKING:
    from cxsim.compaction import CompactionConfig
    from cxsim.segments import Segment


class Compacted(ContextStrategy):
    """A full window is summarized (by the acting policy) and rebuilt around the summary."""

    name = "compacted"
    help = "the policy summarizes a full window, which is rebuilt around the summary (paper)"
    summary_by: SummaryAuthor | None = "policy"

    def summary(self, config: CompactionConfig) -> SummaryPlan:
        """q_sum asks with the summary instruction; a summary of ``max_summary_tokens``."""
        assert config.max_summary_tokens is not None
        return SummaryPlan(config, config.summary_instruction, config.max_summary_tokens)

    def rebuild(self, config: CompactionConfig) -> RebuiltWindow:
        """``(s) + [u] + u_resume(S) + last k steps`` (the task only with ``keep_task``)."""
        return RebuiltWindow(config, task=config.keep_task, summary=True)

    def segments(self, config: CompactionConfig) -> SegmentRecorder:
        """Each window, then each summary segment (:class:`PolicySummaries`)."""
        return PolicySummaries(config)


class PolicySummaries(SegmentRecorder):
    """The segments of a strategy whose summaries the acting policy writes: each closed
    window (an execution segment), and each summary, ``h_t + q_sum + S``."""

    def summary(
        self,
        prompt: list[int],
        summary: list[int],
        logprobs: list[float],
        rollout_id: int,
        index: int,
    ) -> Segment | None:
        """``h_t + q_sum + S``, trainable on S only (the summary is the policy's action)."""
        from cxsim.segments import Segment

        return Segment(
            role="summary", token_ids=prompt + summary,
            trainable=[False] * len(prompt) + [True] * len(summary),
            logprobs=[0.0] * len(prompt) + list(logprobs),
            rollout_id=rollout_id, segment_index=index,
        )  # fmt: skip


COMPACTED = Compacted()
