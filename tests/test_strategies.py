"""Context strategies: the registry and its plug-ins, the trigger, what each built-in
strategy makes of oracle rollouts (contexts within the budget, trainable tokens, rebuilt
windows), the sizing's replay of each, and the entry points run under any of them."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from dataclasses import replace
from functools import cache
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from cxsim import plugins
from cxsim.agent_api import Agent, TurnRequest, TurnResponse
from cxsim.agents.chat import WordChatFormat
from cxsim.agents.tokenizer import build_tokenizer, default_tokenizer
from cxsim.cli import main as cxsim
from cxsim.compaction import CompactionConfig, _episode_plan, _Measured, fit_sizes
from cxsim.config import DEFAULT_COMPACTION, EnvConfig, EvalConfig, PPOConfig
from cxsim.envs import vocabulary
from cxsim.envs.defaults import EpisodeText, sample_episodes
from cxsim.envs.vocab import OBSERVATION_PLACEHOLDER
from cxsim.evaluation import evaluate_protocol
from cxsim.pipeline.evaluate import Config as EvalCommand
from cxsim.pipeline.train import Config as TrainCommand
from cxsim.preflight import preflight
from cxsim.row_runner import Row
from cxsim.runtime import RolloutBatch, collect_rollouts
from cxsim.segments import Segment
from cxsim.strategies import STRATEGIES, ContextStrategy, RebuiltWindow, ScriptedOptions, TurnState
from cxsim.strategies.memory_state import MEMORY_STATE
from cxsim.strategies.observation_masking import OBSERVATION_MASKING
from cxsim.strategies.self_compaction import (
    COMPACTION_REQUEST,
    SELF_COMPACTION,
    SELF_COMPACTION_DRAWN,
)

ENV = "cxsim/KeyRecall-v0"
LONG = {"memory_length": 20}
"""20 corridor steps: every episode needs several windows."""
CFG = CompactionConfig(max_compactions=8)


@cache
def chat() -> WordChatFormat:
    return WordChatFormat(default_tokenizer())


class FreshStart(ContextStrategy):
    """A full window restarts from the system prompt and the task, keeping no step."""

    name = "fresh-start"
    help = "a full window restarts from the system prompt and the task"

    def rebuild(self, config):
        return FreshWindow(config)


class FreshWindow(RebuiltWindow):
    """The system prompt and the task (the defaults), and no step."""

    def steps(self, prefix, steps):
        return None if self.config.full(prefix) else []


fresh_start = FreshStart()
"""The plug-in: a ``ContextStrategy`` declared outside cxsim."""
PLUGIN = f"{__name__}:fresh_start"


class OldStyle(ContextStrategy):
    """FreshStart written against the members before issue #38."""

    name = "old-style"
    compacts = True

    def rebuilt_steps(self, config, prefix, steps):
        return None if config.full(prefix) else []


old_style = OldStyle()


class OldAgents(ContextStrategy):
    """A scripted_agents written before it took a sized config (issue #38)."""

    name = "old-agents"

    def scripted_agents(self, env_id, chat, options=ScriptedOptions()):
        return super().scripted_agents(env_id, chat, options)


old_agents = OldAgents()


class OldMoves(ContextStrategy):
    """A response_move on the strategy, as before its row state (issue #38)."""

    name = "old-moves"

    def response_move(self, config, chat, text, turn):
        return super().row_state(config).response_move(chat, text, turn)


old_moves = OldMoves()


class Unsure(ContextStrategy):
    name = "unsure"
    summary_by = "nobody"


unsure = Unsure()


def not_a_strategy() -> None:
    """A function where a strategy is expected."""


class Recorder:
    """An agent that passes requests on to ``agent`` and keeps them."""

    def __init__(self, agent: Agent):
        self.agent, self.requests = agent, []

    def respond(self, requests: list[TurnRequest]) -> list[TurnResponse]:
        self.requests += requests
        return self.agent.respond(requests)


def oracle_rollouts(
    protocol: str, seeds=range(6), config: CompactionConfig = CFG
) -> tuple[RolloutBatch, Recorder, Recorder | None]:
    """Scripted oracle rollouts (the strategy's own scripted agents) under ``protocol``, and
    the requests its actor and its summarizer (if any) were given."""
    config = replace(config, protocol=protocol)
    agents = config.strategy.scripted_agents(ENV, chat(), ScriptedOptions(omission_rate=0.5))
    actor = Recorder(agents.actor)
    summarizer = None if agents.summarizer is None else Recorder(agents.summarizer)
    batch = collect_rollouts(ENV, LONG, actor, config, list(seeds), chat(), summarizer)
    return batch, actor, summarizer


def by_rollout(batch: RolloutBatch) -> dict[int, list[Segment]]:
    out: dict[int, list[Segment]] = {}
    for seg in batch.segments:
        out.setdefault(seg.rollout_id, []).append(seg)
    return out


