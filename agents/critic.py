"""Critic: a copy of the policy's transformer backbone plus a value head.

The head reads the backbone's hidden states as the configured value head says
(``cxsim.value_heads.VALUE_HEADS``: the prefix's last hidden state, their mean, an attention
pool, or the last hidden state plus a pool of the input embeddings; the pools:
:mod:`cxsim.value_pools`) and gives one scalar
or, for a histogram loss, logits over K value bins whose expectation is the value
(``cxsim.critics.VALUE_LOSSES``).

Shapes: S = rows (segments), T = padded length, H = hidden size, K = value bins.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
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
    head's entry says it ``reads`` (``cxsim.value_heads.ValueHead.reads``: nothing more, the input
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
        entry of ``cxsim.value_heads.VALUE_HEADS``; ``support``: the bin values of a histogram
        head (None: a scalar head).
        """
        from cxsim.value_heads import VALUE_HEADS

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
        from cxsim.value_heads import VALUE_HEADS

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
