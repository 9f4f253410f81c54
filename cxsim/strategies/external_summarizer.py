"""``external-summarizer``: compacted, with the summaries written by another agent.

The paper's Table 1 setting: a fixed executor, and a scripted or frozen summarizer given
the whole summary prompt ``h_t + q_sum`` (a fresh context: it holds no state of the row).
Windows are rebuilt and reserved as under ``compacted``; the summary is not the acting
policy's action, so no summary segment is recorded (its text is still in
``RolloutRecord.summaries``). Its scripted agents: the oracle acts, and a scripted
summarizer with the same omission rate (seeded apart) writes the summaries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cxsim.strategies.compacted import Compacted
from cxsim.strategies.parts import SegmentRecorder
from cxsim.strategies.rollout_agents import RolloutAgents, ScriptedOptions
from cxsim.strategies.strategy_types import SummaryAuthor

if TYPE_CHECKING:
    from cxsim.agents.chat import ChatFormat
    from cxsim.compaction import CompactionConfig

SUMMARIZER_SEED_OFFSET = 1
"""The scripted summarizer's seed is the actor's plus this (their draws stay apart)."""


class ExternalSummarizer(Compacted):
    """Compacted, except that another agent writes the summaries."""

    name = "external-summarizer"
    help = "compacted, with the summaries written by another agent (not trained)"
    summary_by: SummaryAuthor | None = "summarizer"

    def segments(self, config: CompactionConfig) -> SegmentRecorder:
        """Each window; no summary segment (the summary is not the policy's action)."""
        return SegmentRecorder(config)

    def scripted_agents(
        self,
        env_id: str,
        chat: ChatFormat,
        options: ScriptedOptions = ScriptedOptions(),
        config: CompactionConfig | None = None,
    ) -> RolloutAgents:
        """The oracle as actor; the summaries written by a second scripted agent, with the
        same omission rate and its own seed (no noise, no skipped actions)."""
        summarizer = ScriptedOptions(options.omission_rate, options.seed + SUMMARIZER_SEED_OFFSET)
        return RolloutAgents(options.oracle(env_id, chat), summarizer.oracle(env_id, chat))


EXTERNAL_SUMMARIZER = ExternalSummarizer()
