"""Batched sampling over a KV cache that rows share and keep across turns.

B rows (one per environment) share one cache of L columns (``BufferLayer``s:
appends write in place, no per-step concatenation). Each row owns the columns
it wrote in its current window; everything else is masked out for it
(``valid``, (B, L) bool). Rows append chunks of different lengths in one
forward: a chunk is right-padded to the longest, the pad positions are masked
for every query, and each row's tokens get explicit position ids counting only
its own valid tokens, so a row with holes in its cache computes what a clean
forward over its window computes. A row that restarts (``reset``) masks all its
old columns and starts again at position 0. Rows whose chunks differ a lot in
length (a rebuilt window next to one observation) run in separate forwards
over subsets of rows, and so do the few rows still decoding once most have
finished. Columns no row uses any more are dropped by re-packing the cache.

The 4D additive mask is built here and handed to the model as is (transformers
5.x returns a prepared 4D mask unchanged from ``create_causal_mask``); the cache
argument is ``cache`` (``past_key_values`` is deprecated in 5.x).

Shapes: B rows, R rows in one forward, L cached columns, Q new tokens per row, V vocab.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel
from transformers.cache_utils import Cache, DynamicLayer


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

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = self.get_seq_length()
        q = key_states.shape[-2]
        if self.key_buffer is None or self.key_buffer.shape[-2] < n + q:
            # Zeros, not empty: masked columns must hold finite numbers (0 * nan = nan).
            shape = (self.batch, key_states.shape[1], max(2 * (n + q), 64), key_states.shape[-1])
            key_buffer = key_states.new_zeros(shape)
            value_buffer = value_states.new_zeros(shape)
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
            if self.cache is not None:
                for layer in self.cache.layers:
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
        for layer in self.cache.layers:
            idx = order[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3])
            layer.replace(layer.keys.gather(2, idx), layer.values.gather(2, idx))

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
        ids = torch.full((len(chunks), q), self.pad_id, dtype=torch.long)
        for b, chunk in enumerate(chunks):
            ids[b, : len(chunk)] = torch.tensor(chunk, dtype=torch.long)
        ids = ids.to(self.device)
        index = None if rows is None else torch.tensor(rows, device=self.device)
        past_valid = self.valid if index is None else self.valid[index]  # (R, L)
        past_length = self.length if index is None else self.length[index]  # (R,)
        steps = torch.arange(q, device=self.device)
        new_valid = steps[None, :] < lengths[:, None]  # (R, Q)
        position_ids = past_length[:, None] + steps[None, :]  # (R, Q)
        past = self.columns
        key_valid = torch.cat([past_valid, new_valid], dim=1)  # (R, L+Q)
        key_pos = torch.arange(past + q, device=self.device)
        query_pos = past + steps
        causal = key_pos[None, :] <= query_pos[:, None]  # (Q, L+Q)
        diagonal = key_pos[None, :] == query_pos[:, None]  # pads attend to themselves only
        allowed = (key_valid[:, None, :] & causal[None]) | diagonal[None]  # (R, Q, L+Q)
        dtype = self.model.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype, device=self.device)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        if self.cache is None:
            layers = self.model.config.num_hidden_layers
            self.cache = Cache(layers=[BufferLayer() for _ in range(layers)])
        for layer in self.cache.layers:
            layer.rows, layer.batch = index, len(self.keys)
        out = self.model(
            input_ids=ids,
            attention_mask=mask[:, None],
            position_ids=position_ids,
            cache=self.cache,
            use_cache=True,
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
        last = (lengths - 1).clamp(min=0)
        return out.logits[torch.arange(len(chunks), device=self.device), last]  # (R, V)
