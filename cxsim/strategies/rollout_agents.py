"""The agents a rollout under a context strategy plays, and how its scripted oracle plays.

:class:`RolloutAgents` is what a strategy's ``scripted_agents`` returns (and what the
entry points hand the runtime): the actor and, where another agent writes the summaries,
that summarizer. :class:`ScriptedOptions` are the scripted oracle's settings, passed whole
through ``ContextStrategy.scripted_agents`` (with a sized config or without) to every strategy
that wraps the oracle.

Like ``base.py``, this module imports neither torch nor the agents; the oracle
(:mod:`cxsim.strategies.scripted_oracle`) is imported when one is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from cxsim.agent_api import Agent
    from cxsim.agents.chat import ChatFormat


@dataclass(frozen=True)
class ScriptedOptions:
    """How the scripted oracle plays (``cxsim.strategies.scripted_oracle.ScriptedAgent``'s
    arguments): what :meth:`ContextStrategy.scripted_agents` passes on to every scripted
    agent."""

    omission_rate: float = 0.0
    """Probability that the scripted summarizer drops each needed fact."""
    seed: int = 0
    """Seed of the summarizer's omissions and the oracle's noise."""
    epsilon: float = 0.0
    """Probability of a uniformly random admissible action (a noisy oracle)."""
    skip_rate: float = 0.0
    """Probability of skipping each optional action of the oracle (KeyRecallActive's
    ``open box``), doing its stand-in instead."""

    def oracle(self, env_id: str, chat: ChatFormat) -> Agent:
        """The environment's scripted oracle with these options."""
        from cxsim.strategies.scripted_oracle import ScriptedAgent

        return ScriptedAgent(
            env_id, chat, omission_rate=self.omission_rate, seed=self.seed,
            epsilon=self.epsilon, skip_rate=self.skip_rate,
        )  # fmt: skip


class RolloutAgents(NamedTuple):
    """The agents a rollout under a strategy needs: the actor and, where the strategy has
    another agent write the summaries, that summarizer."""

    actor: Agent
    summarizer: Agent | None = None
