"""Benchmark: cxsim's scan-based estimators against a reverse time loop.

The baseline is GAE as common PPO frameworks compute it with masks:
``for t in reversed(range(T))``, vectorised over rows, carrying ``next_value``
and the running GAE through untrainable positions. For ``cross_segment_gae``
the loop runs over each segment (rows = segments) and the same correction
factor is applied; for ``stitched_gae`` it runs over each rollout's segments
laid end to end (rows = rollouts, ``K*T`` steps). Both baselines produce the
same numbers as the estimators (checked before timing).

    cxsim bench advantages --segments 128 --tokens 2048 --device cpu
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import tyro

from cxsim.advantages import cross_segment_gae, stitched_gae, tokens_after


@dataclass(frozen=True)
class Config:
    segments: int = 128
    """Rows S in the batch."""
    tokens: int = 2048
    """Tokens T per row (padded width)."""
    segments_per_rollout: int = 4
    """Segments per rollout; must divide ``segments``."""
    trainable_fraction: float = 0.5
    """Share of tokens that are trainable (responses), the rest observations/prompt."""
    dtype: Literal["float32", "float64"] = "float32"
    device: Literal["cpu", "cuda"] = "cpu"
    repeats: int = 7
    """Timed repetitions per method (after one warm-up); the median is reported."""
    threads: int | None = None
    """torch intra-op threads (None: torch's default). The time loop works on (S,)
    slices and barely uses threads; on a busy shared machine ``--threads 1`` gives
    steadier figures."""
    gamma: float = 1.0
    lam: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        if self.segments % self.segments_per_rollout:
            raise ValueError(
                f"segments ({self.segments}) must be a multiple of segments_per_rollout "
                f"({self.segments_per_rollout})"
            )
        if not 0.0 < self.trainable_fraction < 1.0:
            raise ValueError(f"trainable_fraction must be in (0, 1), got {self.trainable_fraction}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")


def make_batch(config: Config) -> dict[str, torch.Tensor]:
    """Segments of response blocks interleaved with observation blocks, rows shuffled."""
    gen = torch.Generator().manual_seed(config.seed)
    rows, width = config.segments, config.tokens
    dtype = getattr(torch, config.dtype)
    period = max(2, min(128, width // 4))  # one response + one observation block
    response = max(1, round(config.trainable_fraction * period))
    phase = torch.randint(0, period, (rows, 1), generator=gen)
    pos = torch.arange(width)[None, :]
    trainable = ((pos + phase) % period) < response
    trainable[:, 0] = False  # the prompt
    lengths = torch.randint(width * 7 // 8, width + 1, (rows, 1), generator=gen)
    trainable &= pos < lengths  # right padding
    num_rollouts = rows // config.segments_per_rollout
    rollout_id = torch.arange(num_rollouts).repeat_interleave(config.segments_per_rollout)
    segment_index = torch.arange(config.segments_per_rollout).repeat(num_rollouts)
    rewards = torch.rand(num_rollouts, generator=gen, dtype=torch.float64).round()
    batch = {
        "values": torch.randn(rows, width, generator=gen, dtype=torch.float64).to(dtype),
        "trainable": trainable,
        "rewards": rewards.repeat_interleave(config.segments_per_rollout).to(dtype),
        "rollout_id": rollout_id,
        "segment_index": segment_index,
    }
    order = torch.randperm(rows, generator=gen)
    return {name: x[order].to(config.device) for name, x in batch.items()}


def time_loop_gae(
    values: torch.Tensor,
    trainable: torch.Tensor,
    rewards: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """Masked GAE by a reverse loop over time, vectorised over rows. (B, L) -> (B, L).

    Reward ``rewards[b]`` at each row's last trainable token.
    """
    _, length = values.shape
    adv = torch.zeros_like(values)
    next_value = torch.zeros_like(values[:, 0])
    running = torch.zeros_like(values[:, 0])
    seen = torch.zeros_like(trainable[:, 0])  # a later trainable token exists
    for t in reversed(range(length)):
        m = trainable[:, t]
        reward = torch.where(seen, 0.0, rewards)
        delta = reward + gamma * next_value - values[:, t]
        gae = delta + gamma * lam * running
        running = torch.where(m, gae, running)
        next_value = torch.where(m, values[:, t], next_value)
        seen = seen | m
        adv[:, t] = torch.where(m, gae, 0.0)
    return adv


def loop_cross_segment(batch: dict[str, torch.Tensor], gamma: float, lam: float) -> torch.Tensor:
    local = time_loop_gae(batch["values"], batch["trainable"], batch["rewards"], gamma, lam)
    after = tokens_after(batch["trainable"], batch["rollout_id"], batch["segment_index"])
    return (gamma * lam) ** after.to(local.dtype)[:, None] * local


def loop_stitched(batch: dict[str, torch.Tensor], gamma: float, lam: float, k: int):
    rows, width = batch["values"].shape
    order = torch.argsort(batch["rollout_id"] * k + batch["segment_index"])
    values = batch["values"][order].reshape(rows // k, k * width)
    trainable = batch["trainable"][order].reshape(rows // k, k * width)
    rewards = batch["rewards"][order].reshape(rows // k, k)[:, -1]
    stitched = time_loop_gae(values, trainable, rewards, gamma, lam).reshape(rows, width)
    out = torch.empty_like(stitched)
    out[order] = stitched
    return out


def _seconds(fn: Callable[[], torch.Tensor], cuda: bool) -> float:
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def median_seconds(
    ours: Callable[[], torch.Tensor], loop: Callable[[], torch.Tensor], repeats: int, cuda: bool
) -> tuple[float, float]:
    """Median wall time of each, measured alternately so both see the same machine load."""
    ours(), loop()  # warm-up
    pairs = [(_seconds(ours, cuda), _seconds(loop, cuda)) for _ in range(repeats)]
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)


def main(argv: list[str] | None = None) -> None:
    config = tyro.cli(Config, args=argv)
    if config.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device=cuda requested but CUDA is not available")
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    batch = make_batch(config)
    g, lam, k = config.gamma, config.lam, config.segments_per_rollout
    args = (batch["values"], batch["trainable"], batch["rewards"])
    ids = (batch["rollout_id"], batch["segment_index"])
    methods = {
        "cross_segment_gae": (
            lambda: cross_segment_gae(*args, *ids, g, lam),
            lambda: loop_cross_segment(batch, g, lam),
        ),
        "stitched_gae": (
            lambda: stitched_gae(*args, *ids, g, lam),
            lambda: loop_stitched(batch, g, lam, k),
        ),
    }
    tol = 1e-4 if config.dtype == "float32" else 1e-9
    cuda = config.device == "cuda"
    print(
        f"S={config.segments} T={config.tokens} K={k} trainable="
        f"{batch['trainable'].float().mean():.3f} dtype={config.dtype} device={config.device} "
        f"torch={torch.__version__} threads={torch.get_num_threads()} repeats={config.repeats}"
    )
    for name, (ours, loop) in methods.items():
        ours_out, loop_out = ours(), loop()
        err = (ours_out - loop_out).abs().max()
        if not err <= tol * (1 + loop_out.abs().max()):
            raise RuntimeError(f"{name} disagrees with the time loop (max abs err {err:.3g})")
        t_ours, t_loop = median_seconds(ours, loop, config.repeats, cuda)
        print(
            f"{name:18s} ours {t_ours * 1e3:9.2f} ms   time loop {t_loop * 1e3:9.2f} ms   "
            f"ratio (loop/ours) {t_loop / t_ours:6.1f}x   max abs diff {float(err):.2e}"
        )


if __name__ == "__main__":
    main()
