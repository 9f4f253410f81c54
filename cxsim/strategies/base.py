"""What a context strategy decides, in one place (docs/architecture.md, "How a rollout flows
through a context strategy").

A :class:`ContextStrategy` is one protocol for bounding a row's context. The runtime
(``cxsim.runtime``), the configuration checks and the sizing (``cxsim.compaction``) hold
no protocol of their own: they ask the strategy

- **when to act**: :meth:`~ContextStrategy.trigger` turns a row's context length into
  ``act``, ``summarize``, ``rebuild`` (a new window without a summary) or ``end``;
- **what the next context is**: :meth:`~ContextStrategy.layout` (system prompt, then the
  task and / or the resume turn with the summary), then the last k steps that still fit
  (:meth:`~ContextStrategy.steps_kept`);
- **what it asks for**: the summary prompt q_sum (:meth:`~ContextStrategy.summary_prompt`)
  and who writes the summary (``summary_by``: the acting policy, another agent, or nobody);
- **what it records**: the segment a closed window or a summary yields and its trainable
  tokens (:meth:`~ContextStrategy.window_segment`, :meth:`~ContextStrategy.summary_segment`);
- **how much room it keeps**: the summary reserve, the checks that need the chat format
  (:meth:`~ContextStrategy.validate`) and the window sizes the sizing replays;
- **what the scripted oracle does under it** (:meth:`~ContextStrategy.scripted_agents`):
  the agents whose rollouts are demonstrations.

The compaction rule, ``C - |h| < T_comp`` (the window is full), is :func:`window_full`;
every one of those decisions reads it from there.

This module imports neither torch nor the agents until a method needs them, so that configs
and ``--help`` stay light.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple, Protocol

if TYPE_CHECKING:
    from cxsim.agent_api import Agent
    from cxsim.agents.chat import ChatFormat
    from cxsim.compaction import CompactionConfig
    from cxsim.segments import Segment

Trigger = Literal["act", "summarize", "rebuild", "end"]
"""What a row does before its next response: respond, have its window summarized, rebuild
its window without a summary, or end (the window is full and nothing is left to do)."""
SummaryAuthor = Literal["policy", "summarizer"]
"""Who writes a summary: the acting policy (a trainable summary segment) or another agent."""
SUMMARY_AUTHORS: tuple[SummaryAuthor, ...] = ("policy", "summarizer")


def window_full(budget: int, threshold: int, length: int) -> bool:
    """The compaction rule (docs/method.md): a window of ``length`` tokens is full when
    ``budget - length < threshold``; a response is asked for only in a window that is not."""
    return budget - length < threshold


@dataclass(frozen=True)
class RebuiltWindow:
    """What a rebuilt window holds after the system prompt and before the last k steps."""

    task: bool
    """The task u."""
    summary: bool
    """The resume turn u_resume(S) that carries the summary."""


class TokenCount(Protocol):
    """``count(piece, *texts)``: ``len(chat.<piece>(*texts))`` (measured once per text)."""

    def __call__(self, piece: str, *texts: str) -> int: ...


class RolloutAgents(NamedTuple):
    """The agents a rollout under a strategy needs: the actor and, where the strategy has
    another agent write the summaries, that summarizer."""

    actor: Agent
    summarizer: Agent | None = None


class ContextStrategy:
    """One protocol for bounding a row's context; subclass it and override what differs.

    The defaults are a window that is never compacted: full means the episode ends.
    """

    name: str = ""
    """The ``--compaction.protocol`` value that selects it."""
    help: str = ""
    """One line: what the strategy does."""
    compacts: bool = False
    """A full window is replaced by a rebuilt one (while compactions are left); else the
    episode ends, truncated and failed."""
    summary_by: SummaryAuthor | None = None
    """Who writes the summary the rebuilt window carries; None: no summary."""

    @property
    def summarizes(self) -> bool:
        """Rebuilt windows carry a summary."""
        return self.summary_by is not None

    @property
    def policy_summarizes(self) -> bool:
        """The acting policy writes the summaries (they are its actions, and trained)."""
        return self.summary_by == "policy"

    # -- when to act ----------------------------------------------------------------
    def full(self, config: CompactionConfig, length: int) -> bool:
        """Whether a window of ``length`` tokens is full under ``config`` (:func:`window_full`)."""
        assert config.budget is not None and config.threshold is not None
        return window_full(config.budget, config.threshold, length)

    def trigger(self, config: CompactionConfig, length: int, compactions: int) -> Trigger:
        """What a row whose window holds ``length`` tokens, after ``compactions``
        compactions, does before its next response."""
        if not self.full(config, length):
            return "act"
        if not self.compacts or compactions >= config.max_compactions:
            return "end"
        return "summarize" if self.summarizes else "rebuild"

    # -- what it asks for, and the room that keeps free -----------------------------
    def summary_prompt(self, config: CompactionConfig, chat: ChatFormat) -> list[int]:
        """q_sum: the tokens appended to a full window to ask for a summary ([]: none)."""
        return []

    def summary_tokens(self, config: CompactionConfig) -> int:
        """The most tokens a summary may take (0: no summary)."""
        return 0

    def summary_reserve(self, config: CompactionConfig, chat: ChatFormat) -> int:
        """Tokens kept free in a window while a compaction is left, so that the summary prompt
        plus the summary always fit in the budget: ``|q_sum| + max_summary_tokens``."""
        return len(self.summary_prompt(config, chat)) + self.summary_tokens(config)

    def check(self, config: CompactionConfig) -> None:
        """Checks of ``config`` that need no chat format; raises a one-line ValueError."""
        summary, threshold = config.max_summary_tokens, config.threshold
        if summary is None or threshold is None or not self.summarizes:
            return
        if summary >= threshold:
            raise ValueError(
                f"max_summary_tokens ({summary}) must be < threshold ({threshold}) so that q_sum "
                "and the summary fit: lower --compaction.max_summary_tokens or raise "
                "--compaction.threshold"
            )

    def validate(self, config: CompactionConfig, chat: ChatFormat, system_prompt: str) -> None:
        """Checks that need the chat format (``config`` sized); raises a one-line ValueError.

        - ``threshold >= |q_sum| + max_summary_tokens + |assistant header| + 1``, so that
          whenever a response is allowed at least one token of it fits;
        - the smallest rebuilt window (:meth:`rebuilt_floor`) is not full.
        """
        header = len(chat.assistant_prefix())
        q_sum = len(self.summary_prompt(config, chat))
        summary = self.summary_tokens(config)
        need = q_sum + summary + header + 1
        assert config.threshold is not None and config.budget is not None
        if config.threshold < need:
            raise ValueError(
                f"threshold ({config.threshold}) must be >= |q_sum| ({q_sum}) + max_summary_tokens "
                f"({summary}) + assistant header ({header}) + 1 = {need}: raise "
                "--compaction.threshold or lower --compaction.max_summary_tokens"
            )
        if not self.compacts:
            return
        rebuilt = self.rebuilt_floor(config, _chat_count(chat), len(chat.system(system_prompt)))
        if self.full(config, rebuilt):
            raise ValueError(
                f"budget ({config.budget}) is too small for a rebuilt window: system prompt and "
                f"resume turn with a full summary take {rebuilt} tokens, leaving "
                f"{config.budget - rebuilt} < threshold ({config.threshold}); raise "
                "--compaction.budget or lower --compaction.threshold / max_summary_tokens"
            )

    # -- what the next context is ---------------------------------------------------
    def layout(self, config: CompactionConfig) -> RebuiltWindow:
        """What a rebuilt window holds before its steps (the system prompt always)."""
        return RebuiltWindow(task=True, summary=False)

    def rebuilt_prefix(
        self,
        config: CompactionConfig,
        chat: ChatFormat,
        system: list[int],
        task: list[int],
        summary: str | None,
    ) -> list[int]:
        """A rebuilt window's tokens before its steps: ``(s) [+ u] [+ u_resume(S)]``."""
        layout = self.layout(config)
        tokens = list(system)
        if layout.task:
            tokens += task
        if layout.summary and summary is not None:
            tokens += chat.resume(config.resume_instruction, summary)
        return tokens

    def rebuilt_floor(self, config: CompactionConfig, count: TokenCount, system: int) -> int:
        """The smallest rebuilt window any episode gets: the system prompt and, when it
        carries a summary, the resume turn with a summary of ``max_summary_tokens`` (a task
        kept with ``keep_task`` varies per episode and is left out)."""
        if not self.layout(config).summary:
            return system
        return system + count("resume", config.resume_instruction, "") + self.summary_tokens(config)

    def rebuilt_size(
        self,
        config: CompactionConfig,
        count: TokenCount,
        system: int,
        task: int,
        summaries: Sequence[str],
    ) -> int:
        """One episode's rebuilt window before its steps, with its longest summary."""
        layout = self.layout(config)
        size = system + (task if layout.task else 0)
        if layout.summary:
            size += max(count("resume", config.resume_instruction, s) for s in summaries)
        return size

    def steps_kept(self, config: CompactionConfig, prefix: int, steps: Sequence[int]) -> int | None:
        """k: how many of the last ``steps`` (their sizes, oldest first) a rebuilt window of
        ``prefix`` tokens copies: ``keep_last``, lowered until the window is not full;
        None when even k = 0 leaves it full."""
        for k in range(min(config.keep_last, len(steps)), -1, -1):
            if not self.full(config, prefix + sum(steps[len(steps) - k :])):
                return k
        return None

    # -- what it records ------------------------------------------------------------
    def window_segment(
        self,
        tokens: list[int],
        trainable: list[bool],
        logprobs: list[float],
        step_rewards: list[float],
        rollout_id: int,
        index: int,
    ) -> Segment | None:
        """The segment a closed window yields: an execution segment whose trainable tokens
        are the ones sampled in it; None when nothing was generated in it."""
        if not any(trainable):
            return None
        from cxsim.segments import Segment

        return Segment(
            role="execution", token_ids=list(tokens), trainable=list(trainable),
            logprobs=list(logprobs), rollout_id=rollout_id, segment_index=index,
            step_rewards=list(step_rewards),
        )  # fmt: skip

    def summary_segment(
        self,
        prompt: list[int],
        summary: list[int],
        logprobs: list[float],
        rollout_id: int,
        index: int,
    ) -> Segment | None:
        """The segment a summary yields (``prompt`` = window + q_sum); None: not recorded."""
        return None

    # -- agents ---------------------------------------------------------------------
    def check_agents(self, name: str, summarizer_agent: Agent | None) -> None:
        """Raises ValueError when the strategy needs a summarizer agent and none is given."""
        if self.summary_by == "summarizer" and summarizer_agent is None:
            raise ValueError(f"protocol {name!r} needs a summarizer_agent")

    def scripted_agents(
        self,
        env_id: str,
        chat: ChatFormat,
        omission_rate: float = 0.0,
        seed: int = 0,
        epsilon: float = 0.0,
        skip_rate: float = 0.0,
    ) -> RolloutAgents:
        """The scripted oracle under this strategy (``cxsim.agents.scripted.ScriptedAgent``:
        the environment's oracle, grounded in its context, with the scripted summarizer
        dropping each needed fact with ``omission_rate``): its rollouts are demonstrations."""
        from cxsim.agents.scripted import ScriptedAgent

        actor = ScriptedAgent(
            env_id, chat, omission_rate=omission_rate, seed=seed, epsilon=epsilon,
            skip_rate=skip_rate,
        )  # fmt: skip
        return RolloutAgents(actor)


def _chat_count(chat: ChatFormat) -> TokenCount:
    def count(piece: str, *texts: str) -> int:
        return len(getattr(chat, piece)(*texts))

    return count
