"""An env family declared with the env (``cxsim.envs.family.EnvFamily``): an environment defined
here, in the test file, declares its oracle, summary writer, goal, note sentence and words, and
gets what cxsim's own families get with no cxsim file edited: a budget derived by the
pre-flight, SFT demonstrations under compacted, folding and memory-notes, and an oracle that
solves it under compacted at the derived budget. A word-level policy's tokenizer that lacks a
word the env or its family writes is refused by the pre-flight in one line naming the words; a
BPE tokenizer reads anything."""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

import cxsim.envs
from cxsim.agents import WordChatFormat, build_tokenizer, compaction_words, default_tokenizer
from cxsim.agents.chat import HFChatFormat
from cxsim.compaction import CompactionConfig
from cxsim.config import EnvConfig, SFTConfig
from cxsim.envs import EnvFamily, family_of
from cxsim.envs.family import declared_words
from cxsim.model_group import Model
from cxsim.pipeline.sft import Config as SFTRunConfig
from cxsim.pipeline.sft import demonstrations
from cxsim.preflight import preflight
from cxsim.runtime import collect_rollouts

WORDS = ("owl", "yak", "newt", "wren", "moth", "crab")
"""The words the task asks to remember: none of them in cxsim's own vocabulary."""
LETTERS = "abcdefghijklmnopqrstuvwxyz .:?"
TASK = "remember the word . the word is {w} . say next to walk on ."
WALK = "you walk on . the hall is long , dim and quiet ."
QUESTION = "question : what is the word ?"
SUMMARY_WORDS = ("memo", ":", "the", "word", "is", "unknown", ".", "question", "what", "?")
"""What the summary writer writes besides the word: ``memo`` is a word of the family only."""


class WordOracle:
    """Walk on with ``next``; at the question, say the word."""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if info["state"]["phase"] == "query":
            return "say " + info["key_facts"]["word"]
        return "next"


def word_summary(kept: dict[str, str], info: dict[str, Any]) -> str:
    parts = [f"memo : the word is {kept.get('word', 'unknown')} ."]
    if info["state"]["phase"] == "query":
        parts.append(QUESTION)
    return " ".join(parts)


