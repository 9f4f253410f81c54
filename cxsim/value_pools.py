"""The pool modules of the critic's value heads: what each head reads of a prefix.

Every pool is causal (the feature at token t reads positions <= t only) and runs in float32;
:data:`cxsim.value_heads.VALUE_HEADS` says which pool each head builds and what it is called
with (``ValueHead.reads``), and :class:`cxsim.agents.critic.Critic` calls it
(``pool_features``). They sit below both, so the registry and the critic import them and
never each other's module back.

Shapes: S = rows (segments), T = padded length, H = hidden size.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn


class PrefixMeanPool(nn.Module):
    """``features[t] = mean(hidden[j] for attended j <= t)``: a causal cumulative mean in
    float32; 0 where no position is attended yet."""

    def forward(self, hidden: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """hidden (S, T, H), attended (S, T) bool -> (S, T, H) float32."""
        weight = attended.to(torch.float32)[..., None]
        total = (hidden.float() * weight).cumsum(dim=1)
        return total / weight.cumsum(dim=1).clamp(min=1.0)


class AttentionPool(nn.Module):
    """``features[t] = sum_{j <= t} softmax_j(q . h_j / sqrt(H)) h_j`` over attended j, with
    one learned query ``q`` (zero at the start: the prefix mean). The softmax of each t
    is normalised by ``logcumsumexp`` of the scores up to t, so no later score enters it;
    query positions go in chunks of ``chunk`` so the (T, T) weights stay small."""

    def __init__(self, hidden_size: int, chunk: int = 256):
        super().__init__()
        self.query = nn.Parameter(torch.zeros(hidden_size))
        self.chunk = chunk

    def forward(self, hidden: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """hidden (S, T, H), attended (S, T) bool -> (S, T, H) float32."""
        h = hidden.float()
        width = h.shape[1]
        scores = (h @ self.query.float()) / math.sqrt(h.shape[-1])  # (S, T)
        # a finite floor, not -inf: a prefix with nothing attended gets weights 0, not NaN
        scores = scores.masked_fill(~attended, -1e9)
        log_norm = torch.logcumsumexp(scores, dim=1)  # (S, T): position t reads scores <= t
        causal = torch.ones(width, width, dtype=torch.bool, device=h.device).tril()
        out = torch.empty_like(h)
        for start in range(0, width, self.chunk):
            stop = min(start + self.chunk, width)
            keep = causal[start:stop, :stop] & attended[:, None, :stop]  # (S, q, k)
            weights = torch.exp(scores[:, None, :stop] - log_norm[:, start:stop, None])
            out[:, start:stop] = (weights * keep) @ h[:, :stop]
        return out


def unit_rms(x: torch.Tensor) -> torch.Tensor:
    """``x`` scaled to root-mean-square 1 over its last dimension (0 stays 0)."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-12)


class WordsPool(nn.Module):
    """``features[t] = hidden[t] + rms(pool(embedded)[t])``: the last hidden state plus an
    :class:`AttentionPool` of the prefix's input embeddings (which words the context holds,
    wherever they stand), scaled to unit root-mean-square like a normed last layer. The
    pool's query starts at 0, so its part starts as the prefix mean of the embeddings."""

    def __init__(self, hidden_size: int, chunk: int = 256):
        super().__init__()
        self.words = AttentionPool(hidden_size, chunk)

    def forward(
        self, hidden: torch.Tensor, attended: torch.Tensor, embedded: torch.Tensor
    ) -> torch.Tensor:
        """hidden, embedded (S, T, H), attended (S, T) bool -> (S, T, H) float32."""
        # every word and their pool at a normed layer's scale (unit root-mean-square): raw
        # embeddings are ~30x smaller, too small for the query to pick a word out
        words = self.words(unit_rms(embedded.float()), attended)
        return hidden.float() + unit_rms(words)


class WordsMaxPool(nn.Module):
    """``features[t] = hidden[t] + rms(max_{attended j <= t} rms(embedded[j]))``: the last
    hidden state plus the running elementwise maximum of the prefix's input embeddings, each
    at unit root-mean-square. A word anywhere in the prefix lifts the coordinates where its
    embedding is large, however long the prefix, so whether the context holds a word is a
    large, fixed feature from the first step (no parameters: the head alone learns to read
    it). 0 where no position is attended yet."""

    def forward(
        self, hidden: torch.Tensor, attended: torch.Tensor, embedded: torch.Tensor
    ) -> torch.Tensor:
        """hidden, embedded (S, T, H), attended (S, T) bool -> (S, T, H) float32."""
        words = unit_rms(embedded.float()).masked_fill(~attended[..., None], -1e4)
        running = torch.cummax(words, dim=1).values  # position t reads positions <= t
        running = torch.where(attended.cumsum(dim=1)[..., None] > 0, running, 0.0)
        return hidden.float() + unit_rms(running)


