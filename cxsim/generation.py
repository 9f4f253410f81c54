"""Batched sampling over a KV cache that rows share and keep across turns.

B rows (one per environment) share one cache of L columns (``BufferLayer``s:
appends write in place, no per-step concatenation). Each row owns the columns
it wrote in its current window; everything else is masked out for it
(``valid``, (B, L) bool). Rows append chunks of different lengths in one
forward: a chunk is left-padded to the longest, the pad positions are masked
for every query, and each row's tokens get explicit position ids counting only
its own valid tokens, so a row with holes in its cache computes what a clean
forward over its window computes. A row that restarts (``reset``) masks all its
old columns and starts again at position 0. Rows whose chunks differ a lot in
length (a rebuilt window next to one observation) run in separate forwards
over subsets of rows, and so do the few rows still decoding once most have
finished. Columns no row uses any more are dropped by re-packing the cache.

The 4D additive masks are built here and handed to the model as they are
(transformers returns a prepared 4D mask unchanged from ``create_causal_mask``):
one for full-attention layers and, for sliding-window layers, one that also hides
keys ``window`` or more positions behind the query (positions counted in the
row's own window, so holes do not shift the window). A model whose layers mix
both kinds gets the two masks as a ``{"full_attention", "sliding_attention"}``
mapping, the form such models accept in place of a mask. Every layer keeps all
the columns of its rows (the sliding mask, not the cache, drops old keys); layers
that reuse another layer's keys and values (Gemma-3n) keep none. ALiBi models that
build their biases from a 2D mask (Bloom, Falcon with ``alibi``) get the 2D mask of
each row's key columns instead, so their key positions count the row's own tokens.

Which models the cache serves, and the one-line refusal of the rest, is decided before
any forward: ``cxsim.servable``.
The cache goes in under the name the model's ``forward`` declares: ``cache``
(transformers >= 5.24) or ``past_key_values`` (earlier releases). Chunks are
left-padded, so the logits a forward needs (after each row's last token) sit at the
last position and only those are computed (``logits_to_keep=1``).

Shapes: B rows, R rows in one forward, L cached columns, Q new tokens per row, V vocab.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel
from transformers.cache_utils import Cache, DynamicLayer

from cxsim.servable import FULL, SLIDING, cache_argument, serving_layout, takes_logits_to_keep


@dataclass(frozen=True)
class SamplingConfig:
    """How responses are sampled."""

    temperature: float = 1.0
    """Softmax temperature; behaviour log-probs are recorded under this tempered distribution."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0: off). Not part of the recorded log-probs: PPO ratios
    compare tempered softmaxes, and top-p < 1 makes them off-policy by the truncated mass."""
    greedy: bool = False
    """Take the most likely token instead of sampling (evaluation); log-probs as above."""
    seed: int | None = None
    """Seed of the sampling generator (None: drawn from torch's global RNG)."""

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError(
                f"temperature ({self.temperature}) must be > 0: use --sampling.greedy for argmax"
            )
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p ({self.top_p}) must be in (0, 1]")


def sample_next(
    logits: torch.Tensor, sampling: SamplingConfig, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row. logits (B, V) -> (tokens (B,) long, logprobs (B,) float32).

    The log-prob is ``log softmax(logits / temperature)[token]`` whatever top-p did.
    """
    logp = F.log_softmax(logits.float() / sampling.temperature, dim=-1)  # (B, V)
    if sampling.greedy:
        tokens = logp.argmax(dim=-1)
    else:
        probs = logp.exp()
        if sampling.top_p < 1.0:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            # Keep the smallest prefix whose mass reaches top_p (the first token always).
            outside = sorted_p.cumsum(-1) - sorted_p >= sampling.top_p
            sorted_p = sorted_p.masked_fill(outside, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        # Inverse-CDF sampling: one uniform per row (torch.multinomial is ~6x slower here).
        u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device)
        cdf = probs.cumsum(-1)
        u = u * cdf[:, -1:]  # top-p leaves an unnormalised mass
        tokens = (cdf <= u).sum(-1).clamp(max=probs.shape[-1] - 1)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


class BufferLayer(DynamicLayer):
    """A ``DynamicLayer`` that appends into a preallocated buffer (capacity doubles),
    optionally for a subset of its batch rows.

    ``DynamicLayer`` concatenates the whole cache at every decode step; here an
    append copies only the new tokens. ``keys``/``values`` are views of the
    filled part of the buffers (all rows). With ``rows`` set, a forward over
    those rows only writes their new columns (the other rows' new columns stay
    zero and are masked) and attends over a gathered copy of their cache.
    """

    def __init__(self) -> None:
        super().__init__()
        self.key_buffer: torch.Tensor | None = None
        self.value_buffer: torch.Tensor | None = None
        self.rows: torch.Tensor | None = None
        """Batch rows of the current forward (None: all rows)."""
        self.batch = 0
        """Rows of the whole cache."""

    def replace(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Sets the cached states (e.g. rows re-ordered or columns dropped)."""
        self.keys, self.values = keys, values
        self.key_buffer = self.value_buffer = None

    def get_seq_length(self, *args, **kwargs) -> int:
        """Cached columns (all rows share them)."""
        if not getattr(self, "is_initialized", False) or self.keys is None:
            return 0
        return self.keys.shape[-2]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not getattr(self, "is_initialized", False):
            # Set here, not by lazy_initialization (its signature changed across releases).
            self.dtype, self.device = key_states.dtype, key_states.device
            self.is_initialized = True
        n = self.get_seq_length()
        q = key_states.shape[-2]
        if self.key_buffer is None or self.key_buffer.shape[-2] < n + q:
            # Zeros, not empty: masked columns must hold finite numbers (0 * nan = nan).
            # Keys and values may differ in head size (multi-head latent attention).
            capacity = max(2 * (n + q), 64)
            key_buffer = key_states.new_zeros(
                (self.batch, key_states.shape[1], capacity, key_states.shape[3])
            )
            value_buffer = value_states.new_zeros(
                (self.batch, value_states.shape[1], capacity, value_states.shape[3])
            )
            if n:
                key_buffer[:, :, :n] = self.keys
                value_buffer[:, :, :n] = self.values
            self.key_buffer, self.value_buffer = key_buffer, value_buffer
        if self.rows is None:
            self.key_buffer[:, :, n : n + q] = key_states
            self.value_buffer[:, :, n : n + q] = value_states
        else:
            self.key_buffer[:, :, n : n + q][self.rows] = key_states
            self.value_buffer[:, :, n : n + q][self.rows] = value_states
        self.keys = self.key_buffer[:, :, : n + q]
        self.values = self.value_buffer[:, :, : n + q]
        if self.rows is None:
            return self.keys, self.values
        return self.keys[self.rows], self.values[self.rows]


class RowCache:
    """A KV cache over rows keyed by the caller, with per-row masks and positions."""

    def __init__(self, model: PreTrainedModel, pad_id: int, device: torch.device):
        self.model = model
        self.pad_id = pad_id
        self.device = device
        self.layout = serving_layout(model)
        self.cache_name = cache_argument(model)
        self.last_only = takes_logits_to_keep(model)
        self.keys: list[int] = []
        """Row key of each batch row, in batch order."""
        self.cache: Cache | None = None
        self.valid = torch.zeros((0, 0), dtype=torch.bool, device=device)  # (B, L)
        self.length = torch.zeros(0, dtype=torch.long, device=device)  # (B,) tokens in window

    @property
    def columns(self) -> int:
        return self.valid.shape[1]

    def arrange(self, keys: list[int], reset: list[bool]) -> None:
        """Make the batch rows exactly ``keys`` (in order); rows not listed are dropped.

        A new key must come with reset=True. Reset rows lose their cached context.
        """
        missing = [k for k, r in zip(keys, reset, strict=True) if k not in self.keys and not r]
        if missing:
            raise ValueError(
                f"rows {missing} have no cached context: send reset=True for a row's first "
                "request (an agent keeps a row only while it appears in every call)"
            )
        if all(reset):
            self.keys, self.cache = list(keys), None
            self.valid = torch.zeros((len(keys), 0), dtype=torch.bool, device=self.device)
            self.length = torch.zeros(len(keys), dtype=torch.long, device=self.device)
            return
        if keys != self.keys:
            # Batch row b takes old row index[b]; new rows take a zeroed, fully masked row.
            old = {k: i for i, k in enumerate(self.keys)}
            index = torch.tensor([old.get(k, -1) for k in keys], device=self.device)
            fresh = index < 0
            index = index.clamp(min=0)
            self.valid = self.valid[index] & ~fresh[:, None]
            self.length = self.length[index].masked_fill(fresh, 0)
            for layer in self.filled_layers():
                layer.replace(layer.keys[index], layer.values[index])
            self.keys = list(keys)
        resets = torch.tensor(reset, device=self.device)
        self.valid &= ~resets[:, None]
        self.length.masked_fill_(resets, 0)
        self.repack()

    def repack(self) -> None:
        """Drop masked columns once they make up a good part of the cache."""
        if self.cache is None or self.columns <= int(self.length.max()) + 32:
            return
        width = int(self.length.max())
        # Stable sort puts each row's valid columns first, in their original order.
        order = torch.argsort((~self.valid).to(torch.int8), dim=1, stable=True)[:, :width]
        self.valid = torch.arange(width, device=self.device)[None, :] < self.length[:, None]

        def kept(states: torch.Tensor) -> torch.Tensor:
            return states.gather(
                2, order[:, None, :, None].expand(-1, states.shape[1], -1, states.shape[3])
            )

        for layer in self.filled_layers():
            layer.replace(kept(layer.keys), kept(layer.values))

    def filled_layers(self) -> list[BufferLayer]:
        """The cache layers holding states; layers that reuse another layer's keys and
        values (Gemma-3n's shared KV layers) never write theirs."""
        if self.cache is None:
            return []
        return [layer for layer in self.cache.layers if layer.keys is not None]

    def append(self, chunks: list[list[int]]) -> torch.Tensor:
        """Appends each row's chunk (possibly empty); returns the logits after each row's last
        token (B, V) (zeros for rows with an empty chunk).

        Rows are grouped by chunk length (a group's chunks are at least half as long as
        its longest) and each group runs in its own forward when that at least halves
        the padded token count; rows with nothing to add are then left out (decoding
        with most rows finished).
        """
        lengths = [len(c) for c in chunks]
        batch = len(chunks)
        busy = sorted((b for b in range(batch) if lengths[b]), key=lambda b: -lengths[b])
        groups: list[list[int]] = []
        for b in busy:
            if groups and 2 * lengths[b] > lengths[groups[-1][0]]:
                groups[-1].append(b)
            else:
                groups.append([b])
        split_cost = sum(len(g) * lengths[g[0]] for g in groups)
        if self.cache is None or not busy or 2 * split_cost > batch * lengths[busy[0]]:
            return self.forward(chunks, None)
        logits = None
        for group in groups:
            out = self.forward([chunks[b] for b in group], group)
            if logits is None:
                logits = out.new_zeros((batch, out.shape[-1]))
            logits[group] = out
        return logits

    def forward(self, chunks: list[list[int]], rows: list[int] | None) -> torch.Tensor:
        """One forward over ``rows`` (None: all rows; then ``chunks`` has one per row).
        Returns the logits after each given row's last token (R, V)."""
        lengths = torch.tensor([len(c) for c in chunks], device=self.device)  # (R,)
        q = max(int(lengths.max()), 1)
        # Left padding: every row's last token sits at position q - 1.
        ids = torch.full((len(chunks), q), self.pad_id, dtype=torch.long)
        for b, chunk in enumerate(chunks):
            if chunk:
                ids[b, q - len(chunk) :] = torch.tensor(chunk, dtype=torch.long)
        ids = ids.to(self.device)
        index = None if rows is None else torch.tensor(rows, device=self.device)
        past_valid = self.valid if index is None else self.valid[index]  # (R, L)
        past_length = self.length if index is None else self.length[index]  # (R,)
        steps = torch.arange(q, device=self.device)
        offset = q - lengths  # (R,) pad columns before the chunk
        new_valid = steps[None, :] >= offset[:, None]  # (R, Q)
        position_ids = (past_length[:, None] + steps[None, :] - offset[:, None]).clamp(min=0)
        past = self.columns
        key_valid = torch.cat([past_valid, new_valid], dim=1)  # (R, L+Q)
        # A key-mask model builds its causal mask and ALiBi positions from the 2D mask.
        masks = key_valid.long() if self.layout.key_mask else self.masks(key_valid, past, q)
        if self.cache is None:
            self.cache = Cache(layers=[BufferLayer() for _ in self.layout.kinds])
        for layer in self.cache.layers:
            layer.rows, layer.batch = index, len(self.keys)
        extra = {"logits_to_keep": 1} if self.last_only else {}
        out = self.model(
            input_ids=ids,
            attention_mask=masks,
            position_ids=position_ids,
            use_cache=True,
            **{self.cache_name: self.cache},
            **extra,
        )
        for layer in self.cache.layers:
            layer.rows = None
        if index is None:
            self.valid = key_valid
            self.length = self.length + lengths
        else:
            grown = torch.zeros((len(self.keys), q), dtype=torch.bool, device=self.device)
            grown[index] = new_valid
            self.valid = torch.cat([self.valid, grown], dim=1)
            self.length[index] += lengths
        return out.logits[:, -1]  # (R, V)

    def masks(
        self, key_valid: torch.Tensor, past: int, q: int
    ) -> torch.Tensor | dict[str, torch.Tensor]:
        """Additive masks (R, 1, Q, L+Q) for the new tokens: one per layer kind in use.

        key_valid (R, L+Q): columns holding the row's current window (the new ones
        included). A key is visible when it is valid and not after the query; for
        sliding layers also when it is fewer than ``window`` positions behind it,
        positions counting the row's valid columns. Padding queries see only themselves.
        """
        key_col = torch.arange(past + q, device=self.device)
        query_col = past + torch.arange(q, device=self.device)
        causal = key_col[None, :] <= query_col[:, None]  # (Q, L+Q)
        diagonal = key_col[None, :] == query_col[:, None]  # pads attend to themselves only
        allowed = key_valid[:, None, :] & causal[None]  # (R, Q, L+Q)
        dtype = self.model.dtype
        lowest = torch.finfo(dtype).min

        def additive(visible: torch.Tensor) -> torch.Tensor:
            mask = torch.zeros(visible.shape, dtype=dtype, device=self.device)
            return mask.masked_fill_(~(visible | diagonal[None]), lowest)[:, None]

        built: dict[str, torch.Tensor] = {}
        if FULL in self.layout.kinds:
            built[FULL] = additive(allowed)
        if SLIDING in self.layout.kinds:
            position = key_valid.long().cumsum(1) - 1  # (R, L+Q) position of each valid column
            behind = position[:, past:, None] - position[:, None, :]  # (R, Q, L+Q)
            built[SLIDING] = additive(allowed & (behind < self.layout.window))
        if self.layout.mixed:
            return built
        return next(iter(built.values()))
