"""Oracle pre-flight: before any training or evaluation, can the task be solved at all?

``preflight`` first checks that a word-level policy's tokenizer holds every word the
environment declares (its vocabulary, system prompt and family's words) and the compaction
instructions (one line names those it lacks; a BPE tokenizer reads anything). It then
derives the compaction sizes left unset (``None``) from the oracle episodes of the
environment's family (``cxsim.envs.family``) in the chat format's own tokens
(``cxsim.compaction.fit_sizes``), and runs a few episodes of the scripted
oracle with perfect summaries under the config's context strategy (Compacted by
default). A run whose settings leave even the oracle unable to finish its tasks
(observations that overflow the window, episodes longer than the windows allow, a
strategy that drops what the task needs) would train and evaluate to 0 without
any error; the pre-flight stops it first and says by how much it failed.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

import gymnasium as gym

from cxsim.agents.chat import ChatFormat
from cxsim.compaction import CompactionConfig, fit_sizes
from cxsim.config import EnvConfig
from cxsim.envs.defaults import PUBLISHED_SIZES, EpisodeText, sample_episodes
from cxsim.envs.family import family_of
from cxsim.runtime import check_env_words, collect_rollouts

SIZING_EPISODES = 128
"""Oracle episodes whose text sizes the window (their longest pieces, and all of them must fit)."""
PREFLIGHT_SEED = 50_000
"""First task seed of the pre-flight (apart from the sizing episodes' seeds 0 .. 127)."""


@lru_cache(maxsize=64)
def _episodes(env_id: str, kwargs: tuple[tuple[str, int | float | bool], ...]) -> list[EpisodeText]:
    return sample_episodes(env_id, dict(kwargs), SIZING_EPISODES)


def preflight(
    env: EnvConfig,
    compaction: CompactionConfig,
    chat: ChatFormat,
    episodes: int = 16,
    min_solved: float = 0.8,
) -> CompactionConfig:
    """``compaction`` with its unset sizes derived, once the oracle solves the task under it.

    The scripted oracle (omission rate 0: the scripted agents of the config's context
    strategy) plays ``episodes`` tasks under that strategy with the sized config; fewer
    than ``min_solved`` of them solved raises a ValueError with the numbers (solved, end
    reasons, sizes).
    An environment that declares no family (``cxsim.envs.family``) has no oracle: its sizes
    must all be given, and it skips the pre-flight. Before all that, a word-level ``chat``
    must hold every word the env declares (``cxsim.runtime.check_env_words``).
    """
    made = gym.make(env.env_id, **env.kwargs)
    try:
        check_env_words(made, env.env_id, env.system_prompt, compaction, chat)
        family = family_of(made)
    finally:
        made.close()
    if family is None:
        if not compaction.sized:
            raise ValueError(
                f"{env.env_id} has no scripted oracle to derive the window sizes from (its class "
                "declares no EnvFamily); set --compaction.budget, --compaction.threshold, "
                "--compaction.max-response-tokens and --compaction.max-summary-tokens, or "
                'declare its family (docs/environments.md, "Your own environment")'
            )
        compaction.validate(chat, env.system_prompt)
        return compaction
    if compaction.sized:
        sized = compaction
    else:
        texts = _episodes(env.env_id, tuple(sorted(env.kwargs.items())))
        floors = PUBLISHED_SIZES.get(env.env_id)
        sized = fit_sizes(compaction, chat, env.system_prompt, texts, floors)
    agents = sized.strategy.scripted_agents(env.env_id, chat, config=sized)
    seeds = list(range(PREFLIGHT_SEED, PREFLIGHT_SEED + episodes))
    records = collect_rollouts(
        env.env_id, env.kwargs, agents.actor, sized, seeds, chat, agents.summarizer
    ).records
    solved = sum(r.success for r in records)
    if solved < min_solved * episodes:
        ends = Counter(r.end_reason for r in records if not r.success)
        why = ", ".join(f"{reason} {n}" for reason, n in ends.most_common())
        if ends.get("terminated", 0) * 2 >= sum(ends.values()):  # it ran out of facts, not room
            raise ValueError(
                f"pre-flight failed: {sized.protocol} cannot serve {env.env_id}: the scripted "
                f"oracle solved {solved}/{episodes} tasks and answered wrong on "
                f"{ends['terminated']} (failures: {why}): the context it keeps "
                f"({sized.strategy.help}) lost facts the task needed; choose another "
                "--compaction.protocol or change --env.kwargs"
            )
        raise ValueError(
            f"pre-flight failed: the scripted oracle with perfect summaries solved {solved}/"
            f"{episodes} {env.env_id} tasks under {sized.protocol} (failures: {why}) with budget "
            f"{sized.budget}, threshold {sized.threshold}, max_response_tokens "
            f"{sized.max_response_tokens}, max_summary_tokens {sized.max_summary_tokens}, "
            f"max_compactions {sized.max_compactions}; leave the sizes unset to derive them, or "
            "raise --compaction.budget / --compaction.threshold, or change --env.kwargs"
        )
    return sized