def trainable_runs(seg: Segment) -> list[tuple[int, list[int]]]:
    """(start, tokens) of each maximal run of trainable tokens."""
    runs: list[tuple[int, list[int]]] = []
    for t, (tok, on) in enumerate(zip(seg.token_ids, seg.trainable, strict=True)):
        if on and (t == 0 or not seg.trainable[t - 1]):
            runs.append((t, []))
        if on:
            runs[-1][1].append(tok)
    return runs


# -- the registry ------------------------------------------------------------------------


BUILT_IN = [
    "compacted", "single", "sliding-window", "external-summarizer", "observation-masking",
    "memory-state", "self-compaction", "self-compaction-drawn", "folding", "memory-notes",
]  # fmt: skip


def test_registry_holds_the_built_in_protocols_with_their_properties():
    assert list(STRATEGIES) == BUILT_IN
    table = {  # compacts, summarizes, the policy writes the summary
        "compacted": (True, True, True),
        "single": (False, False, False),
        "sliding-window": (True, False, False),
        "external-summarizer": (True, True, False),
        "observation-masking": (True, False, False),
        "memory-state": (True, True, True),
        "self-compaction": (True, True, True),
        "self-compaction-drawn": (True, True, True),
        "folding": (True, True, True),
        "memory-notes": (True, True, True),
    }
    for name, strategy in STRATEGIES.items():
        assert strategy.name == name and strategy.help
        assert CompactionConfig(protocol=name).strategy is strategy
        rebuilt = strategy.rebuild(CompactionConfig(protocol=name))
        props = (
            rebuilt is not None,
            strategy.summary_by is not None,
            strategy.summary_by == "policy",
        )
        assert props == table[name], name
        config = CompactionConfig(protocol=name)
        assert (config.compacts, config.summarizes) == table[name][:2]
        q_sum = len(chat().summary_request(config.summary_instruction))
        reserve = q_sum + config.max_summary_tokens if config.summarizes else 0
        assert config.summary_reserve(chat()) == reserve
        masks = rebuilt is not None and rebuilt.placeholder is not None
        assert masks == (name == "observation-masking")
        words = set(strategy.words(config))
        assert ("summary" in words) == config.summarizes
        assert ("truncated" in words) == masks


def test_trigger_reads_the_compaction_rule():
    """Not full (``C - |h| >= T_comp``): act; full: the strategy's move, or end once the
    compactions are spent (memory-state's never are, but it summarizes only after a new
    step)."""
    config = CompactionConfig(budget=200, threshold=72, max_compactions=2)
    moves = {
        "compacted": "summarize",
        "single": "end",
        "sliding-window": "rebuild",
        "external-summarizer": "summarize",
        "observation-masking": "rebuild",
        "memory-state": "end",  # a state only after a new step (below)
        "self-compaction": "summarize",
        "self-compaction-drawn": "summarize",
        "folding": "summarize",
        "memory-notes": "summarize",
    }
    for name, strategy in STRATEGIES.items():

        def trigger(length: int, compactions: int, strategy=strategy) -> str:
            return strategy.turn_trigger(config, TurnState(length, compactions, 0))

        assert trigger(200 - 72, compactions=0) == "act"
        assert trigger(200 - 71, compactions=0) == moves[name]
        assert trigger(200 - 71, compactions=1) == moves[name]
        assert trigger(200 - 71, compactions=2) == "end"


def test_memory_state_rewrites_its_state_after_every_step():
    """``turn_trigger`` sees the steps since the window was built: memory-state summarizes
    after any new step, full or not, however many states it wrote; the others decide on the
    window's length alone (self-compaction: below)."""
    config = CompactionConfig(budget=200, threshold=72, max_compactions=2)
    for compactions in (0, 5, 50):
        assert MEMORY_STATE.turn_trigger(config, TurnState(60, compactions, 1)) == "summarize"
        assert MEMORY_STATE.turn_trigger(config, TurnState(60, compactions, 0)) == "act"
        assert MEMORY_STATE.turn_trigger(config, TurnState(129, compactions, 0)) == "end"
        assert MEMORY_STATE.summary(config).kept_free(TurnState(60, compactions, 0))
    for name, strategy in STRATEGIES.items():
        if name == "memory-state" or name.startswith("self-compaction"):
            continue
        for length, compactions, new in ((60, 0, 3), (129, 1, 0), (129, 2, 4)):
            turn = TurnState(length, compactions, new)
            alone = TurnState(length, compactions, 0)  # the length and compactions alone
            assert strategy.turn_trigger(config, turn) == strategy.turn_trigger(config, alone)


