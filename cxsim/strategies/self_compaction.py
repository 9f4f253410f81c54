"""``self-compaction``: the policy decides when to compact; the threshold is a hard fallback.

At any turn the policy may answer :data:`COMPACTION_REQUEST` (``summary``, a word every
cxsim tokenizer holds; any chat format encodes it) instead of an action: while a
compaction is left the runtime does not send it to the environment, and before the next
response the row compacts as under ``compacted`` (the same policy summarizes ``h + q_sum``,
the window is rebuilt around the summary). A window that fills up anyway
(``C - |h| < T_comp``) is compacted as under ``compacted``: the threshold stays a hard
fallback, and the summary reserve stays free while a compaction is left, so the request
always has room.

Trained: the decision is a response like any other, so its tokens (the word and the end
token) are trainable in the window that asked, with the actions; each summary is a summary
segment (trainable on the summary), as under ``compacted``. A window that reaches the
fallback holds no decision: what is trained there is acting on.

**Drawn threshold** (``SelfCompaction(threshold_draw=f)``, registered as
``self-compaction-drawn`` with f = 0.5): each task group's fallback threshold is drawn
once, uniformly in ``[T_comp, T_comp + round(f T_comp)]``, from its task seed (the rows of
a group share it), so that no fixed fill level tells the policy when the window will be
compacted for it; a rebuilt window is held to ``T_comp`` until its first step. The sizing
replays the earliest fallback, ``T_comp + round(f T_comp)``.

**Scripted oracle** (``scripted_agents`` for a sized config: :class:`CompactingOracle`, below,
around the usual oracle): it asks to compact at the first turn after a step at which the
window is within one step of the highest fallback, ``C - |h| < T_hi + (T_comp - reserve)``
(``T_comp - reserve`` is the room the threshold keeps for one step:
assistant header, response, observation), so it compacts slightly before the fallback
would, and its demonstrations teach the decision; the sizing (``fit_sizes``) replays the
same rule (``oracle_compacts``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from cxsim.agent_api import TurnResponse
from cxsim.strategies.compacted import Compacted
from cxsim.strategies.parts import RowState
from cxsim.strategies.rollout_agents import RolloutAgents, ScriptedOptions
from cxsim.strategies.sizing import StrategySizing
from cxsim.strategies.strategy_types import (
    ResponseMove,
    TokenCount,
    Trigger,
    TurnState,
    window_full,
)

if TYPE_CHECKING:
    from cxsim.agent_api import Agent, TurnRequest
    from cxsim.agents.chat import ChatFormat
    from cxsim.compaction import CompactionConfig

COMPACTION_REQUEST = "summary"
"""The response that asks to compact (the word the summary request opens with)."""


class SelfCompaction(Compacted):
    """Compacted, with the compaction decided by the policy (the threshold as a fallback)."""

    name = "self-compaction"
    help = (
        "the policy compacts when it answers summary (a trained decision); a window that "
        "fills up is compacted anyway"
    )

    def __init__(self, threshold_draw: float = 0.0, name: str | None = None) -> None:
        if not 0.0 <= threshold_draw <= 1.0:
            raise ValueError(f"threshold_draw ({threshold_draw}) must lie in [0, 1]")
        self.threshold_draw = threshold_draw
        if name is not None:
            self.name = name
            self.help = (
                f"self-compaction with the fallback threshold drawn per task group in "
                f"[T_comp, {1 + threshold_draw:g} T_comp]"
            )

    def fallback(self, config: CompactionConfig, seed: int | None) -> int:
        """The fallback threshold of a task's rows: ``T_comp`` plus a draw from its seed in
        ``[0, round(threshold_draw T_comp)]``; the highest when ``seed`` is None."""
        assert config.threshold is not None
        spread = round(self.threshold_draw * config.threshold)
        if spread == 0 or seed is None:
            return config.threshold + spread
        return config.threshold + int(np.random.default_rng(seed).integers(spread + 1))

    def turn_trigger(self, config: CompactionConfig, turn: TurnState) -> Trigger:
        """Compact when the policy asked; else the fallback (a rebuilt window is held to
        ``T_comp`` until its first step)."""
        assert config.budget is not None and config.threshold is not None
        left = config.compactions_left(turn.compactions)
        if turn.asked and left:
            return "summarize"
        threshold = self.fallback(config, turn.seed) if turn.new_steps else config.threshold
        if not window_full(config.budget, threshold, turn.length):
            return "act"
        return "summarize" if left else "end"

    def row_state(self, config: CompactionConfig) -> CompactionRequests:
        """A row whose response ``summary`` is the policy's request to compact."""
        return CompactionRequests(config)

    def words(self, config: CompactionConfig) -> list[str]:
        return [*super().words(config), COMPACTION_REQUEST]

    def sizing(self, config: CompactionConfig, count: TokenCount) -> SelfCompactionSizing:
        return SelfCompactionSizing(self, config, count)

    def oracle_compacts(self, config: CompactionConfig, reserve: int, turn: TurnState) -> bool:
        """Whether the scripted oracle asks to compact before its response in ``turn``
        (``reserve``: the summary reserve; the sizing replays it): after a step, once the
        window is within one step of the highest fallback."""
        assert config.budget is not None and config.threshold is not None
        zone = self.fallback(config, None) + config.threshold - reserve
        return turn.new_steps > 0 and window_full(config.budget, zone, turn.length)

    def check(
        self, config: CompactionConfig, chat: ChatFormat | None = None, system_prompt: str = ""
    ) -> None:
        """Also, with a chat format (``config`` sized): the highest drawn threshold is below
        the budget."""
        super().check(config, chat, system_prompt)
        if chat is None:
            return
        highest = self.fallback(config, None)
        assert config.budget is not None
        if highest >= config.budget:
            raise ValueError(
                f"the highest drawn threshold ({highest}) must be < budget ({config.budget}): "
                "raise --compaction.budget or lower the strategy's threshold_draw"
            )

    def scripted_agents(
        self,
        env_id: str,
        chat: ChatFormat,
        options: ScriptedOptions = ScriptedOptions(),
        config: CompactionConfig | None = None,
    ) -> RolloutAgents:
        """The oracle, asking to compact slightly before the fallback (``oracle_compacts``),
        given a sized ``config``; without one, the oracle alone (compacted at the fallback)."""
        agents = super().scripted_agents(env_id, chat, options)
        if config is None:
            return agents
        reserve = config.summary_reserve(chat)

        def asks(turn: TurnState) -> bool:
            return config.compactions_left(turn.compactions) and self.oracle_compacts(
                config, reserve, turn
            )

        return RolloutAgents(CompactingOracle(agents.actor, chat, COMPACTION_REQUEST, asks))


