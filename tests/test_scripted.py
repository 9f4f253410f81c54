"""Scripted oracle, summarizer and summary scorer."""

from __future__ import annotations

import gymnasium as gym
import pytest

import cxsim.envs
from cxsim.envs import FactUpdate, KeyRecall
from cxsim.envs.scripted import ScriptedSummarizer, oracle_for, summary_recall


def _query_info(env: gym.Env, seed: int) -> tuple[str, dict]:
    """Context text of a whole oracle episode up to the question, and the info there."""
    oracle = oracle_for(env)
    obs, info = env.reset(seed=seed)
    texts = [obs]
    while info["state"]["phase"] != "query":
        obs, *_, info = env.step(oracle.act(obs, info))
        texts.append(obs)
    return " ".join(texts), info


@pytest.mark.parametrize("env_cls", [KeyRecall, FactUpdate])
def test_omission_zero_keeps_every_present_fact(env_cls: type) -> None:
    env = env_cls()
    summarizer = ScriptedSummarizer(0.0, seed=0, family=env_cls.family)
    for seed in range(20):
        context, info = _query_info(env, seed)
        summary = summarizer.summarize(context, info)
        assert all(summary_recall(summary, info).values()), summary
        assert set(summary.split()) <= set(cxsim.envs.vocabulary())
        assert "question" in summary.split()  # the open question travels too


def test_omission_one_keeps_nothing_and_rate_is_respected() -> None:
    env = FactUpdate(num_facts=4, num_questions=4)
    for rate, low, high in [(1.0, 0.0, 0.0), (0.3, 0.6, 0.8)]:
        summarizer = ScriptedSummarizer(rate, seed=1, family=env.family)
        kept = []
        for seed in range(100):
            context, info = _query_info(env, seed)
            kept += summary_recall(summarizer.summarize(context, info), info).values()
        assert low <= sum(kept) / len(kept) <= high


def test_never_recovers_a_lost_fact() -> None:
    env = KeyRecall(memory_length=6)
    summarizer = ScriptedSummarizer(0.0, seed=0, family=env.family)
    context, info = _query_info(env, 0)
    key = info["key_facts"]["key"]
    lost = " ".join(w for w in context.split() if w != key)
    assert summary_recall(summarizer.summarize(lost, info), info) == {"key": False}
    # A summary of a summary keeps what the first kept.
    first = summarizer.summarize(context, info)
    assert summary_recall(summarizer.summarize(first, info), info) == {"key": True}


def test_summary_recall_needs_the_current_value_as_a_whole_word() -> None:
    info = {"key_facts": {"key": "k1", "red": "k12"}, "needed_facts": ["key", "red"]}
    assert summary_recall("the key is k12 .", info) == {"key": False, "red": True}
    assert summary_recall("the key is k1 . red is k1", info) == {"key": True, "red": False}


@pytest.mark.parametrize(
    "env_id", ["cxsim/KeyRecall-v0", "cxsim/FactUpdate-hard-v0", "cxsim/SimRepo-hard-v0"]
)
def test_oracle_acts_from_info_alone(env_id: str) -> None:
    """After compaction the oracle may see only a summary: it still succeeds."""
    env = gym.make(env_id).unwrapped
    oracle = oracle_for(env)
    wins = 0
    for seed in range(30):
        _, info = env.reset(seed=seed)
        while True:
            _, _, terminated, truncated, info = env.step(oracle.act("summary : nothing", info))
            if terminated or truncated:
                break
        wins += info["success"]
    assert wins == 30


def test_summary_recall_counts_only_facts_shown_before_the_summary() -> None:
    info = {
        "key_facts": {"location": "a.py:3", "patch": "p2"},
        "needed_facts": ["location", "patch"],
        "fact_shown_step": {"location": 2, "patch": -1},  # -1: not shown yet
        "step": 2,
    }
    assert summary_recall("the bug is at a.py:3 .", info) == {"location": True}
    assert summary_recall("the fix is p2 .", info) == {"location": False}
    later = info | {"fact_shown_step": {"location": 2, "patch": 3}}  # shown after step 2
    assert summary_recall("the fix is p2 .", later) == {"location": False}
    shown = later | {"step": 3}
    assert summary_recall("the fix is p2 .", shown) == {"location": False, "patch": True}


# budget / threshold / response cap / summary cap: the word sizes of docs/environments.md
WORD_SIZES = {"cxsim/SimRepo-v0": (212, 116, 5, 36), "cxsim/KeyRecall-v0": (200, 72, 8, 32)}