def test_a_plugin_strategy_drives_collect_rollouts():
    """``module:name`` names a strategy defined here; the runtime follows its decisions (a
    rebuilt window keeps no step), with no cxsim file changed."""
    config = replace(CFG, protocol=PLUGIN)
    assert config.strategy is fresh_start and PLUGIN in STRATEGIES
    batch, _, _ = oracle_rollouts(PLUGIN, seeds=range(4))
    system = chat().system(batch_system_prompt())
    header = chat().assistant_prefix()
    for rec in batch.records:
        assert rec.success and rec.compactions >= 3 and not rec.summaries
        windows = [line for line in rec.transcript.splitlines() if line.startswith("== window")]
        assert len(windows) == rec.compactions and all("(kept 0 steps)" in w for w in windows)
        task = chat().task(rec.transcript.splitlines()[1].removeprefix("[task] "))
        later = by_rollout(batch)[rec.rollout_id][1:]
        assert later and all(s.role == "execution" for s in later)
        for seg in later:  # system + task, then straight to the first response
            prefix = system + task
            assert seg.token_ids[: len(prefix) + len(header)] == prefix + header
            assert trainable_runs(seg)[0][0] == len(prefix) + len(header)
    # the same rollouts under sliding-window copy steps into the rebuilt windows
    sliding, _, _ = oracle_rollouts("sliding-window", seeds=range(4))
    assert any("(kept 2 steps)" in rec.transcript for rec in sliding.records)


def batch_system_prompt() -> str:
    import gymnasium as gym

    env = gym.make(ENV, **LONG)
    prompt = env.unwrapped.system_prompt
    env.close()
    return prompt


def test_an_installed_plugin_strategy_is_found_by_its_entry_point_name(monkeypatch):
    points = [EntryPoint("fresh-start", PLUGIN, "cxsim.strategies")]
    monkeypatch.setattr(
        plugins, "entry_points", lambda group: points if group == "cxsim.strategies" else []
    )
    monkeypatch.setattr(STRATEGIES, "_from_entry_points", {})
    assert STRATEGIES.choices()[-1] == "fresh-start"
    assert CompactionConfig(protocol="fresh-start").strategy is fresh_start


def test_the_sizing_replays_the_plugin():
    """``fit_sizes`` asks the strategy which steps a rebuilt window keeps: keeping none, the
    same episodes fit a smaller budget than sliding-window's last 2 steps, and the budget
    is the smallest that fits (one less and some episode needs one window too many)."""
    unsized = CompactionConfig(
        budget=None, threshold=None, max_response_tokens=None, max_summary_tokens=None
    )
    episodes = [
        EpisodeText(
            task="the key is k3 .",
            actions=["next"] * (n - 1) + ["answer k3"],
            observations=[" ".join(["the"] * 8)] * n,
            summaries=["summary : the key is k3 ."] * n,
        )
        for n in (14, 18)
    ]
    system = "remember the key ."
    fresh = fit_sizes(replace(unsized, protocol=PLUGIN), chat(), system, episodes)
    sliding = fit_sizes(replace(unsized, protocol="sliding-window"), chat(), system, episodes)
    assert fresh.threshold == sliding.threshold and fresh.budget < sliding.budget
    plans = [
        _episode_plan(fresh, _Measured(chat()), len(chat().system(system)), e) for e in episodes
    ]
    assert all(p.fits(fresh, fresh.budget) for p in plans)
    assert not all(p.fits(fresh, fresh.budget - 1) for p in plans)


@pytest.mark.parametrize(
    ("protocol", "message"),
    [
        (
            "bogus",
            r"^protocol 'bogus' is unknown: set --compaction\.protocol to one of compacted, "
            r"single, sliding-window, external-summarizer, observation-masking, memory-state, "
            r"self-compaction, self-compaction-drawn, folding, memory-notes, or module:name for "
            r"your own context strategy \(docs/training\.md\)$",
        ),
        ("no_such_module_here:strategy", r"^no_such_module_here:strategy: cannot import module "),
        (f"{__name__}:nope", rf"^{__name__}:nope: module '{__name__}' has no 'nope'$"),
        (f"{__name__}:FreshStart", r"is the class FreshStart, not an instance: declare it in "),
        (f"{__name__}:not_a_strategy", r"is a function, not a cxsim\.strategies\.ContextStrategy"),
        (f"{__name__}:unsure", r"declares summary_by='nobody': it must be None or one of "),
        (
            f"{__name__}:old_style",
            r"defines compacts, which ContextStrategy no longer has: "
            r"define rebuild \(None: a full window is never rebuilt\) instead",
        ),
        (f"{__name__}:old_agents", r"old_agents's scripted_agents takes no config: define it "),
        (
            f"{__name__}:old_moves",
            r"defines response_move, which ContextStrategy no longer has: "
            r"define row_state \(its RowState\.response_move\) instead",
        ),
    ],
)
def test_a_bad_protocol_fails_at_config_time_in_one_line(protocol, message):
    with pytest.raises(ValueError, match=message) as info:
        CompactionConfig(protocol=protocol)
    assert "\n" not in str(info.value)


