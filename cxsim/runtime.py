"""Batched compaction runtime: N environments in lockstep, recorded as segments.

docs/method.md sections 1-2. The runtime holds no protocol of its own: the config's
context strategy (``CompactionConfig.strategy``, ``cxsim.strategies``) decides when a row
acts, summarizes, rebuilds its window or ends, what the rebuilt window holds, who writes a
summary and which segments a window or a summary yields. Each row (one environment, one episode) keeps its
working window ``h_t = (s, u, z_1, ..., z_t)``; a step ``z_i`` is the assistant
header, the response ``a_i`` and the observation ``o_i`` it caused, and is never
split. Every loop iteration asks each live row for one turn, so one call to the
agent serves all rows (acting and summarizing rows together).

Decisions the paper leaves open, made here (each row's state machine,
``cxsim.row_runner``, makes them by asking the strategy):

- **Room for the summary.** While a compaction is left (the strategy's
  ``summary(config).kept_free``), responses and
  observations never use the last ``|q_sum| + max_summary_tokens`` tokens of the
  budget, so the summary prompt plus the summary always fits in C.
- **Response cap.** ``min(max_response_tokens, C - |h_t| - |header| - reserve)``;
  at least 1 because a response is only asked for when ``C - |h_t| >= T_comp``
  and ``CompactionConfig.validate`` checks ``T_comp`` against the reserve.
- **An observation that does not fit** (``|h_t| + |o| > C - reserve``) ends the
  episode truncated and failed (``end_reason="observation_overflow"``): a step is
  atomic and cannot be split across windows. Choose ``T_comp`` at least the
  reserve + header + response cap + the longest observation to rule this out.
  An observation after which the environment terminated is not needed for any
  further response; it is kept in the window only when it fits in C.
- **Rewards, where they happen.** The reward of the step that ended the episode
  (terminated or truncated by the environment) is the terminal reward ``R``: every
  recorded segment carries it (``Segment.reward``; the estimators put it at each
  segment's last trainable token, as the method does). Every other step's reward is
  a step reward, at the last token of the response that earned it
  (``Segment.step_rewards``), in that window only. An episode the runtime ends
  (``window_full``, ``max_turns``, ``observation_overflow``) has ``R = 0``: it never
  reaches the success reward. ``RolloutRecord.reward`` is the episode's return (all
  rewards summed). ``success`` is the environment's ``info["success"]`` at the end
  when it provides one (else: terminated with ``R > 0``), False when the runtime ended it.
- **Episode ends.** The last recorded segment of a rollout carries its end reason
  (``Segment.end``); earlier segments carry ``none``: a compaction ends nothing.
- **Ground truth is optional.** Summary recall is measured when the environment
  has a ``summary_recall(summary, info)`` method, or else provides cxsim's
  ``key_facts`` and ``needed_facts`` info keys; otherwise it is simply not recorded.
  Which facts a summary states a value for, right or wrong, is recorded when the
  environment has a ``summary_stated(summary, info)`` method; each needed fact's type
  when a summary is written, when it has a ``fact_types(info)`` method.
- **Recorded segments.** Execution windows with no token generated in them are
  not recorded (they carry no training signal); summary segments are recorded
  only when the acting policy wrote the summary (a summary another agent wrote is
  not the policy's action). Segment indices count the recorded segments in time order.
- **Rebuilds without a summary** count as compactions (``max_compactions`` bounds what
  the strategy's trigger and the policy's requests may ask: ``CompactionConfig.compactions_left``).
- **Compaction requests.** A response the strategy reads as the policy's request to
  compact (a ``compact`` move, its row state's ``response_move``) is not sent to the
  environment while a compaction is left: its tokens stay in the window (trainable, a turn)
  and the strategy's trigger sees ``asked`` before the next response.
- **Masked steps.** A strategy may copy a step into a rebuilt window with its observation
  turn replaced by its ``placeholder`` text (its ``rebuild``'s ``steps``); the step's header and
  response stay verbatim.
- **A summary written by another agent** (the strategy's ``summary_by``) is asked for
  with the whole summary prompt and ``reset=True``: that agent holds none of the row.
- **What a strategy keeps of a row** is its own (``row_state``: one ``RowState`` per row,
  made when the episode starts): the runtime's row holds only what every strategy shares,
  hands that state back to the strategy's decisions and tells it of each move it executes
  (``act``, ``compact``, ``branch``, ``return``, ``note``: a closed set, with ``end``).
- **Child windows.** A response the strategy reads as opening a child window
  (a ``branch`` move) closes the row's window as a segment, gives it to the row state to
  keep aside (``RowState.branch``; folding's ``FoldingRow``) and starts a child window
  (system prompt, task, the branching response); one read as returning (``return``) has
  the policy summarize the child (``h + q_sum``, as for a compaction; the strategy's
  ``turn_trigger`` asks for it), records it and resumes the parent the row state gives back
  (``RowState.resume``), whose branching response gets the
  summary as its observation turn: one step. Neither steps the environment; both count as
  turns. A returned summary counts among the rollout's summaries, not its compactions; a
  parent without room for it (``|h| + |turn| > C - reserve``) ends the episode
  (``observation_overflow``).
- **Notes.** A response the strategy keeps as a note (a ``note`` move) steps no
  environment and counts as a turn; its tokens stay in the window, trainable, and the row
  state is told where (``RowState.moved``; memory-notes' ``NotesRow`` records a ``Note``: its
  text, the environment steps before it, the window segment and tokens it was written at).
  A rebuilt window carries what the strategy makes of its row state (its ``rebuild``'s
  ``prefix``, given the row state: after the prefix, untrainable), and once the episode
  ended the strategy may rearrange the rollout's segments (its ``segments``' ``finished``,
  given the row state and the response whose step terminated the episode).
- **Segment parents.** Each recorded segment names the one its window continues from
  (``Segment.parent``): the previous one, except that a child window and its parent's
  continuation both name the window that opened the child (a tree,
  ``cxsim.advantages``, "Segment trees").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

import cxsim.envs  # noqa: F401  (registers the cxsim/* environment ids)
from cxsim.agent_api import Agent, TurnRequest
from cxsim.agents.chat import ChatFormat, WordChatFormat
from cxsim.compaction import CompactionConfig
from cxsim.envs.family import declared_words
from cxsim.rollout_records import RolloutRecord, fact_types_hook, recall_hook, stated_hook
from cxsim.row_runner import Row, RowRunner
from cxsim.segments import Segment

__all__ = ["CompactionConfig", "RolloutBatch", "collect_rollouts"]


def check_text_env(env: gym.Env, env_id: str) -> None:
    """Raises ValueError unless the env observes and acts in text (``gymnasium.spaces.Text``)."""
    for name in ("observation_space", "action_space"):
        space = getattr(env, name, None)
        if not isinstance(space, gym.spaces.Text):
            raise ValueError(
                f"environment {env_id!r} has {name} {space!r}; cxsim needs gymnasium.spaces.Text "
                "observations and actions (text in, text out)"
            )


def env_system_prompt(env: gym.Env) -> str:
    """The env's ``system_prompt`` attribute (cxsim's envs have one), else empty."""
    return str(getattr(env.unwrapped, "system_prompt", ""))


def check_env_words(
    env: gym.Env, env_id: str, system_prompt: str, config: CompactionConfig, chat: ChatFormat
) -> None:
    """Before any rollout: a word-level policy must have every word the env declares
    (``cxsim.envs.family.declared_words``: its ``vocabulary()`` when it has one, its family's
    words), its system prompt and the compaction instructions, else a ValueError names the
    missing ones. Tasks and observations are checked as they arrive
    (``WordChatFormat.encode``); a BPE tokenizer has no unknown words."""
    if not isinstance(chat, WordChatFormat):
        return
    words = [*declared_words(env), *system_prompt.split(), *config.strategy.words(config)]
    where = (
        f"environment {env_id!r} (its vocabulary(), system prompt, family's words) or the "
        "compaction instructions"
    )
    chat.check_words(words, where)


@dataclass
class RolloutBatch:
    segments: list[Segment]
    """All segments of all rollouts; each rollout's in time order."""
    records: list[RolloutRecord]
    """One record per seed, in the order of the seeds."""


