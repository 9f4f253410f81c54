"""What a context strategy decides, in one place (docs/architecture.md, "How a rollout flows
through a context strategy").

A :class:`ContextStrategy` is one protocol for bounding a row's context. The runtime
(``cxsim.runtime``), the configuration checks and the sizing (``cxsim.compaction``) hold
no protocol of their own: they ask the strategy

- **when to act**: :meth:`~ContextStrategy.turn_trigger` turns what the runtime knows of a
  row (:class:`TurnState`: its window's length, the steps taken since the window was built,
  ...) into ``act``, ``summarize``, ``rebuild`` (a new window without a summary) or ``end``
  (``CompactionConfig.compactions_left`` bounds them);
- **what the next context is**: :meth:`~ContextStrategy.rebuild`, a
  :class:`~cxsim.strategies.parts.RebuiltWindow` (None: never rebuilt): its prefix (system
  prompt, then the task and / or the resume turn with the summary), then the last k steps
  that still fit, or any steps, each verbatim or with its observation replaced by its
  ``placeholder`` (``RebuiltWindow.steps``);
- **what it asks for**: its summaries (:meth:`~ContextStrategy.summary`, a
  :class:`~cxsim.strategies.parts.SummaryPlan`: the summary prompt q_sum, the summary's cap
  and when the summary reserve stays free) and who writes them (``summary_by``: the acting
  policy, another agent, or nobody);
- **what it records**: :meth:`~ContextStrategy.segments`, a
  :class:`~cxsim.strategies.parts.SegmentRecorder`: the segment a closed window or a
  summary yields and its trainable tokens, and how a rollout's segments are rearranged once
  it ended;
- **how much room it keeps**: the summary reserve, its checks, with the chat format or
  without (:meth:`~ContextStrategy.check`), and the window sizes the sizing replays;
- **what the policy may ask for, and what it keeps of a row**: :meth:`~ContextStrategy.row_state`,
  a :class:`~cxsim.strategies.parts.RowState` per row, whose ``response_move`` reads a
  response as an action, a request to compact, one that opens a child window or returns
  from it (the runtime lays out both, the same for every strategy), or a note to keep; the
  runtime tells it of each move it executed and hands it back to the strategy's decisions
  (``TurnState.row``; what a rebuilt window carries of it, ``RebuiltWindow.prefix``; how a
  rollout's segments are rearranged around it once it ended, ``SegmentRecorder.finished``):
  folding's parent windows and memory-notes' notes live in theirs, not in the runtime's row;
- **what the scripted oracle does under it** (:meth:`~ContextStrategy.scripted_agents`;
  given a sized config, with its own decisions, which the sizing replays): the agents whose
  rollouts are demonstrations;
- **how the sizing sees it**: :meth:`~ContextStrategy.sizing`, one
  :class:`~cxsim.strategies.sizing.StrategySizing` (``cxsim.strategies.sizing``).

What those decisions take and return (:class:`TurnState`, :class:`StepCost`, ``Trigger``,
...) is defined in ``cxsim.strategies.strategy_types``, with the compaction rule,
``C - |h| < T_comp`` (the window is full), :func:`window_full`; every one of those decisions
reads it from there.

This module imports neither torch nor the agents until a method needs them, so that configs
and ``--help`` stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cxsim.strategies.parts import RebuiltWindow, RowState, SegmentRecorder, SummaryPlan
from cxsim.strategies.rollout_agents import RolloutAgents, ScriptedOptions
from cxsim.strategies.sizing import StrategySizing
from cxsim.strategies.strategy_types import (
    SummaryAuthor,
    TokenCount,
    Trigger,
    TurnState,
)

if TYPE_CHECKING:
    from cxsim.agents.chat import ChatFormat
    from cxsim.compaction import CompactionConfig


class ContextStrategy:
    """One protocol for bounding a row's context; subclass it and override what differs.

    The defaults are a window that is never compacted: full means the episode ends.
    """

    name: str = ""
    """The ``--compaction.protocol`` value that selects it."""
    help: str = ""
    """One line: what the strategy does."""
    summary_by: SummaryAuthor | None = None
    """Who writes the summary the rebuilt window carries; None: no summary."""

    # -- when to act ----------------------------------------------------------------
    def turn_trigger(self, config: CompactionConfig, turn: TurnState) -> Trigger:
        """What the row does before its next response, from all the runtime knows of it (the
        runtime and the sizing ask this). By default on the window's length and compactions
        alone: act while the window is not full; else summarize (or rebuild, without a
        summary) while a compaction is left; else end."""
        if not config.full(turn.length):
            return "act"
        if self.rebuild(config) is None or not config.compactions_left(turn.compactions):
            return "end"
        return "rebuild" if self.summary_by is None else "summarize"

    def row_state(self, config: CompactionConfig) -> RowState:
        """What it keeps of one row under ``config`` (:class:`RowState`, made per row when its
        episode starts, held by the runtime and handed back to its decisions): what a response
        is (``RowState.response_move``, a :class:`ResponseMove` the runtime executes: ``act``,
        ``compact``, ``branch``, ``return`` or ``note``) and what it keeps of the moves
        executed. By default nothing kept: every response is an action."""
        return RowState(config)

    # -- what it asks for, and the room that keeps free -----------------------------
    def summary(self, config: CompactionConfig) -> SummaryPlan:
        """What its summaries are under ``config`` (:class:`SummaryPlan`): the summary prompt
        q_sum, the summary's token cap and when the summary reserve stays free (by default
        while a compaction is left). By default no summary: no q_sum, a cap of 0."""
        return SummaryPlan(config)

    def sizing(self, config: CompactionConfig, count: TokenCount) -> StrategySizing:
        """What the sizing (``fit_sizes``) and the checks read of the strategy's window sizes
        under ``config``, in the tokens ``count`` measures (:class:`StrategySizing`: the
        response cap's floor, the rebuilt windows' sizes, the oracle episode's chains of
        windows, the scripted oracle's own compaction decisions); a strategy sized
        differently returns its own subclass."""
        return StrategySizing(self, config, count)

    def words(self, config: CompactionConfig) -> list[str]:
        """The words the runtime itself writes into a window under this strategy (a
        word-level policy's tokenizer must hold them): the summary and resume instructions
        when rebuilt windows carry a summary, and the ``placeholder``."""
        words: list[str] = []
        if self.summary_by is not None:
            words += [*config.summary_instruction.split(), *config.resume_instruction.split()]
        rebuilt = self.rebuild(config)
        if rebuilt is not None and rebuilt.placeholder is not None:
            words += rebuilt.placeholder.split()
        return words

    def check(
        self, config: CompactionConfig, chat: ChatFormat | None = None, system_prompt: str = ""
    ) -> None:
        """Checks of ``config``; raises a one-line ValueError. Without a chat format, those
        that need none; with one (``config`` sized, ``system_prompt`` the env's), also:

        - ``threshold >= |q_sum| + max_summary_tokens + |assistant header| + 1``, so that
          whenever a response is allowed at least one token of it fits;
        - the smallest rebuilt window (:meth:`StrategySizing.rebuilt_floor`) is not full.
        """
        summary, threshold = config.max_summary_tokens, config.threshold
        sized = summary is not None and threshold is not None
        if sized and self.summary_by is not None and summary >= threshold:  # type: ignore[operator]
            raise ValueError(
                f"max_summary_tokens ({summary}) must be < threshold ({threshold}) so that "
                "q_sum and the summary fit: lower --compaction.max_summary_tokens or raise "
                "--compaction.threshold"
            )
        if chat is not None:
            check_sized(self, config, chat, system_prompt)

    # -- what the next context is ---------------------------------------------------
    def rebuild(self, config: CompactionConfig) -> RebuiltWindow | None:
        """What a full window is rebuilt as under ``config`` (:class:`RebuiltWindow`: what it
        holds before its steps, the steps it copies, each verbatim or masked by its
        ``placeholder``); None: a full window is never rebuilt, the episode ends, truncated
        and failed (the default)."""
        return None

    # -- what it records ------------------------------------------------------------
    def segments(self, config: CompactionConfig) -> SegmentRecorder:
        """What it records under ``config`` (:class:`SegmentRecorder`): the segment a closed
        window yields, the one a summary yields, and a rollout's segments once its episode
        ended. By default each window with a sampled token, as an execution segment; no
        summary segment; the segments unchanged."""
        return SegmentRecorder(config)

    # -- agents ---------------------------------------------------------------------
    def scripted_agents(
        self,
        env_id: str,
        chat: ChatFormat,
        options: ScriptedOptions = ScriptedOptions(),
        config: CompactionConfig | None = None,
    ) -> RolloutAgents:
        """The scripted oracle under this strategy (``options.oracle``: the environment's
        oracle, grounded in its context, with the scripted summarizer dropping each needed
        fact with ``options.omission_rate``): its rollouts are demonstrations. Given a sized
        ``config`` (what the pre-flight, ``cxsim sft`` and ``cxsim eval`` play), a strategy
        whose scripted oracle reads the sizes (its own decisions: compacting, branching,
        noting) wraps the oracle in them; without one, the oracle alone. By default the
        oracle, with or without."""
        return RolloutAgents(options.oracle(env_id, chat))


def check_counts(**counts: int) -> None:
    """Raises ValueError naming the first of ``counts`` that is not an integer >= 1 (a bool
    is not): a strategy's own settings, checked where it is made."""
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} ({value!r}) must be an integer >= 1")


def check_sized(
    strategy: ContextStrategy, config: CompactionConfig, chat: ChatFormat, system_prompt: str
) -> None:
    """The checks of a sized ``config`` under ``strategy`` that need a chat format
    (:meth:`ContextStrategy.check`)."""
    header = len(chat.assistant_prefix())
    plan = strategy.summary(config)
    q_sum, summary = len(plan.prompt(chat)), plan.max_tokens
    need = q_sum + summary + header + 1
    assert config.threshold is not None and config.budget is not None
    if config.threshold < need:
        raise ValueError(
            f"threshold ({config.threshold}) must be >= |q_sum| ({q_sum}) + max_summary_tokens "
            f"({summary}) + assistant header ({header}) + 1 = {need}: raise "
            "--compaction.threshold or lower --compaction.max_summary_tokens"
        )
    if strategy.rebuild(config) is None:
        return
    sizing = strategy.sizing(config, _chat_count(chat))
    rebuilt = sizing.rebuilt_floor(len(chat.system(system_prompt)))
    if config.full(rebuilt):
        raise ValueError(
            f"budget ({config.budget}) is too small for a rebuilt window: system prompt and "
            f"resume turn with a full summary take {rebuilt} tokens, leaving "
            f"{config.budget - rebuilt} < threshold ({config.threshold}); raise "
            "--compaction.budget or lower --compaction.threshold / max_summary_tokens"
        )


def _chat_count(chat: ChatFormat) -> TokenCount:
    def count(piece: str, *texts: str) -> int:
        return len(getattr(chat, piece)(*texts))

    return count