def test_the_documented_example_runs_as_written(tmp_path: Path, monkeypatch):
    """docs/training.md's "Your own context strategy": its module, saved in the working
    folder, is the strategy ``--compaction.protocol fresh_start:fresh_start`` names."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text()
    section = doc[doc.index("## Your own context strategy") :]
    (body,) = re.findall(r"^```python\n(.*?)^```", section, flags=re.S | re.M)
    assert body.startswith("# fresh_start.py,")
    (tmp_path / "fresh_start.py").write_text(body)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "fresh_start", raising=False)
    monkeypatch.chdir(tmp_path)
    batch, _, _ = oracle_rollouts("fresh_start:fresh_start", seeds=range(3))
    assert type(CompactionConfig(protocol="fresh_start:fresh_start").strategy).__name__ == (
        "FreshStart"
    )
    for rec in batch.records:
        assert rec.success and rec.compactions >= 3 and "(kept 0 steps)" in rec.transcript
        assert "(kept 1 steps)" not in rec.transcript and "(kept 2 steps)" not in rec.transcript


def test_a_bad_protocol_flag_is_one_line_from_the_command():
    with pytest.raises(SystemExit) as info:
        cxsim(["eval", "--agent", "oracle", "--compaction.protocol", "sliding"])
    message = str(info.value)
    assert "\n" not in message and "protocol 'sliding' is unknown" in message, message


# -- each built-in strategy on oracle rollouts ---------------------------------------------


def check_rebuilt_windows(protocol: str, batch: RolloutBatch) -> None:
    """Every window after the first starts with the strategy's rebuilt prefix."""
    strategy, config = STRATEGIES[protocol], replace(CFG, protocol=protocol)
    system = chat().system(batch_system_prompt())
    for rec in batch.records:
        task = chat().task(rec.transcript.splitlines()[1].removeprefix("[task] "))
        windows = [s for s in by_rollout(batch)[rec.rollout_id] if s.role == "execution"]
        summaries = rec.summaries or [None] * len(windows)
        for seg, summary in zip(windows[1:], summaries, strict=False):
            prefix = strategy.rebuild(config).prefix(chat(), system, task, summary)
            assert seg.token_ids[: len(prefix)] == prefix


@pytest.mark.parametrize("protocol", BUILT_IN)
def test_contexts_fit_the_budget_and_trainable_tokens_are_the_strategys(protocol):
    strategy = STRATEGIES[protocol]
    batch, actor, summarizer = oracle_rollouts(protocol)
    # who writes the summaries: the acting agent, or another one given the whole prompt
    summaries = sum(len(rec.summaries) for rec in batch.records)
    asked = [r for r in actor.requests if r.kind == "summarize"]
    assert len(asked) == (summaries if strategy.summary_by == "policy" else 0)
    q_sum = strategy.summary(replace(CFG, protocol=protocol)).prompt(chat())
    if strategy.summary_by == "summarizer":
        assert summarizer is not None and len(summarizer.requests) == summaries > 0
        assert all(r.kind == "summarize" and r.reset for r in summarizer.requests)
        asked = summarizer.requests
    else:
        assert summarizer is None
    assert all(r.append[len(r.append) - len(q_sum) :] == q_sum for r in asked)
    header, end = chat().assistant_prefix(), chat().end_id
    for rec in batch.records:
        segs = by_rollout(batch)[rec.rollout_id]
        assert rec.peak_context <= CFG.budget and all(len(s.token_ids) <= CFG.budget for s in segs)
        assert (rec.compactions > 0) == (strategy.rebuild(CFG) is not None)
        assert len(rec.summaries) == (rec.compactions if strategy.summary_by is not None else 0)
        summary_segs = [s for s in segs if s.role == "summary"]
        assert len(summary_segs) == (rec.compactions if strategy.summary_by == "policy" else 0)
        # execution windows: trainable = the oracle's responses, each once, after a header
        responses = [
            line.removeprefix("[assistant] ")
            for line in rec.transcript.splitlines()
            if line.startswith("[assistant] ")
        ]
        runs = [(s, r) for s in segs if s.role == "execution" for r in trainable_runs(s)]
        assert [chat().decode(tokens) for _, (_, tokens) in runs] == responses
        for seg, (start, tokens) in runs:
            assert seg.token_ids[start - len(header) : start] == header and tokens[-1] == end
        # summary segments: the window, q_sum, then the summary, trainable on the summary only
        for k, seg in enumerate(summary_segs):
            window = segs[segs.index(seg) - 1]
            n = len(window.token_ids)
            assert seg.token_ids[: n + len(q_sum)] == window.token_ids + q_sum
            ((start, tokens),) = trainable_runs(seg)
            assert start == n + len(q_sum) and start + len(tokens) == len(seg.token_ids)
            assert chat().decode(tokens) == rec.summaries[k]
    check_rebuilt_windows(protocol, batch)


# -- the strategies beyond the paper's: their windows, their sizing, their tasks ---------------


@cache
def sized(protocol: str) -> CompactionConfig:
    """The pre-flight's sizes for ``protocol`` on the long KeyRecall (derived; the oracle
    solves the task under them)."""
    env = EnvConfig(env_id=ENV, kwargs=dict(LONG))
    return preflight(env, replace(DEFAULT_COMPACTION, protocol=protocol), chat())


FAMILIES = ("cxsim/KeyRecall-v0", "cxsim/FactUpdate-v0", "cxsim/SimRepo-v0")


def episode_lines(rec) -> tuple[list[int], list[str]]:
    """A rollout's task tokens and its transcript lines after the system prompt and task."""
    lines = rec.transcript.splitlines()
    return chat().task(lines[1].removeprefix("[task] ")), lines[2:]