def _oracle_recalls(env_id: str, omission: float, episodes: int) -> list[dict[str, bool]]:
    """Every summary's recall dict over ``episodes`` scripted-oracle rollouts under the
    runtime, at the id's default kwargs and published word sizes."""
    from cxsim.agents import WordChatFormat, default_tokenizer
    from cxsim.agents.scripted import ScriptedAgent
    from cxsim.compaction import CompactionConfig
    from cxsim.envs.defaults import default_kwargs
    from cxsim.runtime import collect_rollouts

    chat = WordChatFormat(default_tokenizer())
    budget, threshold, response, summary = WORD_SIZES[env_id]
    sizes = CompactionConfig(budget=budget, threshold=threshold, max_response_tokens=response,
                             max_summary_tokens=summary)  # fmt: skip
    agent = ScriptedAgent(env_id, chat, omission, seed=0)
    kwargs = default_kwargs(env_id)
    batch = collect_rollouts(env_id, kwargs, agent, sizes, list(range(episodes)), chat)
    assert omission > 0 or all(r.success for r in batch.records)
    return [recall for r in batch.records for recall in r.summary_recall]


def test_sim_repo_oracle_at_omission_zero_has_recall_one() -> None:
    """SimRepo shows the patch only when the oracle asks for ``patches``: a summary written
    before that cannot hold it, and no longer counts it as missing (it was 0.67 when every
    needed fact counted)."""
    recalls = _oracle_recalls("cxsim/SimRepo-v0", 0.0, 16)
    kept = [ok for recall in recalls for ok in recall.values()]
    assert kept and all(kept)
    assert any(set(recall) != {"location", "patch"} for recall in recalls)  # before the patch


def test_key_recall_shows_its_key_at_step_zero_so_every_summary_counts_it() -> None:
    recalls = _oracle_recalls("cxsim/KeyRecall-v0", 0.5, 16)
    assert recalls and all(set(recall) == {"key"} for recall in recalls)
    assert 0 < sum(r["key"] for r in recalls) < len(recalls)  # omission 0.5 drops some


def test_summary_stated_reads_a_value_right_or_wrong_as_a_reader_would() -> None:
    env = gym.make("cxsim/KeyRecall-v0").unwrapped
    _, info = env.reset(seed=3)
    right = info["key_facts"]["key"]
    wrong = next(v for v in env.values if v != right)
    for summary, recall, stated in [
        (f"the key is {right} .", True, True),
        (f"the key is {wrong} .", False, True),  # a guess: looks like a kept key
        ("the key is unknown .", False, False),
        ("the key is", False, False),  # cut short
    ]:
        assert summary_recall(summary, info) == {"key": recall}
        assert env.summary_stated(summary, info) == {"key": stated}


def test_sim_repo_states_a_location_of_its_files_and_a_patch_id() -> None:
    env = gym.make("cxsim/SimRepo-v0").unwrapped
    _, info = env.reset(seed=0)
    info = {**info, "fact_shown_step": {"location": 0, "patch": 0}}  # both shown
    file, _, line = info["key_facts"]["location"].partition(":")
    other = f"{file}:{int(line) + 7}"
    assert env.summary_stated(f"bug at {other} fix p1", info) == {"location": True, "patch": True}
    assert env.summary_stated("bug at nowhere.py:3 fix unknown", info) == {
        "location": False,
        "patch": False,
    }


def test_fact_types_say_key_until_a_revision_changes_the_value() -> None:
    env = FactUpdate(num_facts=3, num_questions=3, num_revisions=3, num_decoys=0)
    obs, info = env.reset(seed=0)
    assert env.fact_types(info) == dict.fromkeys(info["needed_facts"], "key")
    oracle = oracle_for(env)
    seen_revised = False
    while info["state"]["phase"] == "corridor":
        obs, *_, info = env.step(oracle.act(obs, info))
        revised = {name for name, steps in info["fact_revised_steps"].items() if steps}
        types = env.fact_types(info)
        assert {name for name, t in types.items() if t == "revised"} == revised & set(types)
        seen_revised = seen_revised or "revised" in types.values()
    assert seen_revised
    # KeyRecall's key: "key" from the task on, "revised" after its news line
    key_recall = KeyRecall(memory_length=6, num_revisions=1)
    obs, info = key_recall.reset(seed=0)
    types = [key_recall.fact_types(info)["key"]]
    while info["state"]["phase"] == "corridor":
        obs, *_, info = key_recall.step("next")
        types.append(key_recall.fact_types(info)["key"])
    first = types.index("revised")
    assert set(types[:first]) == {"key"} and set(types[first:]) == {"revised"}


def test_sim_repo_types_its_facts_once_shown_and_a_plain_env_has_no_types() -> None:
    from cxsim.rollout_records import fact_types_hook

    env = gym.make("cxsim/SimRepo-v0")
    _, info = env.reset(seed=0)
    assert env.unwrapped.fact_types(info) == {}  # nothing shown yet
    shown = {**info, "fact_shown_step": {"location": 0, "patch": 0}}
    assert env.unwrapped.fact_types(shown) == {"location": "key", "patch": "key"}
    assert fact_types_hook(env) == env.unwrapped.fact_types
    assert fact_types_hook(gym.make("CartPole-v1")) is None
