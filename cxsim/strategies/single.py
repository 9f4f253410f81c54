"""``single``: one window, never compacted (the paper's Single protocol).

A full window (``C - |h_t| < T_comp``) ends the episode, truncated and failed
(``window_full``). Nothing is reserved for a summary; the one window is one execution
segment whose trainable tokens are the responses. The scripted oracle only acts.
"""

from __future__ import annotations

from cxsim.strategies.base import ContextStrategy


class Single(ContextStrategy):
    """The base class's defaults: no compaction, no summary."""

    name = "single"
    help = "one window; the episode fails when it is full"


SINGLE = Single()