def collect_rollouts(
    env_id: str,
    env_kwargs: dict[str, Any],
    agent: Agent,
    config: CompactionConfig,
    seeds: Sequence[int],
    chat: ChatFormat,
    summarizer_agent: Agent | None = None,
    rollout_id_start: int = 0,
    group_ids: Sequence[int] | None = None,
) -> RolloutBatch:
    """Run one episode per seed, all in lockstep, under ``config``'s context strategy.

    Rows are keyed by rollout id (``rollout_id_start + i`` for the i-th seed), which
    is also the ``row`` of every request. ``summarizer_agent`` writes the summaries when
    the strategy has another agent write them (``summary_by="summarizer"``: required then,
    unused otherwise). ``group_ids`` (one per seed) tags rollouts of the same task for
    group estimators.
    """
    if config.strategy.summary_by == "summarizer" and summarizer_agent is None:
        raise ValueError(f"protocol {config.protocol!r} needs a summarizer_agent")
    if group_ids is not None and len(group_ids) != len(seeds):
        raise ValueError(f"group_ids has {len(group_ids)} entries for {len(seeds)} seeds")
    envs = [gym.make(env_id, **env_kwargs) for _ in seeds]
    check_text_env(envs[0], env_id)
    system_prompt = env_system_prompt(envs[0])
    check_env_words(envs[0], env_id, system_prompt, config, chat)
    config.validate(chat, system_prompt)
    hooks = recall_hook(envs[0]), stated_hook(envs[0]), fact_types_hook(envs[0])
    runner = RowRunner(config, chat, system_prompt, *hooks)
    rows: list[Row] = []
    for i, (env, seed) in enumerate(zip(envs, seeds, strict=True)):
        task_text, info = env.reset(seed=seed)
        task = chat.task(task_text)
        row = Row(
            env=env, slot=i, seed=seed, rollout_id=rollout_id_start + i,
            group_id=-1 if group_ids is None else group_ids[i], info=info, task=task,
            state=config.strategy.row_state(config),
        )  # fmt: skip
        row.extend(runner.system + task)
        row.transcript += [f"[system] {system_prompt}", f"[task] {task_text}"]
        rows.append(row)

    _lockstep(runner, rows, (agent, summarizer_agent))
    for env in envs:
        env.close()
    records = [runner.finish(row) for row in rows]
    return RolloutBatch(segments=[seg for row in rows for seg in row.segments], records=records)


def _lockstep(runner: RowRunner, rows: list[Row], agents: tuple[Agent, Agent | None]) -> None:
    """Until every row's episode ends: each live row's next request, then one ``respond``
    call per agent (the acting agent first) for the requests the strategy routes to it."""
    live = list(rows)
    while live:
        batches: tuple[list[tuple[Row, TurnRequest]], ...] = ([], [])
        for row in live:
            request = runner.next_request(row)
            if request is not None:
                batches[runner.author(request)].append((row, request))
        for batch, who in zip(batches, agents, strict=True):
            if not batch:
                continue
            assert who is not None  # checked above: a strategy that needs a summarizer has one
            responses = who.respond([request for _, request in batch])
            if len(responses) != len(batch):
                raise RuntimeError(f"agent answered {len(responses)} of {len(batch)} requests")
            for (row, request), response in zip(batch, responses, strict=True):
                runner.apply(row, request, response)
        live = [row for row in live if row.end_reason is None]
