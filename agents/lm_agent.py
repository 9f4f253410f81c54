"""A language-model agent: batched sampling with the KV cache kept across turns.

All requests of one ``respond`` call are decoded together, one forward per new
token for the batch (or for the rows still decoding, once most have finished). A row's cache holds its current window (or summary
prompt) and grows by the ``append`` chunks and the sampled tokens; nothing is
re-encoded until the runtime resets the row (new episode or rebuilt window).

The last token a row sampled is fed to the model at the start of the row's next
request, together with that request's ``append`` chunk (no forward is spent on
it when the response ends). Rows must appear in every call to keep their
context; a row left out of a call is dropped and must come back with
``reset=True`` (the runtime does exactly this).

The policy is used as it is (no ``eval()`` switch); the built-in presets have no
dropout. The KV cache, masks and sampling generator live on the policy's device
(or ``device``, where the policy is moved); ``precision="bf16"`` runs every
forward under bfloat16 autocast (behaviour log-probs are still float32 log
softmaxes of the logits).
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from cxsim.agent_api import TurnRequest, TurnResponse
from cxsim.agents.chat import ChatFormat
from cxsim.devices import Precision, autocast
from cxsim.generation import RowCache, SamplingConfig, sample_next


class LMAgent:
    """Implements ``cxsim.agent_api.Agent`` with a causal LM."""

    def __init__(
        self,
        policy: PreTrainedModel,
        chat: ChatFormat,
        sampling: SamplingConfig | None = None,
        device: torch.device | str | None = None,
        precision: Precision = "fp32",
    ):
        """``device``: where to sample (the policy is moved there); None: the policy's device."""
        self.device = policy.device if device is None else torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.policy = policy.to(self.device)
        self.chat = chat
        self.sampling = sampling or SamplingConfig()
        self.precision: Precision = precision
        self.generator: torch.Generator | None = None
        if self.sampling.seed is not None:
            self.generator = torch.Generator(device=self.device).manual_seed(self.sampling.seed)
        self.cache = RowCache(policy, chat.pad_id, self.device)
        self.unfed: dict[int, list[int]] = {}
        """Per row: its last sampled token, not yet run through the model."""

    def forget(self) -> None:
        """Drop every row's cached context (frees the cache's memory)."""
        self.cache = RowCache(self.policy, self.chat.pad_id, self.device)
        self.unfed = {}

    @torch.inference_mode()
    def respond(self, requests: list[TurnRequest]) -> list[TurnResponse]:
        if not requests:
            return []
        keys = [r.row for r in requests]
        if len(set(keys)) != len(keys):
            raise ValueError(f"one request per row per call; got rows {keys}")
        for r in requests:
            if r.max_new_tokens < 1:
                raise ValueError(f"row {r.row}: max_new_tokens ({r.max_new_tokens}) must be >= 1")
            if not r.append and (r.reset or not self.unfed.get(r.row)):
                raise ValueError(f"row {r.row}: nothing to condition on (empty append)")
        with autocast(self.precision, self.device):
            return self.decode(requests, keys)

    def decode(self, requests: list[TurnRequest], keys: list[int]) -> list[TurnResponse]:
        """Feeds each row's new tokens, then samples until every row ends or hits its cap."""
        self.cache.arrange(keys, [r.reset for r in requests])
        chunks = [
            (list(r.append) if r.reset else self.unfed.get(r.row, []) + list(r.append))
            for r in requests
        ]
        logits = self.cache.append(chunks)  # (B, V)

        batch = len(requests)
        caps = torch.tensor([r.max_new_tokens for r in requests], device=self.device)
        active = torch.ones(batch, dtype=torch.bool, device=self.device)
        tokens: list[torch.Tensor] = []
        logprobs: list[torch.Tensor] = []
        for t in range(int(caps.max())):
            tok, logp = sample_next(logits, self.sampling, self.generator)  # (B,), (B,)
            tok = torch.where(active, tok, self.chat.pad_id)
            tokens.append(tok)
            logprobs.append(logp)
            active = active & (tok != self.chat.end_id) & (t + 1 < caps)
            if not bool(active.any()):
                break
            step = tok.tolist()
            live = active.tolist()
            logits = self.cache.append([[step[b]] if live[b] else [] for b in range(batch)])

        token_rows = torch.stack(tokens, dim=1).tolist()  # (B, steps)
        logprob_rows = torch.stack(logprobs, dim=1).tolist()
        responses = []
        for b, r in enumerate(requests):
            n = min(r.max_new_tokens, len(token_rows[b]))
            ids = token_rows[b][:n]
            if self.chat.end_id in ids:
                n = ids.index(self.chat.end_id) + 1
                ids = ids[:n]
            self.unfed[r.row] = ids[-1:]
            responses.append(
                TurnResponse(
                    token_ids=ids,
                    logprobs=logprob_rows[b][:n],
                    text=self.chat.decode(ids),
                    finished=ids[-1] == self.chat.end_id,
                )
            )
        for row in list(self.unfed):
            if row not in keys:
                del self.unfed[row]
        return responses
