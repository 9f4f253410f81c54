"""Segments of compacted rollouts and their padded batch (docs/method.md section 2).

A rollout under compaction is an ordered list of segments
``exec_1, sum_1, exec_2, sum_2, ..., exec_K``. An execution segment is one
working window (its prompt, then alternating trainable responses and
untrainable observations); a summary segment is the prompt ``h_t + q_sum``
followed by the trainable summary.

Alignment convention, used by every per-token tensor in cxsim: position ``t``
describes token ``t`` of the segment. ``logprobs[s, t]`` is
``log pi(token_t | tokens_<t)`` and ``values[s, t]`` is ``V(tokens_<t)``, the
value of the state in which token ``t`` is chosen. Position 0 is never
trainable (every segment starts with a prompt).

Masks are kept apart (docs/CONTRACTS.md): ``trainable`` marks policy-generated
tokens, ``attention`` marks real (non-padding) tokens, ``is_summary`` marks
the role of each row. Nothing else is folded into them.

Rewards and endings have their own tensors. ``rewards`` (S,) is the terminal
reward ``R`` of the segment's rollout (the method places it at every segment's
last trainable token); ``step_rewards`` (S, T) holds every other reward of the
environment at the last token of the response that earned it; ``episode_end``
(S,) says how the episode ended on the rollout's last segment and is
``"none"`` on every other one: a compaction boundary ends nothing.

Segments of a rollout form a tree (``cxsim.advantages``, "Segment trees"): each segment names the
segment it continues from, its ``parent`` (-1 for the first). A linear rollout, what every
strategy but ``folding`` records, is the chain in which each segment's parent is the one
before it; ``folding`` opens child windows from a parent window and continues the parent
after the child returns, so a parent has two children (the child window and the parent's
continuation). ``SegmentBatch.parent_index`` is None for a batch of chains, and the
estimators then read each rollout as the chain of its segments in ``segment_index`` order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Literal, get_args

import torch

Role = Literal["execution", "summary"]
ROLES: tuple[Role, ...] = ("execution", "summary")
EpisodeEnd = Literal[
    "none", "terminated", "env_truncated", "window_full", "max_turns", "observation_overflow"
]
EPISODE_ENDS: tuple[EpisodeEnd, ...] = get_args(EpisodeEnd)
"""Codes of ``SegmentBatch.episode_end``: index into this tuple. ``none``: the episode goes on
after the segment (a compaction boundary); ``terminated``: the environment ended it;
``env_truncated``: the environment's time limit; ``window_full`` / ``observation_overflow``:
the context was exhausted; ``max_turns``: the runtime's turn cap."""


@dataclass
class Segment:
    """One segment of one rollout, as the runtime records it."""

    role: Role
    """``execution`` (one working window) or ``summary`` (the summary the policy wrote)."""
    token_ids: list[int]
    """Every token of the segment: prompt, responses, observations."""
    trainable: list[bool]
    """True where the token was sampled from the policy in this segment."""
    logprobs: list[float]
    """Behaviour log-prob of each token; 0.0 where the token is not trainable."""
    rollout_id: int
    """Identifies the rollout; unique within a batch."""
    segment_index: int
    """Position of the segment in its rollout (0, 1, 2, ... in time order)."""
    reward: float = 0.0
    """Terminal reward ``R(tau)`` of the rollout; every segment of it carries the same one."""
    group_id: int = -1
    """Rollouts of the same task share a group id (group-broadcast estimator); -1 if unused."""
    step_rewards: list[float] | None = None
    """Per token: the environment's reward for a step that did not end the episode, at the
    last token of the response that earned it; 0 elsewhere (None: all 0)."""
    end: EpisodeEnd = "none"
    """How the episode ended, on the rollout's last segment; ``none`` on the others."""
    parent: int | None = None
    """``segment_index`` of the segment this one continues from (its window's context was
    built from that one's), -1 for a rollout's first; None: the previous segment
    (``segment_index - 1``), a chain."""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")
        n = len(self.token_ids)
        if len(self.trainable) != n or len(self.logprobs) != n:
            raise ValueError(
                f"token_ids, trainable and logprobs must have the same length; got "
                f"{n}, {len(self.trainable)} and {len(self.logprobs)}"
            )
        if n == 0:
            raise ValueError("a segment needs at least one token (its prompt)")
        if self.step_rewards is not None and len(self.step_rewards) != n:
            raise ValueError(
                f"step_rewards must have one entry per token ({n}), got {len(self.step_rewards)}"
            )
        if self.end not in EPISODE_ENDS:
            raise ValueError(f"end must be one of {EPISODE_ENDS}, got {self.end!r}")
        if self.parent is not None and not -1 <= self.parent < self.segment_index:
            raise ValueError(
                f"parent ({self.parent}) must be -1 or the index of an earlier segment "
                f"(< segment_index {self.segment_index})"
            )

    @property
    def parent_index(self) -> int:
        """The parent's ``segment_index`` (-1: none); the previous segment unless set."""
        return self.segment_index - 1 if self.parent is None else self.parent

    @property
    def num_trainable(self) -> int:
        return sum(self.trainable)


