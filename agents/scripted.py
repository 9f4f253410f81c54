"""Scripted agents behind the LM agent's interface (``cxsim.agent_api.Agent``), where the
entry points and tests have always imported them from.

The environment's oracle as an agent (``ScriptedAgent``, grounded in its context; the
``RandomAgent``; ``ground_action``) lives in :mod:`cxsim.strategies.scripted_oracle`, and
each strategy's own oracle in that strategy's module, so that the strategies, which build
them, never import back up into ``cxsim.agents``. Rollouts of them are the SFT data: the
trainable tokens of their segments are exactly the scripted actions and summaries.
"""

from __future__ import annotations

from cxsim.strategies.folding import FoldingOracle
from cxsim.strategies.memory_notes import NotingOracle
from cxsim.strategies.scripted_oracle import RandomAgent, ScriptedAgent, ground_action
from cxsim.strategies.self_compaction import CompactingOracle

__all__ = [
    "CompactingOracle",
    "FoldingOracle",
    "NotingOracle",
    "RandomAgent",
    "ScriptedAgent",
    "ground_action",
]