class RememberWordEnv(gym.Env):
    """A word shown in the task, ``length`` steps of walking, then a question: ``say <word>``
    earns 1 and ends the episode."""

    system_prompt = "remember the word and say it when asked ."
    family: ClassVar[EnvFamily] = EnvFamily(
        oracle=WordOracle,
        summary=word_summary,
        goal="word",
        notes={"word": "the word is {value}"},
        words=SUMMARY_WORDS,
        commits=("say",),
    )

    def __init__(self, length: int = 24):
        self.length = length
        self.observation_space = gym.spaces.Text(400, charset=LETTERS + ",")
        self.action_space = gym.spaces.Text(40, charset=LETTERS)

    def reset(self, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.word = WORDS[int(self.np_random.integers(len(WORDS)))]
        self.t, self.done = 0, False
        return TASK.format(w=self.word), self.info()

    def step(self, action: str):
        self.t += 1
        if self.t < self.length:
            return WALK, 0.0, False, False, self.info()
        if self.t == self.length:
            return QUESTION, 0.0, False, False, self.info()
        self.done = action.split() == ["say", self.word]
        return "the end .", float(self.done), True, False, self.info()

    def info(self) -> dict[str, Any]:
        query = self.t >= self.length
        return {
            "key_facts": {"word": self.word},
            "needed_facts": ["word"],
            "fact_shown_step": {"word": 0},
            "step": self.t,
            "success": self.done,
            "admissible_actions": [f"say {w}" for w in WORDS] if query else ["next"],
            "state": {"phase": "query" if query else "walk"},
        }

    @staticmethod
    def vocabulary() -> list[str]:
        text = " ".join([RememberWordEnv.system_prompt, TASK, WALK, QUESTION, "say the end ."])
        return sorted(set(text.replace("{w}", "").split()) | set(WORDS))


if "familytest/RememberWord-v0" not in gym.registry:
    gym.register("familytest/RememberWord-v0", entry_point=RememberWordEnv)
ENV_ID = f"{__name__}:familytest/RememberWord-v0"
SIZES_UNSET = dict(budget=None, threshold=None, max_response_tokens=None, max_summary_tokens=None)
UNSET = CompactionConfig(**SIZES_UNSET)
PROTOCOLS = ("compacted", "folding", "memory-notes")


def own_chat() -> WordChatFormat:
    """A word-level tokenizer with every word the env declares (its family's included) and
    the words the runtime and the strategies write."""
    env = gym.make(ENV_ID)
    words = [*declared_words(env), *compaction_words()]
    for protocol in PROTOCOLS:
        config = CompactionConfig(protocol=protocol)
        words += config.strategy.words(config)
    env.close()
    return WordChatFormat(build_tokenizer(words))


def test_the_family_is_read_from_the_env_gymnasium_makes() -> None:
    env = gym.make(ENV_ID)
    assert family_of(env) is RememberWordEnv.family
    assert "memo" in declared_words(env) and "memo" not in RememberWordEnv.vocabulary()
    assert RememberWordEnv.family.note("word", "owl") == "the word is owl"
    assert family_of(gym.make("cxsim/KeyRecall-v0")) is cxsim.envs.KeyRecall.family


def test_preflight_derives_a_budget_under_which_the_oracle_solves_it() -> None:
    chat = own_chat()
    sized = preflight(EnvConfig(ENV_ID, {}), UNSET, chat)
    assert sized.sized and sized.budget > sized.threshold
    longest = word_summary({"word": "newt"}, {"state": {"phase": "query"}})
    assert sized.max_summary_tokens == len(chat.encode(longest)) + 1
    agents = sized.strategy.scripted_agents(ENV_ID, chat, config=sized)
    records = collect_rollouts(ENV_ID, {}, agents.actor, sized, range(12), chat).records
    assert all(r.success for r in records)
    assert all(r.compactions >= 1 for r in records)  # the word crossed a summary each time
    assert all("memo : the word is" in r.summaries[0] for r in records)


@pytest.mark.parametrize(
    ("protocol", "written"),
    [
        ("compacted", ["memo : the word is"]),
        ("folding", ["[assistant] find word", "[assistant] return"]),  # back before say <word>
        ("memory-notes", ["[assistant] note the word is"]),
    ],
)
def test_sft_demonstrations_are_made_for_it(protocol: str, written: list[str]) -> None:
    """The data ``cxsim sft`` trains on (its ``demonstrations``), under each strategy: the
    family's summaries, folding's goal and memory-notes' sentence written by its oracle."""
    chat = own_chat()
    env = EnvConfig(ENV_ID, {})
    sized = preflight(env, CompactionConfig(protocol=protocol, **SIZES_UNSET), chat)
    cfg = SFTRunConfig(
        env=env, compaction=sized, sft=SFTConfig(omission_rate=0.0), model=Model(policy=None)
    )
    data = demonstrations(cfg, chat, list(range(4)))
    assert [r.success for r in data.records] == [True] * 4
    assert sum(sum(s.trainable) for s in data.segments) > 0
    for record in data.records:
        assert all(text in record.transcript for text in written), record.transcript


def test_a_word_level_tokenizer_without_the_envs_words_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError) as error:  # cxsim's own words only
        preflight(EnvConfig(ENV_ID, {}), UNSET, WordChatFormat(default_tokenizer()))
    message = str(error.value)
    assert "\n" not in message and "lacks" in message and ENV_ID in message
    assert all(repr(w) in message for w in (*WORDS, "memo")), message
    env = gym.make(ENV_ID)
    without_memo = [w for w in declared_words(env) if w != "memo"]
    chat = WordChatFormat(build_tokenizer([*without_memo, *compaction_words()]))
    with pytest.raises(ValueError, match=r"lacks 1 word\(s\) of .*family's words.*: 'memo';"):
        preflight(EnvConfig(ENV_ID, {}), UNSET, chat)


def test_a_bpe_tokenizer_reads_the_envs_words_without_knowing_them() -> None:
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator([" ".join(cxsim.envs.vocabulary()), "system user assistant"], trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>")
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    sized = preflight(EnvConfig(ENV_ID, {}), UNSET, HFChatFormat(tokenizer))
    assert sized.sized


class NoFamilyEnv(RememberWordEnv):
    family = None  # type: ignore[assignment]


def test_an_env_without_a_family_needs_every_size_and_a_bad_family_is_refused() -> None:
    if "familytest/NoFamily-v0" not in gym.registry:
        gym.register("familytest/NoFamily-v0", entry_point=NoFamilyEnv)
    env_id = f"{__name__}:familytest/NoFamily-v0"
    with pytest.raises(ValueError, match=r"declares no EnvFamily.*--compaction\.budget"):
        preflight(EnvConfig(env_id, {}), UNSET, own_chat())
    with pytest.raises(ValueError, match=r"notes\['word'\].*\{name\} and \{value\} only"):
        EnvFamily(oracle=WordOracle, summary=word_summary, notes={"word": "the {fact} is"})
    with pytest.raises(TypeError, match="summary must be callable"):
        EnvFamily(oracle=WordOracle, summary="memo")  # type: ignore[arg-type]
