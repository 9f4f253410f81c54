"""What each registered id needs by default: its keyword arguments and the text it produces.

``default_kwargs(env_id)`` gives the keyword arguments an id runs with when
``--env.kwargs`` is not passed (the registered preset, except for the main
job's KeyRecall). ``sample_episodes`` plays the oracle of the env's family
(``cxsim.envs.family``) and writes its perfect scripted summary before every
action, so that the compaction sizes (response and summary caps, threshold,
budget) can be measured in any chat format's tokens (``cxsim.compaction.fit_sizes``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from cxsim.envs.family import require_family
from cxsim.envs.scripted import ScriptedSummarizer, play

EnvKwargs = dict[str, int | float | bool]

DEFAULT_KWARGS: dict[str, EnvKwargs] = {
    "cxsim/KeyRecall-v0": {"obs_words_mean": 8.0, "obs_words_std": 2.0, "num_values": 4},
}
"""Per-id default kwargs where they differ from the registered preset (every other id: ``{}``).
KeyRecall-v0: the main job's task, short corridor text and 4 key values (chance 1/4); under
its published sizes 99% of episodes need 3 windows and none fits in one (Single: 0%)."""

PUBLISHED_SIZES: dict[str, dict[str, int]] = {
    "cxsim/KeyRecall-v0": {
        "budget": 200,
        "threshold": 72,
        "max_summary_tokens": 32,
        "max_response_tokens": 8,
    },
}
"""Sizes of published runs (docs/results.md): derived sizes are raised to these, never lowered
below them, so the published default run keeps its numbers in the word-level format."""


class DefaultKwargs(dict):
    """An id's default kwargs, tagged with that id.

    ``EnvConfig`` swaps tagged defaults for the chosen id's own, so that
    ``--env.env-id ID`` alone never passes one id's defaults to another;
    kwargs given explicitly are plain dicts and are kept as given.
    """

    def __init__(self, *args: Any, env_id: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env_id = env_id


def default_kwargs(env_id: str) -> DefaultKwargs:
    """The kwargs ``env_id`` runs with by default (a fresh dict tagged with the id)."""
    return DefaultKwargs(DEFAULT_KWARGS.get(env_id, {}), env_id=env_id)


@dataclass(frozen=True)
class EpisodeText:
    """The text of one oracle episode, and the perfect summary before each of its actions."""

    task: str
    actions: list[str]
    observations: list[str]
    summaries: list[str]
    """``summaries[t]``: the scripted summary (omission 0) written just before action ``t``."""
    commits: tuple[str, ...] = ()
    """The first words of the actions that commit to a solution (the family's ``commits``)."""


def sample_episodes(
    env_id: str, kwargs: dict[str, Any], episodes: int, seed: int = 0
) -> list[EpisodeText]:
    """Plays the oracle on seeds ``seed .. seed + episodes - 1`` and records the text.

    An env whose episodes differ in length by design (KeyRecall's horizon dial) names the
    reset options of its longest in ``longest_episode_options()``; one more episode, on
    seed ``seed + episodes`` with those options, is then added, so sizes derived from
    these texts hold the longest episode whatever the seeds drew.
    """
    env = gym.make(env_id, **kwargs)
    family = require_family(env, env_id)
    longest = getattr(env.unwrapped, "longest_episode_options", lambda: None)()
    plays: list[tuple[int, dict[str, Any] | None]] = [
        (s, None) for s in range(seed, seed + episodes)
    ]
    if longest is not None:
        plays.append((seed + episodes, longest))
    summarizer = ScriptedSummarizer(omission_rate=0.0, family=family)
    texts = []
    for s, options in plays:
        episode = play(env, family.oracle(), seed=s, options=options)
        everything = " ".join([episode.task, *episode.actions, *episode.observations])
        before = [episode.reset_info, *episode.infos[:-1]]
        summaries = [summarizer.summarize(everything, info) for info in before]
        texts.append(
            EpisodeText(
                episode.task, episode.actions, episode.observations, summaries, family.commits
            )
        )
    env.close()
    return texts
