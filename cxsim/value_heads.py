"""The value heads of the critic, one registry keyed by name: how the value of a prefix reads
the backbone (``--ppo.value-head``).

``VALUE_HEADS[name]`` is a :class:`ValueHead`: the module that turns the backbone's hidden
states (S, T, H) into the features the value of each prefix is read from. Every one is
causal: the value at token t reads positions <= t - 1 only, so it never changes when later
tokens change.

- ``context-ridge`` (default, with Monte-Carlo targets, ``--ppo.critic-lam 1.0``): the last
  hidden state, plus a value of its own added to the head's: a ridge regression of the
  return on which words the row's opening context holds (up to its first assistant header:
  a window's rebuilt context), solved in closed form before each critic update over the
  batches so far, each batch back weighted half as much
  (:class:`cxsim.value_pools.ContextRidge`). It reads the last summary from the first
  batches, where a trained head needs tens of steps, and keeps the earlier batches' failures
  when a batch has none.
- ``last``: the hidden state of the prefix's last token, as a language model reads its next
  token (no module); the default before ``context-ridge``, it explains about nothing of the
  outcome at the main task's last window (docs/results.md, "The tracking critic is the
  default");
- ``prefix-mean``: the mean of the hidden states of every attended position of the prefix
  (a causal cumulative mean; padding is left out);
- ``attention-pool``: a softmax-weighted mean of the prefix's hidden states, the weights
  from one learned query (``score_j = q . h_j / sqrt(H)``; the query starts at 0, so the
  pool starts as the prefix mean);
- ``words-pool``: the last hidden state plus an attention pool (as above) of the prefix's
  input embeddings: which words the context holds, whatever the last layer kept of them.
  On KeyRecall the outcome turns on one word of the last summary (``k1`` or ``unknown``),
  which the last layer, made to predict the next token, does not keep
  (docs/results.md, "The critic by segment");
- ``words-max``: the last hidden state plus the running elementwise maximum of the prefix's
  input embeddings (each at unit scale): whether the context holds a word is a large
  feature from the start, with nothing to learn but the head;
- ``words-seen``: the last hidden state plus the sum of one learned vector per distinct token
  id of the prefix (a table of its own, not the base's embeddings): linear in which words
  the context holds, so it reads them the same way on every base.

A head's entry says what its pool module is called with (``ValueHead.reads``):
``pool(hidden, attended)``; with ``reads="embeddings"`` ``pool(hidden, attended, embedded)``,
the backbone's input embeddings (S, T, H); with ``reads="ids"`` ``pool(hidden, attended,
input_ids)``, the token ids (S, T). With ``reads="context"`` ``pool(hidden, attended, input_ids, context)``,
``context`` (S, T) bool each row's opening context (``cxsim.segments.opening_context``). A pool with
``adds_value`` returns ``(features, value)``; a ``refit`` runs before each critic update.

The registry is torch-free (configs and ``--help`` read it); a head's pool module is built
from :mod:`cxsim.value_pools` when a critic is made. :mod:`cxsim.critics` re-exports it with the
value losses; :class:`cxsim.agents.critic.Critic` reads it for its head.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cxsim.plugins import Registry

if TYPE_CHECKING:
    from torch import nn

    from cxsim.ppo import GlobalSum, ScoredBatch


@dataclass(frozen=True)
class ValueHead:
    """How the critic reads a prefix's features from the backbone's hidden states."""

    pool: Callable[[int], nn.Module | None]
    """``hidden_size -> module`` mapping ``(hidden (S, T, H), attended (S, T) bool)`` to
    causal features (S, T, H) (position t reads positions <= t only); None: the hidden
    state itself (``last``)."""
    help: str
    """One line for ``--ppo.value-head``'s help."""
    reads: str = "hidden"
    """What the pool module takes besides the hidden states and the attended mask (S, T):
    nothing (``hidden``), the backbone's input embeddings (S, T, H) (``embeddings``), or the
    token ids (S, T) (``ids``)."""

    adds_value: bool = False
    """The pool returns ``(features, value (S, T))`` and its value is added to the head's (a
    scalar head only: ``--ppo.value-loss mse``)."""
    refit: Callable[[nn.Module, ScoredBatch, GlobalSum], None] | None = None
    """``(pool, scored batch, global_sum) -> None``, called by the critic update before its
    optimiser steps: a closed-form fit of the pool's own state (None: nothing)."""

    def __post_init__(self) -> None:
        if self.reads not in POOL_INPUTS:
            raise ValueError(f"ValueHead reads={self.reads!r}: choose one of {POOL_INPUTS}")


