"""cxsim/TextWorld-v0, the family from outside: refused in one line without its extra; with
it (skipped cleanly where TextWorld is not installed), the oracle solves generated games,
a malformed action is an error observation, an episode is a function of its seed, and every
word it writes is in its vocabulary. Games of the easy dials, generated once per session."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from cxsim.cli import main as cxsim
from cxsim.envs import OUTSIDE_IDS
from cxsim.envs.family import family_of
from cxsim.envs.scripted import RandomAgent, ScriptedSummarizer, oracle_for, play, summary_recall

ENV_ID = "cxsim/TextWorld-v0"
INSTALL = "pip install 'cxsim[textworld]'"
GAMES = 3


def _without_textworld(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the extra were not installed: ``import textworld`` fails, the module re-imports."""
    monkeypatch.setitem(sys.modules, "textworld", None)
    for name in ("cxsim.envs.textworld_games", "cxsim.envs.textworld_text"):
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_the_id_is_registered_without_the_extra() -> None:
    assert ENV_ID in gym.registry and ENV_ID in OUTSIDE_IDS


def test_make_without_the_extra_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_textworld(monkeypatch)
    with pytest.raises(ImportError) as error:
        gym.make(ENV_ID)
    message = str(error.value)
    assert INSTALL in message and "\n" not in message
    assert isinstance(error.value, ValueError)  # the CLI shows a ValueError as one line


def test_cxsim_run_without_the_extra_stops_before_any_work(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _without_textworld(monkeypatch)
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as stop:
        cxsim(["run", "--env.env-id", ENV_ID, "--run-dir", str(run_dir)])
    assert stop.value.code == 2
    message = capsys.readouterr().err.strip()
    assert message.startswith("cxsim run: error: ") and INSTALL in message, message
    assert "\n" not in message and not run_dir.exists()


@pytest.fixture(scope="module")
def kwargs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    pytest.importorskip("textworld")
    return {"rooms": 1, "objects": 2, "quest_length": 1, "num_games": GAMES,
            "cache_dir": str(tmp_path_factory.mktemp("textworld-games"))}  # fmt: skip


def _make(kwargs: dict) -> gym.Env:
    return gym.make(ENV_ID, **kwargs)


def test_the_oracle_solves_every_generated_game(kwargs: dict) -> None:
    env = _make(kwargs)
    for seed in range(GAMES):
        episode = play(env, oracle_for(env), seed=seed)
        assert episode.success and episode.terminated and episode.rewards[-1] == 1.0
        assert episode.observations[-1].endswith("done : you won .")
        info = episode.reset_info
        assert info["needed_facts"] and set(info["needed_facts"]) == set(info["key_facts"])
        assert all(len(v.split()) == 1 for v in info["key_facts"].values())  # one-word facts
    env.close()


def test_a_malformed_action_is_an_error_observation(kwargs: dict) -> None:
    env = _make(kwargs)
    env.reset(seed=0)
    for action, reason in [("", "empty action"), ("zzqx take", "unknown word"),
                           ("score", "not allowed now"), ("goal", "not allowed now")]:  # fmt: skip
        obs, reward, terminated, _, info = env.step(action)
        assert obs.startswith("error :") and info["error"] == reason and reward == 0.0
        assert not terminated
    obs, _, terminated, _, info = env.step("go west")  # known words the game answers itself
    assert info["error"] is None and obs and not terminated
    env.close()


def test_an_episode_is_a_function_of_its_seed(kwargs: dict) -> None:
    one, two = _make(kwargs), _make(kwargs)
    for seed in (1, 1 + GAMES):  # the same game
        a, b = play(one, oracle_for(one), seed=seed), play(two, oracle_for(two), seed=seed)
        assert a.transcript() == b.transcript() and a.reset_info == b.reset_info
    assert one.reset(seed=0)[0] != one.reset(seed=1)[0]
    one.close()
    two.close()


def test_every_word_is_in_the_vocabulary_and_summaries_keep_the_facts(kwargs: dict) -> None:
    env = _make(kwargs)
    vocab = set(env.unwrapped.vocabulary())
    for seed in range(GAMES):
        episode = play(env, RandomAgent(sorted(vocab), seed, garbage_rate=0.2), seed=seed)
        texts = [episode.task, *episode.observations, *episode.actions]
        texts += [a for i in episode.infos for a in i["admissible_actions"]]
        assert set(" ".join(texts).split()) <= vocab
        oracle = play(env, oracle_for(env), seed=seed)
        info = oracle.reset_info
        kept = ScriptedSummarizer(0.0, family=family_of(env)).summarize(oracle.task, info)
        lost = ScriptedSummarizer(1.0, family=family_of(env)).summarize(oracle.task, info)
        assert set(kept.split()) | set(lost.split()) <= vocab
        shown = summary_recall(kept, info)
        assert shown and all(shown.values()) and not any(summary_recall(lost, info).values())
    env.close()


@pytest.mark.slow
def test_cxsim_run_trains_and_evaluates_one_seed(
    kwargs: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole job on a tiny budget: SFT from a fresh word-level model that knows the
    family's words, one PPO iteration, both protocols evaluated. (``--env.kwargs`` takes
    numbers and booleans: the cache folder comes from the environment variable.)"""
    monkeypatch.setenv("CXSIM_TEXTWORLD_CACHE", kwargs["cache_dir"])
    pairs = [str(x) for k, v in kwargs.items() if k != "cache_dir" for x in (k, v)]
    run_dir = tmp_path / "run"
    cxsim(["run", "--env.env-id", ENV_ID, "--env.kwargs", *pairs, "--seeds", "0",
           "--policy", "None", "--sft.episodes", "8", "--sft.heldout-episodes", "2",
           "--sft.epochs", "1", "--ppo.iterations", "1", "--ppo.critic-warmup", "1",
           "--ppo.rollouts-per-batch", "4", "--ppo.minibatches", "1",
           "--eval.episodes", "4", "--run-dir", str(run_dir), "--no-progress-bar"])  # fmt: skip
    rows = json.loads((run_dir / "results.json").read_text())["table"]
    cells = {(r["label"], r["protocol"]): r for r in rows}
    assert set(cells) == {(who, protocol) for who in ("base (SFT)", "compactionrl")
                          for protocol in ("single", "compacted")}  # fmt: skip
    assert all(0.0 <= r["pass_at_1"] <= 1.0 and r["runs"] == 4 for r in rows)