@dataclass
class SegmentBatch:
    """Segments packed into right-padded tensors. S segments, T = longest segment.

    Rows need not be grouped or ordered by rollout: estimators find a segment's
    rollout and position through ``rollout_id`` and ``segment_index``.
    """

    token_ids: torch.Tensor  # (S, T) long, pad_id at padding
    trainable: torch.Tensor  # (S, T) bool, policy-generated tokens
    attention: torch.Tensor  # (S, T) bool, real tokens (False at padding)
    logprobs: torch.Tensor  # (S, T) float32, behaviour log-probs (0 where not trainable)
    is_summary: torch.Tensor  # (S,) bool, role of each row
    rollout_id: torch.Tensor  # (S,) long
    segment_index: torch.Tensor  # (S,) long
    rewards: torch.Tensor  # (S,) float32, terminal reward of the segment's rollout
    group_id: torch.Tensor  # (S,) long
    step_rewards: torch.Tensor | None = None
    """(S, T) float32: rewards of steps that did not end the episode, at the last token of the
    response that earned them (0 elsewhere); None is read as all zeros."""
    episode_end: torch.Tensor | None = None
    """(S,) long: index into ``EPISODE_ENDS``; None is read as every row ``none``."""
    parent_index: torch.Tensor | None = None
    """(S,) long: each row's parent segment (its ``segment_index``, -1: none) in its rollout;
    None: every rollout is the chain of its rows in ``segment_index`` order."""
    temperature: float | None = None
    """Sampling temperature of the behaviour log-probs (None: not recorded)."""
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    """Per-row tensors computed later (values, advantages, returns), shape (S, T) or (S,)."""

    def __post_init__(self) -> None:
        device = self.token_ids.device
        if self.step_rewards is None:
            self.step_rewards = torch.zeros(self.token_ids.shape, device=device)
        if self.episode_end is None:
            self.episode_end = torch.zeros(self.token_ids.shape[0], dtype=torch.long, device=device)

    def ends(self, *names: EpisodeEnd) -> torch.Tensor:
        """(S,) bool: rows whose episode ended in one of ``names``."""
        codes = torch.tensor([EPISODE_ENDS.index(n) for n in names], dtype=torch.long)
        return torch.isin(self.episode_end, codes.to(self.episode_end.device))

    def __len__(self) -> int:
        return self.token_ids.shape[0]

    @property
    def num_trainable(self) -> int:
        return int(self.trainable.sum())

    @property
    def lengths(self) -> torch.Tensor:  # (S,)
        return self.attention.sum(dim=1)

    def policy_mask(self, train_summaries: bool = True) -> torch.Tensor:
        """(S, T) bool: tokens that enter the policy loss.

        ``train_summaries=False`` is the paper's "w/o summary training" ablation:
        summary tokens get loss mask 0, and so also drop out of ``N_{>s}``.
        """
        if train_summaries:
            return self.trainable
        return self.trainable & ~self.is_summary[:, None]

    @property
    def parents(self) -> torch.Tensor:
        """(S,) long: ``parent_index``, or ``segment_index - 1`` for a batch of chains."""
        return self.segment_index - 1 if self.parent_index is None else self.parent_index

    def _tensors(self) -> list[str]:
        skip = ("extras", "temperature")
        return [
            f.name for f in fields(self) if f.name not in skip and getattr(self, f.name) is not None
        ]

    def to(self, device: torch.device | str) -> SegmentBatch:
        moved = {name: getattr(self, name).to(device) for name in self._tensors()}
        return SegmentBatch(
            **moved,
            temperature=self.temperature,
            extras={k: v.to(device) for k, v in self.extras.items()},
        )

    def select(self, rows: torch.Tensor | Sequence[int]) -> SegmentBatch:
        """A sub-batch with the given rows (for minibatches), extras included."""
        idx = torch.as_tensor(rows, dtype=torch.long, device=self.token_ids.device)
        picked = {name: getattr(self, name)[idx] for name in self._tensors()}
        return SegmentBatch(
            **picked,
            temperature=self.temperature,
            extras={k: v[idx] for k, v in self.extras.items()},
        )

    def trim(self, width: int) -> SegmentBatch:
        """The batch cut to its first ``width`` positions (padding beyond is dropped)."""
        cut = {
            name: (x[:, :width] if x.dim() == 2 else x)
            for name in self._tensors()
            for x in (getattr(self, name),)
        }
        extras = {k: (v[:, :width] if v.dim() == 2 else v) for k, v in self.extras.items()}
        return SegmentBatch(**cut, temperature=self.temperature, extras=extras)

    def with_extras(self, **tensors: torch.Tensor) -> SegmentBatch:
        return replace(self, extras={**self.extras, **tensors})

    def with_opening_context(self, header: Sequence[int]) -> SegmentBatch:
        """The batch with ``extras[OPENING_CONTEXT]``: :func:`opening_context` of its rows."""
        return self.with_extras(
            **{OPENING_CONTEXT: opening_context(self.token_ids, self.attention, header)}
        )