def test_observation_masking_keeps_every_action_and_the_last_k_observations():
    """Each rebuilt window is exactly (s) + (u) + every step so far, its header and response
    verbatim, its observation verbatim for the last k steps and the placeholder before."""
    config = sized("observation-masking")
    batch, _, _ = oracle_rollouts("observation-masking", config=config)
    system = chat().system(batch_system_prompt())
    header, end = chat().assistant_prefix(), chat().end_id
    masked_turn = chat().observation(OBSERVATION_PLACEHOLDER)
    rebuilt = masked = 0
    for rec in batch.records:
        assert rec.success and rec.peak_context <= config.budget
        windows = by_rollout(batch)[rec.rollout_id]
        assert [s.role for s in windows] == ["execution"] * (rec.compactions + 1)
        task, lines = episode_lines(rec)
        steps: list[list[str]] = []  # [response, observation] of each step so far
        for line in lines:
            if line.startswith("[assistant] "):
                steps.append([line.removeprefix("[assistant] "), ""])
            elif line.startswith("[observation] "):
                steps[-1][1] = line.removeprefix("[observation] ")
            elif line.startswith("== window "):
                rebuilt += 1
                hidden = len(steps) - min(config.keep_last, len(steps))
                note = f", {hidden} masked" if hidden else ""
                assert line.endswith(f"(kept {len(steps)} steps{note}) ==")
                expected = system + task
                for i, (response, observation) in enumerate(steps):
                    expected += header + chat().encode(response) + [end]
                    expected += masked_turn if i < hidden else chat().observation(observation)
                window = windows[int(line.split()[2]) - 1]
                assert window.token_ids[: len(expected)] == expected
                masked += hidden
    assert rebuilt >= len(batch.records) and masked > rebuilt


def test_memory_state_acts_from_the_task_its_state_and_the_latest_step():
    """After every step but the last the policy writes its state (a summary segment, trainable
    on the state only, at most max_summary_tokens); each next window is exactly (s) + (u) +
    the resume turn with that state + the latest step, then one response."""
    config = sized("memory-state")
    batch, _, _ = oracle_rollouts("memory-state", config=config)  # omission rate 0.5
    system = chat().system(batch_system_prompt())
    header, end = chat().assistant_prefix(), chat().end_id
    for rec in batch.records:
        assert rec.success and rec.peak_context <= config.budget  # the task holds the key
        assert rec.compactions == len(rec.summaries) == rec.turns - 1
        segs = by_rollout(batch)[rec.rollout_id]
        assert [s.role for s in segs] == ["execution", "summary"] * (rec.turns - 1) + ["execution"]
        task, lines = episode_lines(rec)
        responses = [x.removeprefix("[assistant] ") for x in lines if x.startswith("[assistant] ")]
        observations = [x.removeprefix("[observation] ") for x in lines if x.startswith("[obs")]
        for t in range(1, rec.turns):
            state, window = segs[2 * t - 1], segs[2 * t]
            assert 0 < sum(state.trainable) <= config.max_summary_tokens
            expected = (
                system + task + chat().resume(config.resume_instruction, rec.summaries[t - 1])
            )
            expected += header + chat().encode(responses[t - 1]) + [end]
            expected += chat().observation(observations[t - 1])
            assert window.token_ids[: len(expected)] == expected
            ((start, tokens),) = trainable_runs(window)
            assert start == len(expected) + len(header)
            assert chat().decode(tokens) == responses[t]
    states = [s for rec in batch.records for s in rec.summaries]
    assert any("unknown" in s for s in states) and any("unknown" not in s for s in states)


@pytest.mark.parametrize("protocol", ["observation-masking", "memory-state", "self-compaction"])
def test_the_sizing_replays_the_runtime(protocol):
    """``fit_sizes`` replays the strategy's turn trigger and rebuilt steps: at the budget it
    derives from the oracle's episodes, the oracle solves those very tasks, and that budget is
    the smallest the replay fits (under masking, one token less fills some window for real)."""
    episodes = sample_episodes(ENV, LONG, 8)
    system_prompt = batch_system_prompt()
    config = fit_sizes(
        replace(DEFAULT_COMPACTION, protocol=protocol), chat(), system_prompt, episodes
    )

    def run(budget: int) -> list:
        runtime = replace(config, budget=budget)
        agents = config.strategy.scripted_agents(ENV, chat(), config=runtime)
        return collect_rollouts(
            ENV, LONG, agents.actor, runtime, list(range(8)), chat(), agents.summarizer
        ).records

    assert all(r.success and r.compactions > 0 for r in run(config.budget))
    plans = [
        _episode_plan(config, _Measured(chat()), len(chat().system(system_prompt)), e)
        for e in episodes
    ]
    assert all(p.fits(config, config.budget) for p in plans)
    assert not all(p.fits(config, config.budget - 1) for p in plans)
    if protocol == "observation-masking":  # no summary whose length the sizing bounds
        assert any(r.end_reason == "window_full" for r in run(config.budget - 1))


