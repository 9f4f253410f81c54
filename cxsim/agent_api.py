"""The interface between the compaction runtime and an agent (CONTRACTS.md, Agents).

The runtime owns every row's context (one row per environment) and tells the
agent only what was appended since the agent last answered that row, so an LM
agent can keep its KV cache across turns: a row's context is the
concatenation of the ``append`` chunks of its requests and the agent's own
responses, until a request with ``reset=True`` starts it again (a new episode,
or a window rebuilt after compaction).

Which agent answers a request is the context strategy's (``cxsim.strategies``): every
``act`` request goes to the acting agent, and a ``summarize`` request to it as well or,
when the strategy has another agent write the summaries, to that agent, which holds none
of the row and is given the whole summary prompt with ``reset=True``. A strategy that
opens child windows (``folding``) restarts the row's context (``reset=True``) when a child
window opens and when its parent resumes. The runtime reaches either only through
:class:`Agent`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

RequestKind = Literal["act", "summarize"]


@dataclass(frozen=True)
class TurnRequest:
    """One row's turn: what was appended to its context, and how much the agent may write."""

    row: int
    """Row (environment slot) this request belongs to; the agent keys its state by it."""
    kind: RequestKind
    """``act``: an assistant response to the environment; ``summarize``: a summary of the context."""
    append: list[int]
    """Tokens added to the row's context since the agent's last response on this row
    (headers, the observation, the summary request ...). Never empty."""
    reset: bool
    """True when the row's context restarts from ``append`` (new episode or rebuilt window)."""
    max_new_tokens: int
    """Most tokens the agent may generate, the end token included (>= 1)."""
    context_text: str
    """The row's whole context as plain text (special tokens dropped), for scripted agents."""
    info: dict[str, Any]
    """The environment's latest ``info`` (ground truth; only scripted agents may read it)."""
    depth: int = 0
    """Child windows open above this row's window (0: the episode's own window; a strategy
    that opens child windows, ``folding``, makes it more). A request with ``reset=True``
    after a response that opened or closed a child window starts that window."""


@dataclass(frozen=True)
class TurnResponse:
    """What the agent wrote for one request."""

    token_ids: list[int]
    """Generated tokens; ends with ``chat.end_id`` when ``finished``."""
    logprobs: list[float]
    """Behaviour log-prob of each generated token under the sampling distribution
    (temperature-scaled softmax; top-p is not part of it). 0.0 for scripted agents."""
    text: str
    """The response decoded as plain text (special tokens dropped)."""
    finished: bool
    """True when the response ended with ``chat.end_id`` (it is the last of ``token_ids``)."""

    @classmethod
    def scripted(cls, ids: list[int], chat: Any) -> TurnResponse:
        """A response whose tokens were chosen, not sampled (log-probs 0.0): ``chat`` decodes
        them and names the end token (``decode``, ``end_id``)."""
        return cls(ids, [0.0] * len(ids), chat.decode(ids), bool(ids) and ids[-1] == chat.end_id)


class Agent(Protocol):
    """Anything that answers a batch of turn requests, one response per request, in order."""

    def respond(self, requests: list[TurnRequest]) -> list[TurnResponse]: ...