def first_occurrences(
    input_ids: torch.Tensor, counted: torch.Tensor, buckets: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(S, T) bool: position t holds the first occurrence of its word among the ``counted``
    positions of its row (padding and uncounted positions never count); and (S, T) each
    token's slot, ``id % buckets``."""
    width = input_ids.shape[1]
    slot = input_ids.long() % buckets
    position = torch.arange(width, device=input_ids.device).expand_as(slot)
    first_at = torch.full((slot.shape[0], buckets), width, dtype=torch.long, device=slot.device)
    first_at.scatter_reduce_(1, slot, position.masked_fill(~counted, width), "amin")
    return (first_at.gather(1, slot) == position) & counted, slot


class WordsSeenPool(nn.Module):
    """``features[t] = hidden[t] + sum(table[w] for each distinct word w of the prefix <= t)``:
    the last hidden state plus one learned vector per word the prefix holds, counted once
    however often it appears. Linear in which words were seen, so a head learns a weight per
    word (a key after ``the key is``, or ``unknown``) from the first step, whatever the base's
    embeddings; token ids share ``buckets`` rows (``id % buckets``), so a large vocabulary
    costs at most ``buckets x H`` parameters. The table starts at N(0, ``scale``^2) so the
    head's gradient reaches it (a zero table and a zero head would stay at 0)."""

    def __init__(self, hidden_size: int, buckets: int = 4096, scale: float = 0.1):
        super().__init__()
        self.buckets = buckets
        self.table = nn.Parameter(torch.randn(buckets, hidden_size) * scale)

    def forward(
        self, hidden: torch.Tensor, attended: torch.Tensor, input_ids: torch.Tensor
    ) -> torch.Tensor:
        """hidden (S, T, H), attended (S, T) bool, input_ids (S, T) long -> (S, T, H) float32."""
        first, bucket = first_occurrences(input_ids, attended, self.buckets)
        seen = (first[..., None].float() * self.table.float()[bucket]).cumsum(dim=1)
        return hidden.float() + seen


class ContextRidge(nn.Module):
    """A value added to the head's: ``bias + sum(weight[w] for each distinct word w of the row's
    context)``, the context being the row's opening context
    (:func:`cxsim.segments.opening_context`: the tokens up to its first assistant header, a
    window's rebuilt context), so it is one number per row, the same at every position past
    the context and causal within it. ``weight`` and ``bias`` are not trained by the optimiser:
    :meth:`refit` solves a ridge regression of each row's return at its first policy token on
    which words its context holds (0/1 each; token ids share ``buckets`` slots, ``id %
    buckets``), over the batches seen so far, each batch back weighted ``decay`` times less,
    through running sums (so the fit is exact, resumes from the saved buffers, and sums over
    ranks). A least-squares value on the words of the context, as linear critics on sparse
    features are fit; the critic's own head learns what it leaves over. The features passed on
    are the hidden states, unchanged."""

    def __init__(
        self, hidden_size: int, buckets: int = 1024, penalty: float = 3.0, decay: float = 0.5
    ):
        super().__init__()
        self.buckets, self.penalty, self.decay = buckets, penalty, decay
        self.register_buffer("weight", torch.zeros(buckets))
        self.register_buffer("bias", torch.zeros(()))
        # decayed sums over the rows fit so far: X^T X, X^T y, sum x, and (count, sum y)
        self.register_buffer("gram", torch.zeros(buckets, buckets, dtype=torch.float64))
        self.register_buffer("moment", torch.zeros(buckets, dtype=torch.float64))
        self.register_buffer("sum_x", torch.zeros(buckets, dtype=torch.float64))
        self.register_buffer("totals", torch.zeros(2, dtype=torch.float64))

    def forward(
        self, hidden: torch.Tensor, attended: torch.Tensor, input_ids: torch.Tensor,
        context: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """-> (the hidden states (S, T, H) float32, the added value (S, T) float32)."""
        first, slot = first_occurrences(input_ids, context, self.buckets)
        added = (first.float() * self.weight[slot]).cumsum(dim=1) + self.bias
        return hidden.float(), added

    @torch.no_grad()
    def refit(
        self,
        input_ids: torch.Tensor,
        context: torch.Tensor,
        targets: torch.Tensor,
        rows: torch.Tensor,
        global_sum: Callable[[torch.Tensor], torch.Tensor],
    ) -> None:
        """Add the ``rows`` (S,) bool of this batch (targets (S,)) to the decayed sums, summed
        over ranks by ``global_sum``, and solve for ``weight`` and ``bias``."""
        first, slot = first_occurrences(input_ids, context, self.buckets)
        words = torch.zeros(len(slot), self.buckets, dtype=torch.float64, device=slot.device)
        words.scatter_add_(1, slot, first.double()).clamp_(max=1.0)
        x, y = words[rows], targets[rows].double()
        now = [x.T @ x, x.T @ y, x.sum(0), torch.stack([y.new_tensor(len(y)), y.sum()])]
        for total, part in zip((self.gram, self.moment, self.sum_x, self.totals), now, strict=True):
            total.mul_(self.decay).add_(global_sum(part))
        count, sum_y = self.totals
        if float(count) == 0.0:
            return
        used = self.gram.diagonal() > 0  # slots some fitted context held
        mean_x, mean_y = self.sum_x[used] / count, sum_y / count
        centred = self.gram[used][:, used] - count * torch.outer(mean_x, mean_x)
        cross = self.moment[used] - count * mean_x * mean_y
        eye = torch.eye(int(used.sum()), dtype=torch.float64, device=centred.device)
        beta = torch.linalg.solve(centred + self.penalty * eye, cross)
        self.weight.zero_()
        self.weight[used] = beta.float()
        self.bias.fill_(float(mean_y - mean_x @ beta))
