"""Agents: word tokenizer, chat formats, policies and the critic (CONTRACTS.md, Agents)."""

from cxsim.agents.chat import ChatFormat, ChatOptions, HFChatFormat, WordChatFormat
from cxsim.agents.critic import Critic
from cxsim.agents.models import (
    POLICY_PRESETS,
    build_policy,
    count_parameters,
    load_policy,
    save_policy,
    sequence_logprobs,
)
from cxsim.agents.tokenizer import (
    SPECIAL_TOKENS,
    build_tokenizer,
    compaction_words,
    default_tokenizer,
    load_tokenizer,
)

__all__ = [
    "POLICY_PRESETS",
    "SPECIAL_TOKENS",
    "ChatFormat",
    "ChatOptions",
    "Critic",
    "HFChatFormat",
    "WordChatFormat",
    "build_policy",
    "build_tokenizer",
    "compaction_words",
    "count_parameters",
    "default_tokenizer",
    "load_policy",
    "load_tokenizer",
    "save_policy",
    "sequence_logprobs",
]
