"""Synthetic segmented rollouts with exact values and advantages.

The process
-----------
A rollout is ``exec_0, sum_0, exec_1, ..., sum_{K-1}, exec_K`` (K compactions).
Each execution segment is a prompt (untrainable), then assistant turns of
``turn_tokens`` trainable tokens separated by ``obs_tokens`` untrainable
observation tokens. Each summary segment is a prompt, then ``summary_tokens``
trainable tokens. Every trainable token is a binary choice of the policy.

Most tokens do not matter. ``decisive_per_segment`` tokens of each execution
segment (evenly spaced) pick the good action with probability ``p_good``; the
last token of each summary decides whether the summary keeps the information
that later decisions need (kept with probability ``1 - drop``). Once a summary
drops it, no later decision can help. The reward is ``R ~ Bernoulli(P)`` with

    P = base + sum_d w a_d alive_d,   w = (1 - base) / (decisive_per_segment (K + 1)),

``a_d`` the decision and ``alive_d`` = no summary before d dropped the information.

Exact ground truth
------------------
Time steps are trainable tokens, t = 0..N-1 in rollout order; ``D_t = N-1-t``
is the distance to the end. The undiscounted value of the state before token t
is, with k(t) the events (decisive or keep tokens) before t,

    v_t = base + sum_{d < t} w a_d alive_d + alive_t G_{k(t)},
    G_j = sum_{decisive d >= event j} w p_good (1 - drop)^{keeps in [j, d)},

and the value after choosing token t is ``u_t = v_{t+1}`` (``v_N = P``). With the
reward on the last token and discount gamma per trainable token, the true value
and advantage are ``V_t = gamma^{D_t} v_t`` and ``A_t = gamma^{D_t} (u_t - v_t)``.
``A_t`` is zero except at events; it depends only on (t, a_t, alive_t), the
"cell" of the token.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ProcessSpec:
    """Shape and dynamics of the synthetic process."""

    compactions: int = 3
    """K: compaction boundaries per rollout (2K+1 segments: K+1 execution, K summaries)."""
    exec_tokens: tuple[int, ...] = (256,)
    """Trainable tokens per execution segment: one value for all, or K+1 values."""
    summary_tokens: int = 32
    """Trainable tokens per summary segment (the last one is the keep/drop decision)."""
    turn_tokens: int = 32
    """Trainable tokens per assistant turn; an observation follows every turn but the last."""
    obs_tokens: int = 16
    """Untrainable observation tokens after each assistant turn."""
    prompt_tokens: int = 4
    """Untrainable prompt tokens at the start of every segment (at least 1)."""
    decisive_per_segment: int = 2
    """Decisive tokens per execution segment."""
    base: float = 0.1
    """Success probability when no decision helps."""
    p_good: float = 0.5
    """Policy probability of the good action at a decisive token."""
    drop: float = 0.3
    """Probability that a summary drops the information later decisions need."""
    gamma: float = 1.0
    """Discount per trainable token (the ground truth and every estimator use it)."""

    def __post_init__(self) -> None:
        if self.compactions < 0:
            raise ValueError(f"compactions must be >= 0, got {self.compactions}")
        if len(self.exec_tokens) not in (1, self.compactions + 1):
            raise ValueError(
                f"exec_tokens needs 1 or compactions+1={self.compactions + 1} values, "
                f"got {len(self.exec_tokens)}"
            )
        if min(self.exec_tokens) < self.decisive_per_segment or min(self.exec_tokens) < 1:
            raise ValueError("every execution segment needs >= decisive_per_segment >= 1 tokens")
        if self.summary_tokens < 1 or self.turn_tokens < 1 or self.prompt_tokens < 1:
            raise ValueError("summary_tokens, turn_tokens and prompt_tokens must be >= 1")
        if not 0.0 <= self.base <= 1.0 or not 0.0 <= self.p_good <= 1.0:
            raise ValueError("base and p_good must lie in [0, 1]")
        if not 0.0 <= self.drop <= 1.0:
            raise ValueError(f"drop must lie in [0, 1], got {self.drop}")
        if not 0.0 < self.gamma <= 1.0:
            raise ValueError(f"gamma must lie in (0, 1], got {self.gamma}")

    @property
    def exec_lengths(self) -> tuple[int, ...]:
        return (
            self.exec_tokens * (self.compactions + 1)
            if len(self.exec_tokens) == 1
            else self.exec_tokens
        )

    @property
    def weight(self) -> float:
        """Success probability added by one good, alive decision."""
        return (1.0 - self.base) / (self.decisive_per_segment * (self.compactions + 1))


@dataclass(frozen=True)
class Critic:
    """The critic the estimators see: ``V_hat = V + bias + noise * N(0, 1)``, i.i.d. per token."""

    bias: float = 0.0
    noise: float = 0.0


@dataclass(frozen=True)
class Layout:
    """Where every token of one rollout sits; the same for all rollouts of a spec (NumPy)."""

    trainable: np.ndarray  # (R, W) bool, R = 2K+1 rows in time order, W = longest row
    is_summary: np.ndarray  # (R,) bool
    token_flat: np.ndarray  # (N,) flat index row*W + col of trainable token t
    token_row: np.ndarray  # (N,) row (= segment index) of token t
    value_src: np.ndarray  # (R*W,) token whose value each position shows (next trainable one)
    dist: np.ndarray  # (N,) D_t = N-1-t
    to_segment_end: np.ndarray  # (N,) trainable tokens after t in its own segment
    after: np.ndarray  # (N,) N_{>s}: trainable tokens in later segments
    event_token: np.ndarray  # (E,) token index of each event, in time order
    event_is_keep: np.ndarray  # (E,) bool: summary keep decision (else decisive token)
    event_prob: np.ndarray  # (E,) probability of action 1 (good / keep)
    event_weight: np.ndarray  # (E,) w for decisive events, 0 for keep events
    token_event: np.ndarray  # (N,) events strictly before token t
    token_event_id: np.ndarray  # (N,) event index at token t, E where t is no event
    future: np.ndarray  # (E+1,) G_j: expected future gain from events >= j, given alive

    @property
    def num_rows(self) -> int:
        return self.trainable.shape[0]

    @property
    def width(self) -> int:
        return self.trainable.shape[1]

    @property
    def num_tokens(self) -> int:
        return self.token_flat.shape[0]

    @property
    def num_events(self) -> int:
        return self.event_token.shape[0]

    def row_label(self, row: int) -> str:
        return f"{'sum' if self.is_summary[row] else 'exec'} {row // 2}"


def _exec_row(n: int, spec: ProcessSpec) -> list[bool]:
    row = [False] * spec.prompt_tokens
    turns = [spec.turn_tokens] * (n // spec.turn_tokens)
    if n % spec.turn_tokens:
        turns.append(n % spec.turn_tokens)
    for i, turn in enumerate(turns):
        row += [True] * turn
        if i < len(turns) - 1:
            row += [False] * spec.obs_tokens
    return row


def build_layout(spec: ProcessSpec) -> Layout:
    """The token layout, events and future-gain table of ``spec`` (small; built once)."""
    rows: list[list[bool]] = []
    for s, n in enumerate(spec.exec_lengths):
        rows.append(_exec_row(n, spec))
        if s < spec.compactions:
            rows.append([False] * spec.prompt_tokens + [True] * spec.summary_tokens)
    num_rows, width = len(rows), max(len(r) for r in rows)
    trainable = np.zeros((num_rows, width), dtype=bool)
    for r, row in enumerate(rows):
        trainable[r, : len(row)] = row
    token_flat = np.flatnonzero(trainable)  # row-major = time order
    token_row = token_flat // width
    n_tok = token_flat.size
    per_row = trainable.sum(axis=1)
    row_end = np.cumsum(per_row) - 1  # last token index of each row
    after_row = n_tok - 1 - row_end

    # each position shows the value of the next trainable token of its row (the last one if none)
    value_src = np.empty((num_rows, width), dtype=np.int64)
    for r in range(num_rows):
        ids = np.flatnonzero(trainable[r])
        first_token = row_end[r] - ids.size + 1
        nxt = np.searchsorted(ids, np.arange(width))
        value_src[r] = first_token + np.minimum(nxt, ids.size - 1)

    event_token, event_is_keep = [], []
    for r in range(num_rows):
        first = row_end[r] - per_row[r] + 1
        if r % 2 == 1:
            event_token.append(row_end[r])
            event_is_keep.append(True)
        else:
            d = spec.decisive_per_segment
            local = ((np.arange(d) + 0.5) * per_row[r] / d).astype(np.int64)
            event_token += (first + local).tolist()
            event_is_keep += [False] * d
    ev_tok = np.asarray(event_token, dtype=np.int64)
    ev_keep = np.asarray(event_is_keep, dtype=bool)
    ev_prob = np.where(ev_keep, 1.0 - spec.drop, spec.p_good)
    ev_w = np.where(ev_keep, 0.0, spec.weight)

    num_events = ev_tok.size
    future = np.zeros(num_events + 1)
    for j in range(num_events):
        keeps = np.concatenate([[0], np.cumsum(ev_keep[j:])[:-1]])  # keeps in [j, i)
        future[j] = np.sum(ev_w[j:] * ev_prob[j:] * (1.0 - spec.drop) ** keeps)
    token_event = np.searchsorted(ev_tok, np.arange(n_tok), side="left")
    token_event_id = np.full(n_tok, num_events, dtype=np.int64)
    token_event_id[ev_tok] = np.arange(num_events)
    return Layout(
        trainable=trainable,
        is_summary=np.arange(num_rows) % 2 == 1,
        token_flat=token_flat,
        token_row=token_row,
        value_src=value_src.reshape(-1),
        dist=n_tok - 1 - np.arange(n_tok),
        to_segment_end=row_end[token_row] - np.arange(n_tok),
        after=after_row[token_row],
        event_token=ev_tok,
        event_is_keep=ev_keep,
        event_prob=ev_prob,
        event_weight=ev_w,
        token_event=token_event,
        token_event_id=token_event_id,
        future=future,
    )


@dataclass
class Sample:
    """B simulated rollouts: the padded estimator inputs and the exact ground truth.

    Padded tensors have S = B*R rows (rollout b, segment r at row b*R + r) and
    width W; per-token arrays are (B, N) in rollout time order. All arrays
    belong to the array module ``xp``.
    """

    spec: ProcessSpec
    layout: Layout
    xp: ModuleType
    values: Any  # (S, W) float32, critic output V_hat
    trainable: Any  # (S, W) bool
    rewards: Any  # (S,) float32, the rollout's terminal reward on each of its rows
    rollout_id: Any  # (S,) int64
    segment_index: Any  # (S,) int64
    group_id: Any  # (S,) int64
    true_adv: Any  # (B, N) float32, A_t
    value_after: Any  # (B, N) float32, u_t = E[R | x_t, a_t] (undiscounted)
    cell: Any  # (B, N) int32, 4t + 2 a_t + alive_t: A_t is constant on a cell
    event_score: Any  # (B, E) float32, a - p: d log pi / d logit at each event

    @property
    def num_rollouts(self) -> int:
        return self.true_adv.shape[0]

    @property
    def num_tokens(self) -> int:
        """Trainable tokens in the batch."""
        return self.true_adv.size

    def per_token(self, padded: Any) -> Any:
        """(S, W) padded per-position array -> (B, N) at the trainable tokens."""
        flat = padded.reshape(self.num_rollouts, -1)
        return self.xp.take(flat, self.xp.asarray(self.layout.token_flat), axis=1)


def event_values(layout: Layout, spec: ProcessSpec, action: Any, xp: ModuleType) -> tuple[Any, Any]:
    """Exact values around the events of B rollouts.

    ``action`` (B, E) bool. Returns ``v`` (B, E+1) float32, the undiscounted value
    before event j (``v[:, E]`` = success probability), and ``alive`` (B, E+1)
    bool, the information is still available before event j.
    """
    keep = xp.asarray(layout.event_is_keep)
    dropped = (keep & ~action).astype(xp.int32)
    drops_before = xp.cumsum(dropped, axis=1) - dropped
    alive = xp.concatenate([drops_before == 0, (drops_before[:, -1:] + dropped[:, -1:]) == 0], 1)
    weight = xp.asarray(layout.event_weight, dtype=xp.float32)
    gain = weight * action * alive[:, :-1]
    past = xp.concatenate([xp.zeros_like(gain[:, :1]), xp.cumsum(gain, axis=1)], axis=1)
    v = spec.base + past + alive * xp.asarray(layout.future, dtype=xp.float32)
    return v.astype(xp.float32), alive


def simulate(
    spec: ProcessSpec,
    num_rollouts: int,
    critic: Critic,
    seed: int,
    xp: ModuleType = np,
    group_size: int = 8,
    layout: Layout | None = None,
) -> Sample:
    """Simulates ``num_rollouts`` rollouts of ``spec``; vectorised, no loop over tokens.

    Rollouts ``g*group_size .. (g+1)*group_size - 1`` form group g (group broadcast).
    """
    if num_rollouts < 1 or group_size < 1:
        raise ValueError("num_rollouts and group_size must be >= 1")
    layout = build_layout(spec) if layout is None else layout
    rng = xp.random.default_rng(seed)
    b, n, e = num_rollouts, layout.num_tokens, layout.num_events
    f32 = xp.float32

    prob = xp.asarray(layout.event_prob, dtype=f32)
    action = rng.random((b, e), dtype=f32) < prob  # (B, E)
    v_ev, alive_ev = event_values(layout, spec, action, xp)
    reward = (rng.random(b, dtype=f32) < v_ev[:, -1]).astype(f32)  # (B,)

    token_event = xp.asarray(layout.token_event)
    event_id = xp.asarray(layout.token_event_id)
    is_event = (event_id < e).astype(token_event.dtype)
    disc = xp.asarray(spec.gamma ** layout.dist.astype(np.float64), dtype=f32)  # (N,)
    v_tok = xp.take(v_ev, token_event, axis=1)  # (B, N) v_t
    u_tok = xp.take(v_ev, token_event + is_event, axis=1)  # (B, N) u_t = v_{t+1}
    true_adv = (u_tok - v_tok) * disc

    v_hat = v_tok * disc + f32(critic.bias)
    if critic.noise > 0:
        v_hat += f32(critic.noise) * rng.standard_normal((b, n), dtype=f32)
    rows = layout.num_rows
    values = xp.take(v_hat, xp.asarray(layout.value_src), axis=1).reshape(b * rows, layout.width)

    act_ext = xp.concatenate([action, xp.zeros_like(action[:, :1])], axis=1)
    act_tok = xp.take(act_ext, event_id, axis=1).astype(xp.int32)
    alive_tok = xp.take(alive_ev, token_event, axis=1).astype(xp.int32)
    cell = 4 * xp.arange(n, dtype=xp.int32) + 2 * act_tok + alive_tok

    rollout_id = xp.repeat(xp.arange(b, dtype=xp.int64), rows)
    return Sample(
        spec=spec,
        layout=layout,
        xp=xp,
        values=values,
        trainable=xp.tile(xp.asarray(layout.trainable), (b, 1)),
        rewards=xp.repeat(reward, rows),
        rollout_id=rollout_id,
        segment_index=xp.tile(xp.arange(rows, dtype=xp.int64), b),
        group_id=rollout_id // group_size,
        true_adv=true_adv,
        value_after=u_tok,
        cell=cell,
        event_score=action.astype(f32) - prob,
    )
