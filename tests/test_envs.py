"""Gymnasium contract tests over every registered cxsim id."""

from __future__ import annotations

import pickle

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env, data_equivalence
from gymnasium.vector import AutoresetMode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cxsim.envs
from cxsim.envs.base import CHARSET, INFO_KEYS
from cxsim.envs.family import family_of
from cxsim.envs.scripted import RandomAgent, ScriptedSummarizer, oracle_for, play

ENV_IDS = sorted(
    i for i in gym.registry if i.startswith("cxsim/") and i not in cxsim.envs.OUTSIDE_IDS
)
"""cxsim's own ids; a family from outside (its optional extra) has its own tests."""


def _make(env_id: str) -> gym.Env:
    return gym.make(env_id, disable_env_checker=True).unwrapped


def test_registry_lists_every_env() -> None:
    names = {gym.envs.registration.parse_env_id(i)[1].split("-")[0] for i in ENV_IDS}
    assert {"KeyRecall", "KeyRecallActive", "FactUpdate", "SimRepo"} <= names


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env(env_id: str) -> None:
    check_env(_make(env_id))


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_class_contract(env_id: str) -> None:
    cls = type(_make(env_id))
    assert cls.system_prompt and set(cls.system_prompt.split()) <= set(cls.vocabulary())
    doc = cls.__doc__
    for section in (
        "Description",
        "Observation",
        "Actions",
        "Rewards",
        "Episode end",
        "Arguments",
        "Version history",
    ):
        assert f"## {section}" in doc, section
    assert {"easy", "default", "hard"} <= set(cls.PRESETS)
    assert cls.vocabulary() == sorted(set(cls.vocabulary()))


def _mixed_rollout(env_id: str, seed: int) -> list:
    """Oracle, random-admissible and garbage actions interleaved, seeded."""
    env = _make(env_id)
    oracle, rand = oracle_for(env), RandomAgent(cxsim.envs.vocabulary(), seed, garbage_rate=0.3)
    obs, info = env.reset(seed=seed)
    trace = [obs, info]
    for t in range(60):
        agent = oracle if t % 3 else rand
        obs, reward, terminated, truncated, info = env.step(agent.act(obs, info))
        trace += [obs, reward, terminated, truncated, info]
        if terminated or truncated:
            obs, info = env.reset()
            trace += [obs, info]
    return trace


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_determinism(env_id: str) -> None:
    assert data_equivalence(_mixed_rollout(env_id, 3), _mixed_rollout(env_id, 3), exact=True)
    assert not data_equivalence(_mixed_rollout(env_id, 3), _mixed_rollout(env_id, 4))


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_pickle_resumes_identically(env_id: str) -> None:
    env = _make(env_id)
    oracle = oracle_for(env)
    obs, info = env.reset(seed=5)
    for _ in range(3):
        obs, *_, info = env.step(oracle.act(obs, info))
    clone = pickle.loads(pickle.dumps(env))
    for _ in range(5):
        action = oracle.act(obs, info)
        a, b = env.step(action), clone.step(action)
        assert data_equivalence(a, b, exact=True)
        obs, info = a[0], a[4]
        if a[2] or a[3]:
            break


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_make_vec(mode: str) -> None:
    kwargs = {"autoreset_mode": AutoresetMode.NEXT_STEP}
    if mode == "async":
        kwargs["shared_memory"] = False  # Text spaces have no shared-memory layout
    for env_id in ("cxsim/KeyRecall-easy-v0", "cxsim/FactUpdate-easy-v0", "cxsim/SimRepo-easy-v0"):
        envs = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode, vector_kwargs=kwargs)
        obs, _ = envs.reset(seed=0)
        assert len(obs) == 2 and obs[0] != obs[1]
        dones = 0
        for _ in range(40):
            obs, _rewards, terminated, truncated, _infos = envs.step(("next", "next"))
            dones += int((terminated | truncated).sum())
            assert all(o in envs.single_observation_space for o in obs)
        assert dones > 0  # episodes ended and were reset automatically
        envs.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_vocabulary_is_closed(env_id: str) -> None:
    """Every word of every observation, task, admissible action, action and summary
    (oracle and random rollouts over many seeds) is in the env's vocabulary."""
    env = _make(env_id)
    vocab = set(type(env).vocabulary())
    assert vocab <= set(cxsim.envs.vocabulary())
    assert set(cxsim.envs.vocabulary([env_id])) >= vocab
    summarizer = ScriptedSummarizer(0.3, seed=0, family=family_of(env))
    seen: set[str] = set()
    for seed in range(60):
        agent = oracle_for(env) if seed % 2 else RandomAgent(sorted(vocab), seed)
        episode = play(env, agent, seed)
        texts = [episode.task, *episode.observations, *episode.actions]
        context = " ".join([episode.task, *episode.observations[:5]])
        for info in [episode.reset_info, *episode.infos]:
            texts += info["admissible_actions"]
        texts.append(summarizer.summarize(context, episode.infos[-1]))
        for text in texts:
            assert text == " ".join(text.split()), repr(text)  # single spaces, no padding
            assert set(text) <= set(CHARSET)
            seen.update(text.split())
    summary_vocab = set(cxsim.envs.vocabulary([env_id]))
    assert seen <= summary_vocab, seen - summary_vocab


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_info_keys_and_types(env_id: str) -> None:
    env = _make(env_id)
    episode = play(env, oracle_for(env), seed=1)
    for info in [episode.reset_info, *episode.infos]:
        assert tuple(info) == INFO_KEYS
        assert set(info["needed_facts"]) <= set(info["key_facts"])
        assert set(info["fact_needed_step"]) == set(info["needed_facts"])
        assert all(isinstance(v, str) for v in info["key_facts"].values())
        assert isinstance(info["state"], dict) and isinstance(info["step"], int)
    assert episode.terminated and not episode.truncated and episode.success


@pytest.mark.parametrize("env_id", ENV_IDS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=st.lists(st.text(max_size=40), min_size=1, max_size=12), seed=st.integers(0, 99))
def test_garbage_actions_never_raise(env_id: str, actions: list[str], seed: int) -> None:
    env = _make(env_id)
    env.reset(seed=seed)
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs in env.observation_space
        if info["error"] is not None:
            assert obs.startswith("error :") and reward == -env.error_penalty
        if terminated or truncated:
            env.reset()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_oracle_solves_99_percent(env_id: str) -> None:
    env = _make(env_id)
    successes = sum(play(env, oracle_for(env), seed).success for seed in range(200))
    assert successes >= 198, successes