SERVED = [
    ("observation-masking", "cxsim/KeyRecall-v0"),
    ("observation-masking", "cxsim/SimRepo-v0"),
    *((p, e) for p in ("memory-state", "self-compaction") for e in FAMILIES),
    ("self-compaction-drawn", "cxsim/FactUpdate-v0"),
]


@pytest.mark.parametrize(("protocol", "env_id"), SERVED)
def test_the_oracle_solves_each_family_it_serves_at_the_preflight_sizes(protocol, env_id):
    env = EnvConfig(env_id=env_id)
    config = preflight(env, replace(DEFAULT_COMPACTION, protocol=protocol), chat())
    agents = config.strategy.scripted_agents(env_id, chat(), config=config)
    result, records = evaluate_protocol(
        env_id, env.kwargs, agents.actor, chat(), config, protocol, episodes=16,
        summarizer_agent=agents.summarizer,
    )  # fmt: skip
    assert result["pass_at_1"] == 1.0 and result["mean_compactions"] > 0
    assert all(r.peak_context <= config.budget for r in records)


def test_observation_masking_refuses_a_task_whose_facts_it_masks():
    """FactUpdate's revisions come in observations the masking hides: the pre-flight says so
    in one line instead of training to 0."""
    masking = replace(DEFAULT_COMPACTION, protocol="observation-masking")
    with pytest.raises(
        ValueError, match=r"^pre-flight failed: observation-masking cannot serve cxsim/FactUpdate"
    ) as info:
        preflight(EnvConfig(env_id="cxsim/FactUpdate-v0"), masking, chat())
    assert "\n" not in str(info.value) and "answered wrong on" in str(info.value)


class Silent:
    """An agent that must not be asked anything."""

    def respond(self, requests: list[TurnRequest]) -> list[TurnResponse]:
        raise AssertionError("asked before the words were checked")


def test_a_tokenizer_without_the_placeholder_words_is_refused_before_any_rollout():
    assert set(OBSERVATION_PLACEHOLDER.split()) <= set(vocabulary([ENV]))
    assert set(OBSERVATION_MASKING.words(CFG)) == set(OBSERVATION_PLACEHOLDER.split())
    lacking = WordChatFormat(build_tokenizer([w for w in vocabulary() if w != "truncated"]))
    masking = replace(CFG, protocol="observation-masking")
    with pytest.raises(ValueError, match=r"lacks 1 word\(s\) of .*: 'truncated'"):
        collect_rollouts(ENV, LONG, Silent(), masking, [0], lacking)


def decisions(rec) -> int:
    return rec.transcript.count(f"[assistant] {COMPACTION_REQUEST}\n")


def test_self_compaction_trains_the_oracles_decision_to_compact():
    """The sized oracle answers the compaction request one step before the fallback: every
    compaction follows a decision, which no environment step follows; its tokens end the
    window that asked, trainable, and that window + q_sum is the summary segment's prompt."""
    config = sized("self-compaction")
    batch, _, _ = oracle_rollouts("self-compaction", config=config)  # the unsized oracle
    assert all(decisions(rec) == 0 for rec in batch.records)  # compacts at the fallback
    agents = config.strategy.scripted_agents(
        ENV, chat(), ScriptedOptions(omission_rate=0.5), config=config
    )
    batch = collect_rollouts(ENV, LONG, agents.actor, config, list(range(6)), chat())
    request = [*chat().encode(COMPACTION_REQUEST), chat().end_id]
    q_sum = SELF_COMPACTION.summary(config).prompt(chat())
    for rec in batch.records:
        assert rec.peak_context <= config.budget and rec.compactions >= 2
        assert decisions(rec) == rec.compactions == len(rec.summaries)
        lines = rec.transcript.splitlines()
        asked = [i for i, x in enumerate(lines) if x == f"[assistant] {COMPACTION_REQUEST}"]
        assert all(lines[i + 1].startswith("[summary ") for i in asked)  # no observation
        assert rec.turns == sum(x.startswith("[observation] ") for x in lines) + len(asked)
        segs = by_rollout(batch)[rec.rollout_id]
        for k, summary in enumerate(s for s in segs if s.role == "summary"):
            window = segs[segs.index(summary) - 1]
            assert window.token_ids[-len(request) :] == request
            assert trainable_runs(window)[-1] == (len(window.token_ids) - len(request), request)
            assert (
                summary.token_ids[: len(window.token_ids) + len(q_sum)] == window.token_ids + q_sum
            )
            assert chat().decode(trainable_runs(summary)[0][1]) == rec.summaries[k]


class AlwaysCompacts:
    """Answers every act request with the compaction request, every summary request with a
    short summary."""

    def respond(self, requests: list[TurnRequest]) -> list[TurnResponse]:
        out = []
        for r in requests:
            ids = chat().encode(COMPACTION_REQUEST if r.kind == "act" else "summary : next .")
            ids = [*ids, chat().end_id][: r.max_new_tokens]
            out.append(TurnResponse(ids, [0.0] * len(ids), chat().decode(ids), True))
        return out