def pack_segments(
    segments: Sequence[Segment],
    pad_id: int = 0,
    temperature: float | None = None,
    device: torch.device | str | None = None,
) -> SegmentBatch:
    """Packs segments into a right-padded :class:`SegmentBatch`.

    ``temperature``: the sampling temperature of the segments' log-probs, kept on the
    batch so that the update can name it if the first ratios are not 1. ``device``: where
    the batch lives (None: CPU); it is filled on the host and copied over once.

    ``parent_index`` is None when every segment continues the previous one (chains, the
    estimators' original reading), else each segment's ``Segment.parent_index``.

    Raises ValueError on an empty list, when two segments share
    ``(rollout_id, segment_index)``, or when a segment's parent is not in the list.
    """
    if not segments:
        raise ValueError("pack_segments needs at least one segment")
    seen: set[tuple[int, int]] = set()
    for seg in segments:
        key = (seg.rollout_id, seg.segment_index)
        if key in seen:
            raise ValueError(
                f"two segments share rollout_id={key[0]} and segment_index={key[1]}; "
                "each (rollout_id, segment_index) pair must be unique in a batch"
            )
        seen.add(key)
    parents = [seg.parent_index for seg in segments]
    linear = all(p == seg.segment_index - 1 for p, seg in zip(parents, segments, strict=True))
    for p, seg in zip(parents, segments, strict=True):
        if not linear and p >= 0 and (seg.rollout_id, p) not in seen:
            raise ValueError(
                f"segment {seg.segment_index} of rollout {seg.rollout_id} names parent {p}, "
                "which is not in the list: pack a rollout's segments together"
            )
    num_rows = len(segments)
    width = max(len(seg.token_ids) for seg in segments)
    token_ids = torch.full((num_rows, width), pad_id, dtype=torch.long)
    trainable = torch.zeros((num_rows, width), dtype=torch.bool)
    attention = torch.zeros((num_rows, width), dtype=torch.bool)
    logprobs = torch.zeros((num_rows, width), dtype=torch.float32)
    step_rewards = torch.zeros((num_rows, width), dtype=torch.float32)
    for row, seg in enumerate(segments):
        n = len(seg.token_ids)
        token_ids[row, :n] = torch.tensor(seg.token_ids, dtype=torch.long)
        trainable[row, :n] = torch.tensor(seg.trainable, dtype=torch.bool)
        attention[row, :n] = True
        logprobs[row, :n] = torch.tensor(seg.logprobs, dtype=torch.float32)
        if seg.step_rewards is not None:
            step_rewards[row, :n] = torch.tensor(seg.step_rewards, dtype=torch.float32)
    batch = SegmentBatch(
        token_ids=token_ids,
        trainable=trainable,
        attention=attention,
        logprobs=logprobs * trainable,
        is_summary=torch.tensor([seg.role == "summary" for seg in segments], dtype=torch.bool),
        rollout_id=torch.tensor([seg.rollout_id for seg in segments], dtype=torch.long),
        segment_index=torch.tensor([seg.segment_index for seg in segments], dtype=torch.long),
        rewards=torch.tensor([seg.reward for seg in segments], dtype=torch.float32),
        group_id=torch.tensor([seg.group_id for seg in segments], dtype=torch.long),
        step_rewards=step_rewards,
        episode_end=torch.tensor([EPISODE_ENDS.index(seg.end) for seg in segments]),
        parent_index=None if linear else torch.tensor(parents, dtype=torch.long),
        temperature=temperature,
    )
    return batch if device is None else batch.to(device)


OPENING_CONTEXT = "opening_context"
"""``SegmentBatch.extras`` key of each row's opening context (:func:`opening_context`)."""


def opening_context(
    token_ids: torch.Tensor, attention: torch.Tensor, header: Sequence[int]
) -> torch.Tensor:
    """(S, T) bool: each row's attended positions up to the end of its first assistant
    ``header`` (the chat format's ``assistant_prefix()``), the context its window opened with:
    the task, or the system prompt, the summary and what the strategy put before the first
    response (the whole row when the header never occurs, or is empty). Every row of a window,
    its summary's included, opens with the same context."""
    width, k = token_ids.shape[1], len(header)
    if k == 0 or width < k:
        return attention.bool()
    wanted = torch.tensor(list(header), dtype=token_ids.dtype, device=token_ids.device)
    ends_here = (token_ids.unfold(1, k, 1) == wanted).all(dim=-1)  # (S, T - k + 1)
    ends_here &= attention[:, k - 1 :].bool()
    last = torch.where(ends_here.any(dim=1), ends_here.int().argmax(dim=1) + k - 1, width - 1)
    position = torch.arange(width, device=token_ids.device)
    return attention.bool() & (position[None, :] <= last[:, None])
