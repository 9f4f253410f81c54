"""summarize_all: every diagnostic the inputs allow, in one flat dict of TensorBoard tags."""

import math

import torch

from cxsim.advantages import cross_segment_gae
from cxsim.diagnostics import ComputeMeter, summarize_all
from cxsim.segments import Segment, SegmentBatch, pack_segments

LAYOUT = [("execution", 4), ("summary", 2), ("execution", 3)]


def _batch() -> SegmentBatch:
    segments = []
    for rid, reward in enumerate([1.0, 0.0, 1.0]):
        for k, (role, n) in enumerate(LAYOUT):
            mask = [False, False] + [True, False] * (n - 1) + [True]
            segments.append(
                Segment(role, list(range(len(mask))), mask, [0.0] * len(mask), rid, k, reward)
            )
    return pack_segments(segments)


def _records() -> list[dict]:
    return [
        {
            "success": bool(rid % 2 == 0),
            "turns": 4,
            "compactions": 1,
            "summaries": ["key a is 3"],
            "summary_recall": [{"a": rid != 1}],
            "summary_stated": [{"a": True}],
            "tokens_generated": 9,
            "tokens_prefilled": 20,
            "tokens_summarised": 2,
        }
        for rid in range(3)
    ]


def test_every_prefix_present_and_values_finite():
    batch = _batch()
    values = torch.rand(batch.trainable.shape, generator=torch.Generator().manual_seed(0))
    args = (values, batch.trainable, batch.rewards, batch.rollout_id, batch.segment_index)
    advantages = cross_segment_gae(*args, 1.0, 0.95)
    meter = ComputeMeter()
    meter.add_records(_records())
    stats = summarize_all(
        batch,
        _records(),
        advantages=advantages,
        values=values,
        entropy=torch.ones(batch.trainable.shape),
        gamma=1.0,
        lam=0.95,
        meter=meter,
    )
    prefixes = {key.split("/")[0] for key in stats}
    assert prefixes == {
        "omission",
        "survival",
        "figures",
        "compute",
        "weights",
        "horizon",
        "credit",
        "critic",
        "gap",
    }
    assert all(isinstance(v, float) and not math.isnan(v) for v in stats.values())
    assert stats["omission/overall"] == 1 / 3
    assert stats["survival/round1"] == 2 / 3 and stats["survival/fact/round1"] == 2 / 3
    assert stats["weights/segment-mean/share_seg1"] == 1 / 3
    assert stats["credit/discount_seg2"] == 1.0
    assert stats["figures/entropy"] == 1.0
    assert stats["compute/successes"] == 2


def test_without_summary_training_the_summaries_drop_out():
    batch = _batch()
    values = torch.zeros(batch.trainable.shape)
    stats = summarize_all(batch, values=values, lam=0.5, train_summaries=False)
    assert stats["weights/token-mean/summary_share"] == 0.0
    assert stats["credit/discount_seg0"] == 0.5**3  # N_{>0} counts only the last window
    assert stats["gap/rel_err"] == 0.0
    assert not any(key.startswith(("omission/", "figures/", "credit/abs")) for key in stats)
