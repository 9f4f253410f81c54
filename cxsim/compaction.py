"""Compaction protocols and their configuration (docs/method.md section 1).

The runtime (``cxsim.runtime``) drives environments under one of four
protocols:

- ``compacted``: the paper's protocol. Before each response, if
  ``C - |h_t| < T_comp`` the same policy writes a summary of ``h_t`` and the
  window is rebuilt as ``(s) + [u] + u_resume(S) + last k steps``.
- ``single``: no compaction; the episode fails when the window is full.
- ``sliding-window``: like ``compacted`` but without a summary: the window is
  rebuilt as ``(s) + (u) + last k steps`` (a baseline).
- ``external-summarizer``: like ``compacted`` but another agent (a scripted or
  frozen summarizer) writes the summary (the paper's Table 1 setting).

"The window is full" has one meaning for every protocol: ``C - |h_t| < T_comp``
before a response. Compacting protocols compact then (while compactions are
left); otherwise the episode ends truncated and failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # annotations only: importing agents pulls torch, slowing every --help
    from cxsim.agents.chat import ChatFormat

Protocol = Literal["compacted", "single", "sliding-window", "external-summarizer"]
PROTOCOLS: tuple[Protocol, ...] = ("compacted", "single", "sliding-window", "external-summarizer")
SUMMARIZING: tuple[Protocol, ...] = ("compacted", "external-summarizer")


@dataclass(frozen=True)
class CompactionConfig:
    """How contexts are bounded and compacted. Sizes are in tokens."""

    protocol: Protocol = "compacted"
    """``compacted`` (paper), ``single`` (no compaction), ``sliding-window`` (no summary),
    or ``external-summarizer`` (another agent writes the summaries)."""
    budget: int = 320
    """Working budget C: no context (window or summary prompt + summary) ever exceeds it."""
    threshold: int = 128
    """T_comp: compact (or, with no compaction left, fail) before a response when
    ``budget - |h_t| < threshold``. Needs ``threshold >= |q_sum| + max_summary_tokens``
    plus the assistant header and one response token."""
    max_response_tokens: int = 16
    """Cap on one assistant response, its end token included (the paper: equal to the threshold)."""
    max_summary_tokens: int = 48
    """Cap on one summary, its end token included."""
    summary_instruction: str = "summary : keep in mind what to do to finish the task ."
    """Text of q_sum, the instruction that asks for a summary."""
    resume_instruction: str = "you are given a summary of the task :"
    """Text of the resume turn u_resume(S) that carries the summary into the rebuilt window."""
    keep_task: bool = False
    """Re-insert the task u into a rebuilt window (paper: no, the summary must carry it).
    ``sliding-window`` always keeps the task (it has no summary to carry it)."""
    keep_last: int = 2
    """k: steps (response + observation) copied into a rebuilt window; lowered to
    k-1, ..., 0 until the rebuilt window leaves at least ``threshold`` tokens."""
    max_compactions: int = 3
    """Compactions allowed per episode (paper: 3, i.e. 4 windows); also bounds
    ``sliding-window`` rebuilds."""
    max_turns: int = 250
    """Assistant responses per episode (paper: 250); the episode is truncated and fails after."""

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(
                f"protocol {self.protocol!r} is unknown: set --compaction.protocol to one of "
                f"{', '.join(PROTOCOLS)}"
            )
        for name in (
            "budget",
            "threshold",
            "max_response_tokens",
            "max_summary_tokens",
            "max_turns",
        ):
            if getattr(self, name) < 1:
                raise ValueError(
                    f"{name} ({getattr(self, name)}) must be >= 1: raise --compaction.{name}"
                )
        for name in ("keep_last", "max_compactions"):
            if getattr(self, name) < 0:
                raise ValueError(
                    f"{name} ({getattr(self, name)}) must be >= 0: raise --compaction.{name}"
                )
        if self.threshold > self.budget:
            raise ValueError(
                f"threshold ({self.threshold}) must be <= budget ({self.budget}): lower "
                "--compaction.threshold or raise --compaction.budget"
            )
        if self.summarizes and self.max_summary_tokens >= self.threshold:
            raise ValueError(
                f"max_summary_tokens ({self.max_summary_tokens}) must be < threshold "
                f"({self.threshold}) so that q_sum and the summary fit: lower "
                "--compaction.max_summary_tokens or raise --compaction.threshold"
            )
        for name in ("summary_instruction", "resume_instruction"):
            if not getattr(self, name).strip():
                raise ValueError(f"{name} is empty: set --compaction.{name} to a short instruction")

    @property
    def summarizes(self) -> bool:
        """True for the protocols whose rebuilt windows carry a summary."""
        return self.protocol in SUMMARIZING

    @property
    def compacts(self) -> bool:
        """True for the protocols that rebuild a full window instead of failing."""
        return self.protocol != "single"

    def summary_reserve(self, chat: ChatFormat) -> int:
        """Tokens kept free in a window while a compaction is left: ``|q_sum| + max_summary_tokens``.

        Responses and observations never eat into it, so the summary prompt plus
        the summary always fits in the budget.
        """
        if not self.summarizes:
            return 0
        return len(chat.summary_request(self.summary_instruction)) + self.max_summary_tokens

    def validate(self, chat: ChatFormat, system_prompt: str) -> None:
        """Checks that need the chat format; raises ValueError saying what to change.

        - ``threshold >= |q_sum| + max_summary_tokens + |assistant header| + 1``, so
          that whenever a response is allowed at least one token of it fits;
        - the smallest rebuilt window (system prompt + resume turn with a summary of
          ``max_summary_tokens`` tokens, no steps) leaves ``threshold`` tokens free.
        Task lengths vary per episode: a rebuilt window with ``keep_task`` that does
        not fit ends that episode (truncated), it is not a configuration error.
        """
        header = len(chat.assistant_prefix())
        q_sum = len(chat.summary_request(self.summary_instruction)) if self.summarizes else 0
        summary = self.max_summary_tokens if self.summarizes else 0
        need = q_sum + summary + header + 1
        if self.threshold < need:
            raise ValueError(
                f"threshold ({self.threshold}) must be >= |q_sum| ({q_sum}) + max_summary_tokens "
                f"({summary}) + assistant header ({header}) + 1 = {need}: raise "
                "--compaction.threshold or lower --compaction.max_summary_tokens"
            )
        if not self.compacts:
            return
        rebuilt = len(chat.system(system_prompt))
        if self.summarizes:
            rebuilt += len(chat.resume(self.resume_instruction, "")) + self.max_summary_tokens
        if self.budget - rebuilt < self.threshold:
            raise ValueError(
                f"budget ({self.budget}) is too small for a rebuilt window: system prompt and "
                f"resume turn with a full summary take {rebuilt} tokens, leaving "
                f"{self.budget - rebuilt} < threshold ({self.threshold}); raise "
                "--compaction.budget or lower --compaction.threshold / max_summary_tokens"
            )
