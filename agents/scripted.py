"""Scripted agents behind the LM agent's interface (``cxsim.agent_api.Agent``), where the
entry points and tests have always imported them from.

The environment's oracle as an agent (``ScriptedAgent``, grounded in its context; the
``RandomAgent``; ``ground_action``) lives in :mod:`cxsim.strategies.scripted_oracle`, and
each strategy's own oracle in that strategy's module only (``FoldingOracle`` in
``cxsim.strategies.folding``, ...), so that the strategies, which build them, never import
back up into ``cxsim.agents``, and a strategy touches no module but its own. Rollouts of them are the SFT data: the
trainable tokens of their segments are exactly the scripted actions and summaries.
"""

from __future__ import annotations

from cxsim.strategies.scripted_oracle import RandomAgent, ScriptedAgent, ground_action

__all__ = ["RandomAgent", "ScriptedAgent", "ground_action"]
