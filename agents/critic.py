"""Critic: a copy of the policy's transformer backbone plus a value head.

The head reads the backbone's hidden states as the configured value head says
(``cxsim.critics.VALUE_HEADS``: the prefix's last hidden state, their mean, an attention
pool, or the last hidden state plus a pool of the input embeddings) and gives one scalar
or, for a histogram loss, logits over K value bins whose expectation is the value
(``cxsim.critics.VALUE_LOSSES``).

Shapes: S = rows (segments), T = padded length, H = hidden size, K = value bins.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModel, PreTrainedModel

from cxsim.agents.models import decoder_of

HEAD_FILE = "value_head.safetensors"
"""Value-head weights (and the pool's, prefixed ``pool.``), saved next to the backbone's own
files."""
HEAD_CONFIG_FILE = "value_head.json"
"""The value head's name and bin values; a critic saved without it has the ``last`` head and
a scalar output."""
POOL_PREFIX = "pool."


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


def pool_features(
    pool: nn.Module | None,
    reads: str,
    hidden: torch.Tensor,
    attended: torch.Tensor,
    embedded: torch.Tensor | None = None,
    input_ids: torch.Tensor | None = None,
    context: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """What a value head reads: ``hidden`` itself (no pool), or the pool of it and of what the
    head's entry says it ``reads`` (``cxsim.critics.ValueHead.reads``: nothing more, the input
    embeddings, the token ids, or the token ids and each row's opening context), in float32. A
    pool that adds a value of its own (``ValueHead.adds_value``) returns (features, value)."""
    if pool is None:
        return hidden
    extra = {
        "hidden": (),
        "embeddings": (embedded,),
        "ids": (input_ids,),
        "context": (input_ids, context),
    }[reads]
    with torch.autocast(hidden.device.type, enabled=False):  # sums and softmax in fp32
        return pool(hidden, attended, *extra)


class Critic(nn.Module):
    """`values[s, t] = V(features[s, t-1])`: V of the prefix tok_<t (CONTRACTS.md alignment).

    So values[:, t] estimates the return before token t is emitted, which is the
    baseline for the action at position t. Position 0 has no prefix and holds 0
    (it is never trainable); padded positions hold 0 too. The features are the
    backbone's hidden states, or what ``pool`` makes of them (causally); the head
    gives a scalar, or logits over the bins of ``support`` whose expectation is V.
    """

    def __init__(
        self,
        backbone: PreTrainedModel,
        head: nn.Linear,
        pool: nn.Module | None = None,
        support: Sequence[float] | None = None,
        value_head: str = "last",
        reads: str = "hidden",
        adds_value: bool = False,
    ):
        super().__init__()
        outputs = 1 if support is None else len(support)
        hidden_size = backbone.config.hidden_size
        if head.out_features != outputs or head.in_features != hidden_size:
            raise ValueError(
                f"head must be Linear({hidden_size}, {outputs}); "
                f"got Linear({head.in_features}, {head.out_features})"
            )
        self.backbone = backbone
        self.head = head
        self.pool = pool
        self.value_head = value_head
        self.reads = reads  # what the pool takes besides the hidden states (ValueHead.reads)
        self.adds_value = adds_value  # the pool returns (features, a value added to the head's)
        self.support_values = None if support is None else tuple(float(v) for v in support)
        support_tensor = None
        if support is not None:
            support_tensor = torch.tensor(self.support_values, device=head.weight.device)
        self.register_buffer("support", support_tensor, persistent=False)

    @classmethod
    def from_policy(
        cls,
        policy: PreTrainedModel,
        value_head: str = "last",
        support: Sequence[float] | None = None,
    ) -> Critic:
        """Deep-copy the policy's decoder (no shared parameters) and add a zero value head.

        A zero head starts every value at 0 (with bins: at the mean of their values); its
        gradient reaches the backbone from the second update on. ``value_head`` names an
        entry of ``cxsim.critics.VALUE_HEADS``; ``support``: the bin values of a histogram
        head (None: a scalar head).
        """
        from cxsim.critics import VALUE_HEADS

        backbone = copy.deepcopy(decoder_of(policy))
        outputs = 1 if support is None else len(support)
        head = nn.Linear(backbone.config.hidden_size, outputs)
        nn.init.zeros_(head.weight)
        nn.init.zeros_(head.bias)
        entry = VALUE_HEADS[value_head]
        pool = entry.pool(backbone.config.hidden_size)
        if pool is not None:
            pool = pool.to(device=policy.device)
        head = head.to(device=policy.device)
        return cls(backbone, head, pool, support, value_head, entry.reads, entry.adds_value)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        return_logits: bool = False,
        context: torch.Tensor | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor | None]:
        """input_ids, attention_mask: (S, T), padding on either side -> values (S, T), float32;
        with ``return_logits``, ``(values, logits)``: logits (S, T, K) float32 aligned as the
        values (0 where the values are), None for a scalar head. ``context`` (S, T) bool, each
        row's opening context (``cxsim.segments.opening_context``): needed by a head that
        reads it (``ValueHead.reads == "context"``)."""
        assert input_ids.dim() == 2 and input_ids.shape == attention_mask.shape, (
            f"input_ids {tuple(input_ids.shape)} and attention_mask "
            f"{tuple(attention_mask.shape)} must be the same (S, T)"
        )
        mask = attention_mask.long()
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        hidden = self.backbone(
            input_ids=input_ids, attention_mask=mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state  # (S, T, H)
        added = None  # (S, T) a value the pool adds to the head's (ValueHead.adds_value)
        if self.pool is not None:
            embedded = None
            if self.reads == "embeddings":
                embedded = self.backbone.get_input_embeddings()(input_ids)
            if self.reads == "context" and context is None:
                raise ValueError(
                    f"value head {self.value_head!r} reads each row's opening context: pass "
                    "context= to the critic (SegmentBatch.with_opening_context)"
                )
            features = pool_features(
                self.pool, self.reads, hidden, mask.bool(), embedded, input_ids, context
            )
            hidden, added = features if self.adds_value else (features, None)
        # Same positions as sequence_logprobs: token t and its predecessor are both real.
        scored = (mask[:, 1:] * mask[:, :-1]).bool()
        if self.support is None:
            v_prev = (
                self.head(hidden[:, :-1].to(self.head.weight.dtype)).squeeze(-1).float()
            )  # (S, T-1)
            if added is not None:
                v_prev = v_prev + added[:, :-1]
            zeros = v_prev.new_zeros(input_ids.shape[0], 1)
            values = torch.cat([zeros, torch.where(scored, v_prev, 0.0)], dim=1)
            return (values, None) if return_logits else values
        logits = self.head(hidden[:, :-1].to(self.head.weight.dtype)).float()  # (S, T-1, K)
        v_prev = (torch.softmax(logits, dim=-1) * self.support.float()).sum(dim=-1)
        zeros = v_prev.new_zeros(input_ids.shape[0], 1)
        values = torch.cat([zeros, torch.where(scored, v_prev, 0.0)], dim=1)
        if not return_logits:
            return values
        logits = torch.where(scored[..., None], logits, 0.0)
        return values, torch.cat([logits.new_zeros(logits.shape[0], 1, logits.shape[2]), logits], 1)

    def save_pretrained(self, path: str | Path) -> None:
        """Backbone with Hugging Face `save_pretrained`; head (and pool) weights in
        `value_head.safetensors`, its name and bin values in `value_head.json`."""
        path = Path(path)
        self.backbone.save_pretrained(path)
        weights = dict(self.head.state_dict())
        if self.pool is not None:
            weights |= {POOL_PREFIX + k: v for k, v in self.pool.state_dict().items()}
        save_file(
            {k: v.detach().contiguous().cpu() for k, v in weights.items()}, str(path / HEAD_FILE)
        )
        config = {"value_head": self.value_head, "support": self.support_values}
        (path / HEAD_CONFIG_FILE).write_text(json.dumps(config) + "\n")

    @classmethod
    def from_pretrained(cls, path: str | Path, device: torch.device | str = "cpu") -> Critic:
        """Load a critic saved with `save_pretrained` from a local directory, float32 on
        ``device`` (the master weights; see `load_policy`)."""
        from cxsim.critics import VALUE_HEADS

        path = Path(path)
        if not (path / HEAD_FILE).is_file():
            raise FileNotFoundError(
                f"no critic at {str(path)!r} (missing {HEAD_FILE}); "
                "save one with Critic.save_pretrained"
            )
        config = {"value_head": "last", "support": None}
        if (path / HEAD_CONFIG_FILE).is_file():
            config |= json.loads((path / HEAD_CONFIG_FILE).read_text())
        backbone = AutoModel.from_pretrained(
            path, local_files_only=True, trust_remote_code=False, dtype=torch.float32
        )
        weights = load_file(str(path / HEAD_FILE))
        support = config["support"]
        head = nn.Linear(backbone.config.hidden_size, 1 if support is None else len(support))
        head.load_state_dict({k: v for k, v in weights.items() if not k.startswith(POOL_PREFIX)})
        entry = VALUE_HEADS[config["value_head"]]
        pool = entry.pool(backbone.config.hidden_size)
        if pool is not None:
            n = len(POOL_PREFIX)
            pool.load_state_dict(
                {k[n:]: v for k, v in weights.items() if k.startswith(POOL_PREFIX)}
            )
        name = config["value_head"]
        return cls(backbone, head, pool, support, name, entry.reads, entry.adds_value).to(device)
