"""``folding``: the policy opens child windows for sub-tasks and folds each into a summary.

At any turn the policy may answer :data:`BRANCH_WORD` followed by a goal (``find the bug``;
both words every cxsim tokenizer holds: ``cxsim.envs.vocab``) instead of an action: the
runtime records its window as a segment, keeps it aside and opens a **child window**
``(s) + (u) +`` that branching response, in which the policy acts on the environment as
usual. When the policy answers :data:`RETURN_WORD` (``return``) in a child window, it is
given the child ``h + q_sum`` and writes the child's summary S (at most
``max_summary_tokens``, as a compaction's summary); the child is recorded and closed, and
the parent window resumes where it branched, its branching response followed by an
observation turn with S: the whole child costs the parent one step. Neither response
steps the environment; both are turns (``max_turns``). What folding keeps of a row is its
own (:class:`FoldingRow`, its ``row_state``): the parent windows the runtime sets aside,
their depth, the branches opened and whether a return's summary comes next; the runtime's
row holds none of it.

Bounds (``Folding(max_depth, max_branches)``, validated): child windows nest at most
``max_depth`` deep and at most ``max_branches`` open per episode; a branching response
beyond them, or in a window without room for the returned turn and the summary reserve, is
not honoured and reaches the environment as an action (as does ``return`` outside a child
window). The threshold compaction stays the hard fallback in every window, parent or
child, as under ``compacted``; the summary reserve stays free in a child window even with
no compaction left, so a return always has room for its summary.

**Segments: a tree.** The window that branched is a segment ending with its branching
response; the child window (its responses, ``return`` included) and the child's summary
(``h + q_sum + S``, trainable on S) follow it, then the parent's continuation, whose
window repeats the parent's tokens up to the branching response as untrainable prompt.
Each segment names its parent (``Segment.parent``): the child window and the continuation
both name the window that branched, every other segment the one before it. Trainable: what
the policy wrote (its actions, the branching response and ``return``, summaries); never the
environment's observations, the copied parent prefix or the returned turn. Estimators that
look across segments follow the tree's paths (``cxsim.advantages``, "Segment trees"): the
parent's path goes on through its continuation, the child's ends at its summary, which is
credited with the rollout's outcome.

**Scripted oracle** (``scripted_agents`` for a sized config: :class:`FoldingOracle`, below,
around the usual oracle): explore in a child window, commit in the root. Before the
episode's first action, unless that action already commits, it branches with its
family's goal (``EnvFamily.goal``, declared with the env: ``cxsim.envs.family``); in the
child it acts as the oracle does until the oracle's next action would commit to a solution
(its first word one of the family's ``EnvFamily.commits``: ``answer``, ``edit``,
``submit``), then returns; the parent then finishes from the returned summary. SimRepo:
the child lists the files, runs the tests, views the bug and lists the patches, and returns
where the bug is and which patch fixes it; the root edits, re-tests and submits.
KeyRecall / FactUpdate: the child walks the corridor up to the question and returns the
(latest) values; the root answers. An environment with sub-tasks (its state has ``subtask``:
FactTrail's gates) has each sub-task folded instead (:meth:`Folding.subtask_move`): the
root branches with the sub-task's goal where it opens, the child finishes it and returns, so
its detail stays in the child. The sizing (``fit_sizes``) replays the episode unfolded
(the windows the oracle's child and root hold are each at most the unfolded window plus the
branching response and the returned turn), and the pre-flight checks that the oracle solves
the tasks at the derived sizes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cxsim.agent_api import TurnResponse
from cxsim.strategies.base import check_counts
from cxsim.strategies.compacted import Compacted
from cxsim.strategies.parts import RowState, SummaryPlan
from cxsim.strategies.rollout_agents import RolloutAgents, ScriptedOptions
from cxsim.strategies.sizing import StrategySizing
from cxsim.strategies.strategy_types import (
    ResponseMove,
    StepCost,
    TokenCount,
    Trigger,
    TurnState,
)

if TYPE_CHECKING:
    from cxsim.agent_api import Agent, TurnRequest
    from cxsim.agents.chat import ChatFormat
    from cxsim.compaction import CompactionConfig
    from cxsim.envs.defaults import EpisodeText
    from cxsim.envs.family import EnvFamily

BRANCH_WORD = "find"
"""The first word of a response that opens a child window; the words after it are its goal."""
RETURN_WORD = "return"
"""The response that closes a child window (its summary is asked for next)."""
MAX_DEPTH = 1
"""Child windows nest at most this deep by default."""
MAX_BRANCHES = 4
"""Child windows opened per episode, at most, by default."""


def commits(action: str, words: tuple[str, ...]) -> bool:
    """Whether the oracle's ``action`` commits to a solution: its first word is one of
    ``words`` (its env family's ``commits``); the oracle takes it in the root window."""
    split = action.split()
    return bool(split) and split[0] in words


class Folding(Compacted):
    """The policy branches into child windows and returns a summary from each; a full window
    is compacted as under ``compacted``."""

    name = "folding"
    help = (
        "the policy may answer find <goal> to act in a child window (system prompt, task, "
        "that call) and return to fold it into a summary its parent continues from; a full "
        "window is compacted"
    )

    def __init__(self, max_depth: int = MAX_DEPTH, max_branches: int = MAX_BRANCHES) -> None:
        check_counts(max_depth=max_depth, max_branches=max_branches)
        self.max_depth = max_depth
        self.max_branches = max_branches

    def turn_trigger(self, config: CompactionConfig, turn: TurnState) -> Trigger:
        """The child's summary after a ``return`` (its :class:`FoldingRow`'s ``returning``);
        else compacted's trigger."""
        if isinstance(turn.row, FoldingRow) and turn.row.returning:
            return "summarize"
        return super().turn_trigger(config, turn)

    def row_state(self, config: CompactionConfig) -> FoldingRow:
        """A row that keeps its parent windows while their children run (:class:`FoldingRow`)."""
        return FoldingRow(config, self)

    def return_fits(self, config: CompactionConfig, chat: ChatFormat, length: int) -> bool:
        """Whether a window of ``length`` tokens has room for a returned turn with a summary of
        ``max_summary_tokens`` tokens on top of the summary reserve."""
        assert config.budget is not None and config.max_summary_tokens is not None
        room = len(chat.observation("")) + config.max_summary_tokens  # the returned turn
        return length + room <= config.budget - config.summary_reserve(chat)

    def summary(self, config: CompactionConfig) -> FoldingSummary:
        plan = super().summary(config)
        return FoldingSummary(plan.config, plan.instruction, plan.max_tokens)

    def words(self, config: CompactionConfig) -> list[str]:
        return [*super().words(config), BRANCH_WORD, RETURN_WORD]

    def sizing(self, config: CompactionConfig, count: TokenCount) -> FoldingSizing:
        return FoldingSizing(self, config, count)

    def scripted_move(self, request: TurnRequest, proposed: str, family: EnvFamily) -> str | None:
        """What the scripted oracle answers instead of its ``proposed`` action, if anything:
        the branching call with its env ``family``'s goal before the episode's first action
        (unless it commits), ``return`` in a child before an action that commits (one of the
        family's ``commits``). An environment with sub-tasks (its state has ``subtask``:
        :meth:`subtask_move`) has each of them folded instead."""
        state = request.info.get("state", {})
        committing = commits(proposed, family.commits)
        if "subtask" in state:
            return self.subtask_move(request, committing, state)
        if request.depth > 0:
            return RETURN_WORD if committing else None
        if request.info.get("step") != 0 or committing:
            return None
        return f"{BRANCH_WORD} {family.goal}"

    def subtask_move(self, request: TurnRequest, committing: bool, state: dict) -> str | None:
        """Sub-task folding: in the root, ``find <goal>`` at the step a sub-task opens
        (``state["subtask"]``, its goal words, opened at ``state["subtask_step"]``); in a
        child, ``return`` once no sub-task is open (or before an action that commits:
        ``committing``), so the child's window holds the sub-task's detail and the root only its
        returned summary."""
        if request.depth > 0:
            return RETURN_WORD if state["subtask"] is None or committing else None
        if state["subtask"] is None or request.info.get("step") != state.get("subtask_step"):
            return None
        return f"{BRANCH_WORD} {state['subtask']}"

    def scripted_agents(
        self,
        env_id: str,
        chat: ChatFormat,
        options: ScriptedOptions = ScriptedOptions(),
        config: CompactionConfig | None = None,
    ) -> RolloutAgents:
        """The oracle, exploring in a child window and committing in the root
        (:meth:`scripted_move`, with the goal and the commits of the env's family), given a
        sized ``config``; without one, the oracle alone."""
        from cxsim.envs.family import require_family_of_id

        agents = super().scripted_agents(env_id, chat, options)
        if config is None:
            return agents
        family = require_family_of_id(env_id)

        def move(request: TurnRequest, proposed: str) -> str | None:
            return self.scripted_move(request, proposed, family)

        return RolloutAgents(FoldingOracle(agents.actor, chat, move))


class FoldingRow(RowState):
    """Folding's rows: the parent windows set aside while their child windows run (what the
    runtime needs to resume each, innermost last), the child windows opened so far, and
    whether the last response returned from one (its summary comes next)."""

    def __init__(self, config: CompactionConfig, folding: Folding) -> None:
        super().__init__(config)
        self.folding = folding
        self.parents: list[Any] = []
        """The parent windows of the current one (``branch``), innermost last."""
        self.depth = 0
        self.branches = 0
        self.returning = False
        """The policy's last response returned from the child window: its summary comes next."""

    def response_move(self, chat: ChatFormat, text: str, turn: TurnState) -> ResponseMove:
        """``find ...`` (``branch``) while depth and branches are left and the window keeps
        room for the returned turn; ``return`` in a child window; else an action."""
        words, folding = text.split(), self.folding
        if words == [RETURN_WORD]:
            return ResponseMove("return" if self.depth > 0 else "act")
        if not words or words[0] != BRANCH_WORD:
            return ResponseMove()
        if self.depth >= folding.max_depth or self.branches >= folding.max_branches:
            return ResponseMove()
        fits = folding.return_fits(self.config, chat, turn.length)
        return ResponseMove("branch" if fits else "act")

    def moved(self, move: ResponseMove, start: int, end: int) -> None:
        if move.kind == "return":
            self.returning = True

    def branch(self, parent: Any) -> None:
        self.parents.append(parent)
        self.depth += 1
        self.branches += 1

    def resume(self) -> Any:
        """After a ``return``, the innermost parent window; else None (a compaction's summary)."""
        if not self.returning:
            return None
        self.returning = False
        self.depth -= 1
        return self.parents.pop()


class FoldingSummary(SummaryPlan):
    """Folding's summaries: the reserve stays free while a compaction is left, and always in
    a child window (its return summary)."""

    def kept_free(self, turn: TurnState) -> bool:
        return (turn.row is not None and turn.row.depth > 0) or super().kept_free(turn)


class FoldingSizing(StrategySizing):
    """Folding's sizes: the scripted oracle's child and root windows (:meth:`windows`)."""

    def windows(
        self, first: int, steps: list[StepCost], episode: EpisodeText
    ) -> list[tuple[int, list[StepCost]]]:
        """The scripted oracle's windows: the child (``first`` + the branching call, the steps
        before the first committing action, then ``return``), then the root (the branching
        step with the summary returned before that action, then the rest). The call is
        counted at the response cap; an episode whose first action commits is one window."""
        config, count = self.config, self.count
        actions = episode.actions
        commit = next(
            (i for i, a in enumerate(actions) if commits(a, episode.commits)), len(actions)
        )
        if commit == 0:
            return [(first, steps)]
        assert config.max_response_tokens is not None
        header = count("assistant_prefix")
        call = header + config.max_response_tokens
        if commit == len(actions):  # it never commits: the episode ends in the child
            return [(first + call, steps)]
        back = header + count("encode", RETURN_WORD) + 1
        turn = call + count("observation", episode.summaries[commit])
        child = (first + call, [*steps[:commit], StepCost(back, back)])
        return [child, (first, [StepCost(turn, turn), *steps[commit:]])]


FOLDING = Folding()


class FoldingOracle:
    """A scripted agent that also opens and closes child windows (``folding``): every request
    goes to ``agent``; for an ``act`` request, ``move(request, proposed)`` may replace the
    proposed action's text with another response (the strategy's branching call or its
    return word), which is encoded, ended with ``chat.end_id`` and cut to the request's cap
    (a branching call drops trailing goal words first)."""

    def __init__(
        self,
        agent: Agent,
        chat: ChatFormat,
        move: Callable[[TurnRequest, str], str | None],
    ):
        self.agent = agent
        self.chat = chat
        self.move = move

    def respond(self, requests: list[TurnRequest]) -> list[TurnResponse]:
        responses = self.agent.respond(requests)
        out = []
        for request, response in zip(requests, responses, strict=True):
            text = self.move(request, response.text) if request.kind == "act" else None
            out.append(response if text is None else self.answer(text, request.max_new_tokens))
        return out

    def answer(self, text: str, cap: int) -> TurnResponse:
        words = text.split()
        while len(words) > 1 and len(self.chat.encode(" ".join(words))) + 1 > cap:
            words.pop()  # the goal's last words, so that the call ends within the cap
        ids = [*self.chat.encode(" ".join(words)), self.chat.end_id][:cap]
        return TurnResponse(
            ids, [0.0] * len(ids), self.chat.decode(ids), ids[-1] == self.chat.end_id
        )