def test_a_compaction_request_is_honoured_while_a_compaction_is_left():
    """With none left, the request is an action like any other: the environment gets it."""
    config = replace(CFG, protocol="self-compaction", max_compactions=2, max_turns=5)
    batch = collect_rollouts(ENV, LONG, AlwaysCompacts(), config, [0], chat())
    (rec,) = batch.records
    assert rec.compactions == 2 and rec.turns == 5 and rec.end_reason == "max_turns"
    observations = [x for x in rec.transcript.splitlines() if x.startswith("[observation] ")]
    assert len(observations) == 3 and all("error" in x for x in observations)
    assert all(seg.end == "none" for seg in batch.segments[:-1])


def test_self_compaction_triggers_on_a_request_or_its_drawn_fallback():
    config = CompactionConfig(budget=200, threshold=72, max_compactions=2)
    for strategy in (SELF_COMPACTION, SELF_COMPACTION_DRAWN):
        assert strategy.turn_trigger(config, TurnState(60, 1, 2, asked=True)) == "summarize"
        assert strategy.turn_trigger(config, TurnState(60, 2, 2, asked=True)) == "act"
        assert strategy.turn_trigger(config, TurnState(129, 2, 0)) == "end"
        turn, row = TurnState(60, 0, 1), strategy.row_state(config)
        assert row.response_move(chat(), COMPACTION_REQUEST, turn).kind == "compact"
        assert row.response_move(chat(), "next", turn).kind == "act"
    assert {SELF_COMPACTION.fallback(config, seed) for seed in range(50)} == {72}
    drawn = [SELF_COMPACTION_DRAWN.fallback(config, seed) for seed in range(200)]
    assert min(drawn) >= 72 and max(drawn) <= 72 + 36 and len(set(drawn)) > 10
    assert SELF_COMPACTION_DRAWN.fallback(config, None) == 72 + 36  # the sizing: the earliest
    for seed, threshold in zip(range(200), drawn, strict=True):
        turn = TurnState(200 - threshold, 0, 1, seed=seed)
        assert SELF_COMPACTION_DRAWN.turn_trigger(config, turn) == "act"
        later = turn._replace(length=201 - threshold)
        assert SELF_COMPACTION_DRAWN.turn_trigger(config, later) == "summarize"
        assert SELF_COMPACTION_DRAWN.turn_trigger(config, later._replace(new_steps=0)) == (
            "act" if threshold > 72 else "summarize"
        )


def test_the_drawn_fallback_is_one_per_task_group():
    """Rows of a group (one task seed) are compacted at the same fill, drawn per task."""
    config = replace(CFG, protocol="self-compaction-drawn")
    agents = config.strategy.scripted_agents(ENV, chat())  # compacts at the fallback only
    seeds, groups = [3, 3, 3, 8, 8, 8, 21, 21], [0, 0, 0, 1, 1, 1, 2, 2]
    batch = collect_rollouts(ENV, LONG, agents.actor, config, seeds, chat(), group_ids=groups)
    first = {}
    for rec in batch.records:
        window = by_rollout(batch)[rec.rollout_id][0]
        threshold = SELF_COMPACTION_DRAWN.fallback(config, rec.seed)
        assert window_full_at(config, threshold, window)
        first.setdefault(rec.seed, set()).add(len(window.token_ids))
    assert all(len(lengths) == 1 for lengths in first.values())
    assert len({SELF_COMPACTION_DRAWN.fallback(config, s) for s in first}) > 1


def window_full_at(config: CompactionConfig, threshold: int, window: Segment) -> bool:
    """The first window was compacted as soon as it was full under ``threshold``: full at its
    end, not full before its last step."""
    header = chat().assistant_prefix()
    starts = [
        t for t in range(len(window.token_ids)) if window.token_ids[t : t + len(header)] == header
    ]
    before = starts[-1]  # the last step's header
    full = config.budget - len(window.token_ids) < threshold
    return full and config.budget - before >= threshold


# -- the entry points under any strategy ------------------------------------------------------


def test_train_and_eval_run_under_the_compaction_protocol():
    masking = replace(DEFAULT_COMPACTION, protocol="observation-masking")
    assert TrainCommand().ppo.protocol == "compacted"
    assert TrainCommand(compaction=masking).ppo.protocol == "observation-masking"
    assert TrainCommand(ppo=PPOConfig(protocol="single")).ppo.protocol == "single"
    assert EvalCommand(agent="oracle").eval.protocols == ("single", "compacted")
    on_masking = EvalCommand(agent="oracle", compaction=masking)
    assert on_masking.eval.protocols == ("single", "observation-masking")
    given = EvalConfig(protocols=("memory-state",))
    assert EvalCommand(agent="oracle", compaction=masking, eval=given).eval.protocols == (
        "memory-state",
    )
    for build, flag in (
        (lambda: PPOConfig(protocol="bogus"), "--ppo.protocol"),
        (lambda: EvalConfig(protocols=("single", "bogus")), "--eval.protocols"),
    ):
        with pytest.raises(ValueError, match=rf"^protocol 'bogus' is unknown: set {flag} to") as e:
            build()
        assert "\n" not in str(e.value)


