"""Context strategies: the registry and its plug-ins, the trigger, and what each built-in
strategy makes of oracle rollouts (contexts within the budget, trainable tokens)."""

from __future__ import annotations

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
from cxsim.agents.tokenizer import default_tokenizer
from cxsim.cli import main as cxsim
from cxsim.compaction import CompactionConfig, _episode_plan, _Measured, fit_sizes
from cxsim.envs.defaults import EpisodeText
from cxsim.runtime import RolloutBatch, collect_rollouts
from cxsim.segments import Segment
from cxsim.strategies import STRATEGIES, ContextStrategy

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
    compacts = True

    def steps_kept(self, config, prefix, steps):
        return None if self.full(config, prefix) else 0


fresh_start = FreshStart()
"""The plug-in: a ``ContextStrategy`` declared outside cxsim."""
PLUGIN = f"{__name__}:fresh_start"


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
    agents = config.strategy.scripted_agents(ENV, chat(), omission_rate=0.5, seed=0)
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


def test_registry_holds_the_four_protocols_with_their_properties():
    assert list(STRATEGIES) == ["compacted", "single", "sliding-window", "external-summarizer"]
    table = {  # compacts, summarizes, the policy writes the summary
        "compacted": (True, True, True),
        "single": (False, False, False),
        "sliding-window": (True, False, False),
        "external-summarizer": (True, True, False),
    }
    for name, strategy in STRATEGIES.items():
        assert strategy.name == name and strategy.help
        assert CompactionConfig(protocol=name).strategy is strategy
        props = (strategy.compacts, strategy.summarizes, strategy.policy_summarizes)
        assert props == table[name], name
        config = CompactionConfig(protocol=name)
        assert (config.compacts, config.summarizes) == table[name][:2]
        q_sum = len(chat().summary_request(config.summary_instruction))
        reserve = q_sum + config.max_summary_tokens if strategy.summarizes else 0
        assert config.summary_reserve(chat()) == reserve


def test_trigger_reads_the_compaction_rule():
    """Not full (``C - |h| >= T_comp``): act; full: the strategy's move, or end once the
    compactions are spent."""
    config = CompactionConfig(budget=200, threshold=72, max_compactions=2)
    moves = {
        "compacted": "summarize",
        "single": "end",
        "sliding-window": "rebuild",
        "external-summarizer": "summarize",
    }
    for name, strategy in STRATEGIES.items():
        assert strategy.trigger(config, 200 - 72, compactions=0) == "act"
        assert strategy.trigger(config, 200 - 71, compactions=0) == moves[name]
        assert strategy.trigger(config, 200 - 71, compactions=1) == moves[name]
        assert strategy.trigger(config, 200 - 71, compactions=2) == "end"


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
            r"single, sliding-window, external-summarizer, or module:name for your own context "
            r"strategy \(docs/training\.md\)$",
        ),
        ("no_such_module_here:strategy", r"^no_such_module_here:strategy: cannot import module "),
        (f"{__name__}:nope", rf"^{__name__}:nope: module '{__name__}' has no 'nope'$"),
        (f"{__name__}:FreshStart", r"is the class FreshStart, not an instance: declare it in "),
        (f"{__name__}:not_a_strategy", r"is a function, not a cxsim\.strategies\.ContextStrategy"),
        (f"{__name__}:unsure", r"declares summary_by='nobody': it must be None or one of "),
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
    message = str(info.value.code)
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
            prefix = strategy.rebuilt_prefix(config, chat(), system, task, summary)
            assert seg.token_ids[: len(prefix)] == prefix


@pytest.mark.parametrize(
    "protocol", ["compacted", "single", "sliding-window", "external-summarizer"]
)
def test_contexts_fit_the_budget_and_trainable_tokens_are_the_strategys(protocol):
    strategy = STRATEGIES[protocol]
    batch, actor, summarizer = oracle_rollouts(protocol)
    # who writes the summaries: the acting agent, or another one given the whole prompt
    summaries = sum(len(rec.summaries) for rec in batch.records)
    asked = [r for r in actor.requests if r.kind == "summarize"]
    assert len(asked) == (summaries if strategy.policy_summarizes else 0)
    q_sum = strategy.summary_prompt(replace(CFG, protocol=protocol), chat())
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
        assert (rec.compactions > 0) == strategy.compacts
        assert len(rec.summaries) == (rec.compactions if strategy.summarizes else 0)
        summary_segs = [s for s in segs if s.role == "summary"]
        assert len(summary_segs) == (rec.compactions if strategy.policy_summarizes else 0)
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