POOL_INPUTS = ("hidden", "embeddings", "ids", "context")
"""What a value head's pool may read (``ValueHead.reads``)."""


# --------------------------------------------------------------------------- heads


def _last(hidden_size: int) -> None:
    return None


def _prefix_mean(hidden_size: int) -> nn.Module:
    from cxsim.value_pools import PrefixMeanPool

    return PrefixMeanPool()


def _attention_pool(hidden_size: int) -> nn.Module:
    from cxsim.value_pools import AttentionPool

    return AttentionPool(hidden_size)


def _words_pool(hidden_size: int) -> nn.Module:
    from cxsim.value_pools import WordsPool

    return WordsPool(hidden_size)


def _words_max(hidden_size: int) -> nn.Module:
    from cxsim.value_pools import WordsMaxPool

    return WordsMaxPool()


def _words_seen(hidden_size: int) -> nn.Module:
    from cxsim.value_pools import WordsSeenPool

    return WordsSeenPool(hidden_size)


def _context_ridge(hidden_size: int) -> nn.Module:
    from cxsim.value_pools import ContextRidge

    return ContextRidge(hidden_size)


def _refit_context_ridge(pool: nn.Module, scored: ScoredBatch, global_sum: GlobalSum) -> None:
    """Each row with policy tokens: its return at the first of them, against the words of
    its opening context."""
    from cxsim.segments import OPENING_CONTEXT

    batch, mask = scored.batch, scored.policy_mask
    first = mask.long().argmax(dim=1, keepdim=True)
    targets = scored.returns.gather(1, first).squeeze(1)
    context = batch.extras[OPENING_CONTEXT]
    pool.refit(batch.token_ids, context, targets, mask.any(dim=1), global_sum)


VALUE_HEADS: Registry[ValueHead] = Registry(
    {
        "context-ridge": ValueHead(
            _context_ridge,
            "the last hidden state's value plus a ridge regression on the context's words",
            reads="context",
            adds_value=True,
            refit=_refit_context_ridge,
        ),
        "last": ValueHead(_last, "the prefix's last hidden state (a language model's reading)"),
        "prefix-mean": ValueHead(_prefix_mean, "the mean of the prefix's hidden states"),
        "attention-pool": ValueHead(
            _attention_pool, "the prefix's hidden states pooled by one learned query"
        ),
        "words-pool": ValueHead(
            _words_pool,
            "the last hidden state plus the prefix's input embeddings pooled by one query",
            reads="embeddings",
        ),
        "words-max": ValueHead(
            _words_max,
            "the last hidden state plus the running maximum of the prefix's input embeddings",
            reads="embeddings",
        ),
        "words-seen": ValueHead(
            _words_seen,
            "the last hidden state plus a learned vector for each distinct word of the prefix",
            reads="ids",
        ),
    },
    entry_type=ValueHead,
    kind="value head",
    group="cxsim.value_heads",
    declaration=(
        "pool=<function: hidden_size -> causal module or None>, help='one line'"
        "[, reads='embeddings' | 'ids' | 'context', adds_value=True, refit=<function>]"
    ),
)
"""Every value head by name; the first is the default. A name it does not hold is looked up
as a plug-in (``module:name`` or an entry point of group ``cxsim.value_heads``)."""