def test_eval_runs_any_protocol_with_its_summarizer(tmp_path: Path):
    """``--eval.protocols`` takes any strategy; external-summarizer gets its scripted
    summarizer (--omission-rate)."""
    out = tmp_path / "eval.json"
    cxsim(["--quiet", "eval", "--agent", "oracle", "--out", str(out), "--eval.episodes", "4",
           "--eval.protocols", "external-summarizer", "memory-state", "sliding-window"])  # fmt: skip
    results = {r["protocol"]: r for r in json.loads(out.read_text())["results"]}
    assert list(results) == ["external-summarizer", "memory-state", "sliding-window"]
    assert all(r["pass_at_1"] == 1.0 for r in results.values())
    assert results["external-summarizer"]["summary_recall"] == 1.0
    assert (
        results["memory-state"]["mean_compactions"] > results["sliding-window"]["mean_compactions"]
    )


SMOKE_ENV = [
    "--env.env-id", "cxsim/KeyRecall-easy-v0",
    "--env.kwargs", "memory_length", "5", "obs_words_mean", "6", "obs_words_std", "1",
    "num_values", "4",
]  # fmt: skip
"""A short KeyRecall without published sizes: the sizes are derived under each strategy."""


@pytest.mark.parametrize(
    "protocol",
    [
        "observation-masking",
        # the other two take 3-9 s each: the slow run covers them
        pytest.param("memory-state", marks=pytest.mark.slow),
        pytest.param("self-compaction", marks=pytest.mark.slow),
    ],
)
def test_sft_then_train_under_a_new_strategy(protocol: str, tmp_path: Path):
    """``cxsim sft`` clones the strategy's demonstrations and ``cxsim train`` trains under it,
    both from ``--compaction.protocol`` alone, at the sizes derived for it."""
    common = ["--compaction.protocol", protocol, "--device", "cpu", *SMOKE_ENV, "--no-progress-bar"]
    cxsim(["--quiet", "sft", "--run-dir", str(tmp_path / "sft"), *common, "--sft.episodes", "6",
           "--sft.epochs", "1", "--sft.heldout-episodes", "2", "--sft.omission-rate", "0"])  # fmt: skip
    sft = json.loads((tmp_path / "sft" / "results.json").read_text())
    demos, budget = sft["demonstrations"], sft["config"]["compaction"]["budget"]
    assert demos["charts/success_rate"] == 1.0 and demos["compaction/compactions_mean"] >= 1
    assert demos["compaction/peak_context_mean"] <= budget
    assert (demos["compaction/tokens_summarised"] > 0) == (protocol != "observation-masking")
    # 4 rollouts can all end alike: --ppo.no-skip-uniform-batches, so the actor steps
    cxsim(["--quiet", "train", "--policy", str(tmp_path / "sft" / "policy"), "--run-dir",
           str(tmp_path / "train"), *common, "--ppo.rollouts-per-batch", "4", "--ppo.iterations",
           "1", "--ppo.critic-warmup", "1", "--ppo.minibatches", "1",
           "--ppo.no-skip-uniform-batches"])  # fmt: skip
    train = json.loads((tmp_path / "train" / "results.json").read_text())
    assert train["iterations_done"] == 2 and train["config"]["ppo"]["protocol"] == protocol
    assert train["config"]["compaction"] == sft["config"]["compaction"]
    last = train["history"][-1]
    assert math.isfinite(last["losses/policy"]) and last["compaction/compactions_mean"] >= 1
    assert last["compaction/peak_context_mean"] <= budget


def test_the_runtime_row_keeps_only_what_every_strategy_shares():
    """Folding's parent windows, depth, branches and return, memory-notes' notes and steps
    live in their row states (``FoldingRow``, ``NotesRow``), not in the runtime's row nor in
    what it tells every strategy (issue #38)."""
    own = {"depth", "branches", "returning", "suspended", "env_steps", "notes", "open_notes"}
    assert not {f.name for f in dataclasses.fields(Row)} & own
    assert not set(TurnState._fields) & own


def test_the_strategy_seam_does_not_grow():
    """ContextStrategy's members, private ones included (attributes, properties, methods): 39 before the seam
    was narrowed (issue #38), 23 then, 12 now: the summary's prompt, cap and reserve in
    ``summary``; ``check`` with an optional chat format; the rebuilt window's layout, prefix,
    steps and placeholder in ``rebuild`` (None for no rebuild, which ``compacts`` said); the
    window, summary and finished segments in ``segments``; ``scripted_agents`` with an
    optional sized config; ``response_move`` in ``row_state``'s ``RowState``, with what the
    strategy keeps of a row (folding's parent windows, memory-notes' notes), which the
    runtime's row no longer holds. A one-strategy hook belongs in that strategy's module, a sizing
    one in its ``StrategySizing``, a summary, rebuilt-window or segment one in its record
    (``cxsim.strategies.parts``)."""
    members = [name for name in dir(ContextStrategy) if not name.startswith("__")]
    assert len(members) <= 12, members
