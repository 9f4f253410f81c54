"""Critic: a copy of the policy's transformer backbone plus a scalar value head.

Shapes: S = rows (segments), T = padded length, H = hidden size.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModel, PreTrainedModel

from cxsim.agents.models import decoder_of

HEAD_FILE = "value_head.safetensors"
"""Value-head weights, saved next to the backbone's own files."""


class Critic(nn.Module):
    """`values[s, t] = head(hidden[s, t-1])`: V of the prefix tok_<t (CONTRACTS.md alignment).

    So values[:, t] estimates the return before token t is emitted, which is the
    baseline for the action at position t. Position 0 has no prefix and holds 0
    (it is never trainable); padded positions hold 0 too.
    """

    def __init__(self, backbone: PreTrainedModel, head: nn.Linear):
        super().__init__()
        if head.out_features != 1 or head.in_features != backbone.config.hidden_size:
            raise ValueError(
                f"head must be Linear({backbone.config.hidden_size}, 1); "
                f"got Linear({head.in_features}, {head.out_features})"
            )
        self.backbone = backbone
        self.head = head

    @classmethod
    def from_policy(cls, policy: PreTrainedModel) -> Critic:
        """Deep-copy the policy's decoder (no shared parameters) and add a zero value head.

        A zero head starts every value at 0; its gradient reaches the backbone
        from the second update on.
        """
        backbone = copy.deepcopy(decoder_of(policy))
        head = nn.Linear(backbone.config.hidden_size, 1)
        nn.init.zeros_(head.weight)
        nn.init.zeros_(head.bias)
        return cls(backbone, head.to(device=policy.device))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """input_ids, attention_mask: (S, T), padding on either side -> values (S, T), float32."""
        assert input_ids.dim() == 2 and input_ids.shape == attention_mask.shape, (
            f"input_ids {tuple(input_ids.shape)} and attention_mask "
            f"{tuple(attention_mask.shape)} must be the same (S, T)"
        )
        mask = attention_mask.long()
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        hidden = self.backbone(
            input_ids=input_ids, attention_mask=mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state  # (S, T, H)
        v_prev = (
            self.head(hidden[:, :-1].to(self.head.weight.dtype)).squeeze(-1).float()
        )  # (S, T-1)
        # Same positions as sequence_logprobs: token t and its predecessor are both real.
        scored = (mask[:, 1:] * mask[:, :-1]).bool()
        zeros = v_prev.new_zeros(input_ids.shape[0], 1)
        return torch.cat([zeros, torch.where(scored, v_prev, 0.0)], dim=1)

    def save_pretrained(self, path: str | Path) -> None:
        """Backbone with Hugging Face `save_pretrained`, head in `value_head.safetensors`."""
        path = Path(path)
        self.backbone.save_pretrained(path)
        head = {k: v.detach().contiguous().cpu() for k, v in self.head.state_dict().items()}
        save_file(head, str(path / HEAD_FILE))

    @classmethod
    def from_pretrained(cls, path: str | Path, device: torch.device | str = "cpu") -> Critic:
        """Load a critic saved with `save_pretrained` from a local directory, float32 on
        ``device`` (the master weights; see `load_policy`)."""
        path = Path(path)
        if not (path / HEAD_FILE).is_file():
            raise FileNotFoundError(
                f"no critic at {str(path)!r} (missing {HEAD_FILE}); "
                "save one with Critic.save_pretrained"
            )
        backbone = AutoModel.from_pretrained(
            path, local_files_only=True, trust_remote_code=False, dtype=torch.float32
        )
        head = nn.Linear(backbone.config.hidden_size, 1)
        head.load_state_dict(load_file(str(path / HEAD_FILE)))
        return cls(backbone, head).to(device)
