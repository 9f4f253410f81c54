"""The per-row state machine of ``collect_rollouts`` (``cxsim.runtime``): one row's episode
state and window (:class:`Row`: what every strategy shares, and what its strategy keeps of it,
its ``RowState``) and what the runtime does with it (:class:`RowRunner`: the row's next
request, how a response or a summary changes its window, how a window is closed, rebuilt,
branched (the window set aside, :class:`SuspendedWindow`, which the strategy's row state
keeps) and returned from, and the record it ends as). The moves it executes are a closed set:
``act``, ``compact``, ``branch``, ``return``, ``note`` (``ResponseMove``) and ``end``.

The runtime's protocol decisions (``cxsim.runtime``'s docstring, "Decisions the paper leaves
open") are made here, each by asking the config's context strategy (``cxsim.strategies``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym

from cxsim.agent_api import TurnRequest, TurnResponse
from cxsim.agents.chat import ChatFormat
from cxsim.compaction import CompactionConfig
from cxsim.rollout_records import (
    EndReason,
    FactTypesHook,
    RecallHook,
    RolloutRecord,
    StatedHook,
)
from cxsim.segments import EpisodeEnd, Segment
from cxsim.strategies import ResponseMove, RowState, StepCost, TurnState

MOVES = ("compact", "branch", "return", "note")
"""The moves that step no environment (each one turn); any other response is an action."""


@dataclass
class SuspendedWindow:
    """A parent window set aside while its child window runs (what the runtime needs to resume
    it; the strategy's row state keeps it: ``RowState.branch`` / ``resume``)."""

    window: list[int]
    """Its tokens, up to and including the branching response."""
    steps: list[tuple[int, int, int]]
    new_steps: int
    segment: int
    """The segment it was recorded as (the parent of the child and of its continuation)."""
    call_start: int
    """Where the branching step (assistant header, response) starts in ``window``."""


@dataclass
class Row:
    """One environment slot: its episode state and its current window."""

    env: gym.Env
    slot: int
    """Index of the row in this call (the ``row`` of its requests)."""
    seed: int
    rollout_id: int
    group_id: int
    info: dict[str, Any]
    task: list[int]
    state: RowState
    """What the strategy keeps of the row (its ``row_state``): folding's parent windows,
    memory-notes' notes, ..."""
    window: list[int] = field(default_factory=list)
    trainable: list[bool] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    step_rewards: list[float] = field(default_factory=list)
    steps: list[tuple[int, int, int]] = field(default_factory=list)
    """(start, observation start, end) of each complete step in ``window``."""
    new_steps: int = 0
    """Steps taken since the window was built or rebuilt."""
    asked: bool = False
    """The policy's last response asked for a compaction the strategy honours."""
    sent: int = 0
    """Tokens of ``window`` the acting agent has already been given."""
    reset: bool = True
    """The acting agent's next request for this row restarts its context."""
    pending: Literal["act", "summarize"] | None = None
    segments: list[Segment] = field(default_factory=list)
    transcript: list[str] = field(default_factory=list)
    turns: int = 0
    compactions: int = 0
    reward: float = 0.0
    """Sum of the environment's rewards so far."""
    terminal_reward: float = 0.0
    """Reward of the step that ended the episode (0 when the runtime ended it)."""
    summaries: list[str] = field(default_factory=list)
    recalls: list[dict[str, bool]] = field(default_factory=list)
    stated: list[dict[str, bool]] = field(default_factory=list)
    fact_types: list[dict[str, str]] = field(default_factory=list)
    tokens_generated: int = 0
    tokens_prefilled: int = 0
    tokens_summarised: int = 0
    peak_context: int = 0
    model_calls: int = 0
    end_reason: EndReason | None = None
    parent: int = -1
    """Index of the recorded segment the current window continues from (-1: none yet)."""
    final_action: str | None = None
    """The response whose environment step terminated the episode."""

    def extend(
        self, tokens: list[int], trainable: bool = False, logprobs: list[float] | None = None
    ):
        self.window += tokens
        self.trainable += [trainable] * len(tokens)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(tokens)
        self.step_rewards += [0.0] * len(tokens)
        self.peak_context = max(self.peak_context, len(self.window))


class RowRunner:
    """The per-row state machine of one ``collect_rollouts`` call; every protocol decision
    is the strategy's (``cxsim.strategies``)."""

    def __init__(
        self,
        config: CompactionConfig,
        chat: ChatFormat,
        system_prompt: str,
        recall: RecallHook | None = None,
        stated: StatedHook | None = None,
        types: FactTypesHook | None = None,
    ):
        self.config = config
        self.strategy = config.strategy
        self.recall = recall
        self.stated = stated
        self.types = types
        self.chat = chat
        self.system = chat.system(system_prompt)
        self.header = chat.assistant_prefix()
        self.summary = self.strategy.summary(config)
        self.recorder = self.strategy.segments(config)
        self.q_sum = self.summary.prompt(chat)
        self.reserve = config.summary_reserve(chat)
        self.rebuilt = self.strategy.rebuild(config)
        """What a full window is rebuilt as (None: never)."""
        placeholder = None if self.rebuilt is None else self.rebuilt.placeholder
        self.masked = None if placeholder is None else chat.observation(placeholder)
        """The observation turn of a masked step (None: the strategy masks none)."""

    def reserved(self, row: Row) -> int:
        """The summary reserve, while the strategy keeps it (by default while the row may
        still compact), else 0."""
        return self.reserve if self.summary.kept_free(self.turn(row)) else 0

    @staticmethod
    def turn(row: Row) -> TurnState:
        return TurnState(
            len(row.window), row.compactions, row.new_steps, row.asked, row.seed, row.state
        )

    def author(self, request: TurnRequest) -> int:
        """Who answers ``request``: 0 the acting agent, 1 the summarizer agent."""
        return int(request.kind == "summarize" and self.strategy.summary_by != "policy")

    # -- deciding the next turn ------------------------------------------
    def next_request(self, row: Row) -> TurnRequest | None:
        """The row's next request, or None when the row's episode ended here."""
        cfg = self.config
        if row.turns >= cfg.max_turns:
            return self.end(row, "max_turns")
        trigger = self.strategy.turn_trigger(cfg, self.turn(row))
        if trigger == "end":
            return self.end(row, "window_full")
        if trigger == "rebuild":
            self.close_window(row)
            self.rebuild(row, summary=None)
            return None if row.end_reason else self.next_request(row)
        if trigger == "summarize":
            return self.summary_request(row)
        row.extend(self.header)
        cap = min(cfg.max_response_tokens, cfg.budget - len(row.window) - self.reserved(row))
        row.pending = "act"
        return self.request(row, "act", row.window[row.sent :], row.reset, cap)

    def summary_request(self, row: Row) -> TurnRequest:
        """The acting agent continues the row's context; another agent holds none of it and
        is given the whole summary prompt."""
        row.pending = "summarize"
        prompt = row.window + self.q_sum
        if self.strategy.summary_by == "policy":
            append, reset = prompt[row.sent :], row.reset
        else:
            append, reset = prompt, True
        return self.request(row, "summarize", append, reset, self.config.max_summary_tokens)

    def request(
        self, row: Row, kind: Literal["act", "summarize"], append: list[int], reset: bool, cap: int
    ) -> TurnRequest:
        return TurnRequest(
            row=row.slot, kind=kind, append=append, reset=reset, max_new_tokens=cap,
            context_text=self.chat.decode(row.window), info=row.info, depth=row.state.depth,
        )  # fmt: skip

    # -- applying responses ----------------------------------------------
    def apply(self, row: Row, request: TurnRequest, response: TurnResponse) -> None:
        row.tokens_prefilled += len(request.append)
        row.tokens_generated += len(response.token_ids)
        row.model_calls += 1
        row.pending = None
        if request.kind == "summarize":
            self.apply_summary(row, response)
        else:
            self.apply_action(row, response)

    def apply_action(self, row: Row, response: TurnResponse) -> None:
        step_start = len(row.window) - len(self.header)
        row.extend(response.token_ids, trainable=True, logprobs=list(response.logprobs))
        observation_start = len(row.window)
        row.sent, row.reset = len(row.window), False
        row.transcript.append(
            f"[assistant] {response.text}" + ("" if response.finished else " ...")
        )
        move = row.state.response_move(self.chat, response.text, self.turn(row))
        if move.kind not in MOVES or (
            move.kind == "compact" and not self.config.compactions_left(row.compactions)
        ):
            move = ResponseMove()  # an action (a request to compact with none left is one)
        start = observation_start - len(response.token_ids)
        if move.kind != "act":  # no environment step, a turn
            row.turns += 1
            row.state.moved(move, start, observation_start)
            if move.kind == "branch":
                self.open_child(row, step_start)
            elif move.kind == "compact":
                row.asked = True  # the policy's decision to compact
            return
        obs, reward, terminated, truncated, info = row.env.step(response.text)
        row.turns += 1
        row.state.moved(move, start, observation_start)
        row.reward += float(reward)
        row.info = info
        row.transcript.append(f"[observation] {obs}")
        obs_ids = self.chat.observation(obs)
        if terminated or truncated:
            row.terminal_reward = float(reward)
            row.final_action = response.text if terminated else None
            if len(row.window) + len(obs_ids) <= self.config.budget:
                row.extend(obs_ids)
            self.end(row, "terminated" if terminated else "env_truncated")
            return
        if response.token_ids:  # the step's reward, at the last token of its response
            row.step_rewards[len(row.window) - 1] += float(reward)
        if len(row.window) + len(obs_ids) > self.config.budget - self.reserved(row):
            self.end(row, "observation_overflow")
            return
        row.extend(obs_ids)
        row.steps.append((step_start, observation_start, len(row.window)))
        row.new_steps += 1

    def apply_summary(self, row: Row, response: TurnResponse) -> None:
        """Closes the window, records what the strategy makes of the summary, rebuilds."""
        ids = list(response.token_ids)
        prompt = row.window + self.q_sum
        row.peak_context = max(row.peak_context, len(prompt) + len(ids))
        row.tokens_summarised += len(ids)
        self.close_window(row)
        segment = self.recorder.summary(
            prompt, ids, list(response.logprobs), row.rollout_id, len(row.segments)
        )
        if segment is not None:
            self.record(row, segment)
        row.summaries.append(response.text)
        recall = self.recall(response.text, row.info) if self.recall else None
        if recall is not None:
            row.recalls.append(recall)
            if self.types is not None:
                row.fact_types.append(self.types(row.info))
        if self.stated is not None:
            row.stated.append(self.stated(response.text, row.info))
        row.transcript.append(f"[summary {len(row.summaries)}] {response.text}")
        parent = row.state.resume()  # the summary of a child window (return), else None
        if parent is not None:
            self.close_child(row, parent, response.text)
        else:
            self.rebuild(row, summary=response.text)

    # -- windows -----------------------------------------------------------
    def close_window(self, row: Row) -> None:
        """Record the current window as the segment the strategy makes of it (if any)."""
        segment = self.recorder.window(
            row.window, row.trainable, row.logprobs, row.step_rewards,
            row.rollout_id, len(row.segments),
        )  # fmt: skip
        if segment is not None:
            self.record(row, segment)
        row.state.recorded(-1 if segment is None else segment.segment_index)

    @staticmethod
    def record(row: Row, segment: Segment) -> None:
        """Append ``segment`` to the row's segments, its parent the segment the window
        continues from; the next one continues from it."""
        segment.parent = row.parent
        row.segments.append(segment)
        row.parent = segment.segment_index

    @staticmethod
    def clear_window(row: Row) -> None:
        """An empty window the acting agent starts afresh."""
        row.window, row.trainable, row.logprobs, row.steps = [], [], [], []
        row.step_rewards = []
        row.sent, row.reset, row.new_steps, row.asked = 0, True, 0, False

    def open_child(self, row: Row, call_start: int) -> None:
        """The response at ``call_start`` opened a child window: the window is recorded and
        kept aside, and the child starts from the system prompt, the task and the branching
        response (untrainable); the strategy's row state keeps the window aside."""
        call = row.window[call_start:]
        self.close_window(row)
        parent = SuspendedWindow(
            list(row.window), list(row.steps), row.new_steps, row.parent, call_start
        )
        row.state.branch(parent)
        self.clear_window(row)
        row.extend([*self.system, *row.task, *call])
        row.transcript.append(f"== branch {row.state.branches} (depth {row.state.depth}) ==")

    def close_child(self, row: Row, parent: SuspendedWindow, summary: str) -> None:
        """The child window (recorded) returned ``summary``: its ``parent`` (the row state's
        ``resume``) resumes, untrainable up to its branching response, which gets ``summary``
        as its observation turn."""
        self.clear_window(row)
        row.parent = parent.segment
        row.extend(parent.window)
        row.steps, row.new_steps = parent.steps, parent.new_steps
        turn = self.chat.observation(summary)
        row.transcript.append(f"== return (depth {row.state.depth}) ==")
        if len(row.window) + len(turn) > self.config.budget - self.reserved(row):
            self.end(row, "observation_overflow")
            return
        observation = len(row.window)
        row.extend(turn)
        row.steps.append((parent.call_start, observation, len(row.window)))
        row.new_steps += 1

    def rebuild(self, row: Row, summary: str | None) -> None:
        """Replace the (closed) window by the strategy's rebuilt window (``rebuild``): its
        prefix + the steps it keeps (by default the last k, k lowered until it is not full),
        each verbatim or with its observation masked."""
        rebuilt = self.rebuilt
        if rebuilt is None:
            raise ValueError(
                f"context strategy {self.config.protocol!r} rebuilt a window but its rebuild "
                "is None: return a RebuiltWindow from rebuild, or never trigger one"
            )
        base = rebuilt.prefix(self.chat, self.system, row.task, summary, row.state)
        old, steps = row.window, row.steps
        costs = [self.step_cost(start, observation, end) for start, observation, end in steps]
        kept = rebuilt.steps(len(base), costs)
        row.compactions += 1
        self.clear_window(row)
        row.extend(base)
        if kept is None:
            # No choice of steps leaves room (e.g. a long task kept with keep_task).
            self.end(row, "window_full")
            return
        for index, masked in kept:
            start, observation, end = steps[index]
            new_start = len(row.window)
            row.extend(old[start:observation])
            new_observation = len(row.window)
            row.extend(self.masked_turn() if masked else old[observation:end])
            row.steps.append((new_start, new_observation, len(row.window)))
        masked = sum(masked for _, masked in kept)
        suffix = f", {masked} masked" if masked else ""
        row.transcript.append(
            f"== window {row.compactions + 1} (kept {len(kept)} steps{suffix}) =="
        )

    def step_cost(self, start: int, observation: int, end: int) -> StepCost:
        """A step's tokens verbatim and with its observation turn masked."""
        masked = end - start if self.masked is None else observation - start + len(self.masked)
        return StepCost(end - start, masked)

    def masked_turn(self) -> list[int]:
        if self.masked is None:
            raise ValueError(
                f"context strategy {self.config.protocol!r} masked an observation but has no "
                "placeholder: set its RebuiltWindow's placeholder"
            )
        return self.masked

    def end(self, row: Row, reason: EndReason) -> None:
        row.end_reason = reason
        if reason not in ("terminated", "env_truncated"):
            row.transcript.append(f"== truncated: {reason} ==")
        return None

    def finish(self, row: Row) -> RolloutRecord:
        self.close_window(row)
        row.segments = self.recorder.finished(row.segments, row.state, row.final_action)
        end: EpisodeEnd = row.end_reason or "max_turns"
        for seg in row.segments:
            seg.reward = row.terminal_reward
            seg.group_id = row.group_id
        if row.segments:
            row.segments[-1].end = end
        terminated = row.end_reason == "terminated"
        solved = row.info.get("success", row.terminal_reward > 0)
        return RolloutRecord(
            rollout_id=row.rollout_id,
            seed=row.seed,
            success=bool(solved) and terminated,
            reward=row.reward,
            terminated=terminated,
            truncated=not terminated,
            end_reason=end,
            turns=row.turns,
            compactions=row.compactions,
            summaries=row.summaries,
            summary_recall=row.recalls,
            tokens_generated=row.tokens_generated,
            tokens_prefilled=row.tokens_prefilled,
            tokens_summarised=row.tokens_summarised,
            peak_context=row.peak_context,
            group_id=row.group_id,
            transcript="\n".join(row.transcript),
            model_calls=row.model_calls,
            branches=row.state.branches,
            summary_stated=row.stated,
            summary_fact_types=row.fact_types,
        )