class CompactionRequests(RowState):
    """Self-compaction's rows: nothing kept; ``summary`` is the policy's request to compact."""

    def response_move(self, chat: ChatFormat, text: str, turn: TurnState) -> ResponseMove:
        """``summary`` is the policy's request to compact (``compact``); else an action."""
        return ResponseMove("compact" if text.strip() == COMPACTION_REQUEST else "act")


class SelfCompactionSizing(StrategySizing):
    """Self-compaction's sizes: the scripted oracle's own compaction decisions."""

    strategy: SelfCompaction

    def oracle_compacts(self, reserve: int, turn: TurnState) -> bool:
        return self.strategy.oracle_compacts(self.config, reserve, turn)


SELF_COMPACTION = SelfCompaction()
SELF_COMPACTION_DRAWN = SelfCompaction(threshold_draw=0.5, name="self-compaction-drawn")


class CompactingOracle:
    """A scripted agent that also decides when to compact (``self-compaction``): before an
    ``act`` request for which ``asks(turn)`` holds it answers ``request_text`` (the strategy's
    compaction request) instead of asking ``agent`` for an action; every other request goes
    to ``agent``.

    It follows each row's context from its requests and its own responses, as an LM agent's
    cache does: ``turn`` is the window's length before the assistant header, the compactions
    since the episode began (a window restarted right after a summary request) and the
    actions sent to the environment since the window restarted.
    """

    def __init__(
        self,
        agent: Agent,
        chat: ChatFormat,
        request_text: str,
        asks: Callable[[TurnState], bool],
    ):
        self.agent = agent
        self.chat = chat
        self.request = [*chat.encode(request_text), chat.end_id]
        self.header = len(chat.assistant_prefix())
        self.asks = asks
        self.rows: dict[int, _Followed] = {}

    def respond(self, requests: list[TurnRequest]) -> list[TurnResponse]:
        decided: list[TurnResponse | None] = []
        for request in requests:
            row = self.follow(request)
            turn = TurnState(row.length - self.header, row.compactions, row.new_steps)
            if request.kind == "act" and self.asks(turn):
                ids = self.request[: request.max_new_tokens]
                text = self.chat.decode(ids)
                decided.append(
                    TurnResponse(ids, [0.0] * len(ids), text, ids[-1] == self.chat.end_id)
                )
            else:
                decided.append(None)
        passed = [r for r, d in zip(requests, decided, strict=True) if d is None]
        answers = iter(self.agent.respond(passed) if passed else [])
        responses = [d if d is not None else next(answers) for d in decided]
        for request, response, decision in zip(requests, responses, decided, strict=True):
            row = self.rows[request.row]
            row.length += len(response.token_ids)
            row.new_steps += int(request.kind == "act" and decision is None)
            row.last = request.kind
        return responses

    def follow(self, request: TurnRequest) -> _Followed:
        """The row's state once ``request`` is appended to its context."""
        row = self.rows.setdefault(request.row, _Followed())
        if request.reset:
            row.compactions = row.compactions + 1 if row.last == "summarize" else 0
            row.length = row.new_steps = 0
        row.length += len(request.append)
        return row


@dataclass
class _Followed:
    """What ``CompactingOracle`` knows of one row's context."""

    length: int = 0
    compactions: int = 0
    new_steps: int = 0
    last: str = ""
