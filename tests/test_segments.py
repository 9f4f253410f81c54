"""Tests for cxsim.segments: Segment validation, pack_segments, masks, select."""

from __future__ import annotations

import pytest
import torch

from cxsim.segments import OPENING_CONTEXT, Segment, SegmentBatch, opening_context, pack_segments


def segment(rollout_id: int, segment_index: int, trainable: list[bool], **kwargs) -> Segment:
    n = len(trainable)
    return Segment(
        role=kwargs.pop("role", "execution"),
        token_ids=kwargs.pop("token_ids", list(range(10, 10 + n))),
        trainable=trainable,
        logprobs=kwargs.pop("logprobs", [-0.5] * n),
        rollout_id=rollout_id,
        segment_index=segment_index,
        **kwargs,
    )


@pytest.fixture
def batch() -> SegmentBatch:
    return pack_segments(
        [
            segment(3, 0, [False, True, True, False], reward=1.0, group_id=0),
            segment(3, 1, [False, True], role="summary", reward=1.0, group_id=0),
            segment(5, 0, [False, False, True], reward=0.0, group_id=0),
        ],
        pad_id=-1,
    )


def test_pack_pads_right_and_keeps_masks_apart(batch):
    assert len(batch) == 3
    assert batch.token_ids.shape == (3, 4)
    assert batch.token_ids[1].tolist() == [10, 11, -1, -1]
    assert batch.attention.tolist() == [
        [True, True, True, True],
        [True, True, False, False],
        [True, True, True, False],
    ]
    assert batch.trainable.tolist() == [
        [False, True, True, False],
        [False, True, False, False],
        [False, False, True, False],
    ]
    assert not (batch.trainable & ~batch.attention).any()  # padding is never trainable
    assert batch.lengths.tolist() == [4, 2, 3]
    assert batch.num_trainable == 4


def test_pack_zeroes_logprobs_off_the_trainable_mask(batch):
    assert batch.logprobs.dtype == torch.float32
    assert batch.logprobs[0].tolist() == [0.0, -0.5, -0.5, 0.0]
    assert (batch.logprobs[~batch.trainable] == 0).all()


def test_pack_per_row_fields(batch):
    assert batch.is_summary.tolist() == [False, True, False]
    assert batch.rollout_id.tolist() == [3, 3, 5]
    assert batch.segment_index.tolist() == [0, 1, 0]
    assert batch.rewards.tolist() == [1.0, 1.0, 0.0]
    assert batch.group_id.tolist() == [0, 0, 0]
    assert batch.rollout_id.dtype == torch.long and batch.rewards.dtype == torch.float32


def test_policy_mask_drops_summaries_only_when_asked(batch):
    assert torch.equal(batch.policy_mask(), batch.trainable)
    without = batch.policy_mask(train_summaries=False)
    assert not without[1].any()
    assert torch.equal(without[[0, 2]], batch.trainable[[0, 2]])


def test_select_and_extras(batch):
    values = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    with_values = batch.with_extras(values=values)
    assert "values" not in batch.extras  # with_extras returns a new batch
    sub = with_values.select([2, 0])
    assert len(sub) == 2
    assert sub.rollout_id.tolist() == [5, 3]
    assert torch.equal(sub.extras["values"], values[[2, 0]])
    assert torch.equal(sub.trainable, batch.trainable[[2, 0]])
    moved = sub.to("cpu")
    assert torch.equal(moved.extras["values"], sub.extras["values"])


def test_duplicate_rollout_segment_pairs_raise():
    with pytest.raises(ValueError, match="rollout_id=3 and segment_index=1"):
        pack_segments([segment(3, 1, [False, True]), segment(3, 1, [False, True])])
    pack_segments([segment(3, 1, [False, True]), segment(4, 1, [False, True])])  # fine


def test_empty_and_malformed_segments_raise():
    with pytest.raises(ValueError, match="at least one segment"):
        pack_segments([])
    with pytest.raises(ValueError, match="role"):
        segment(0, 0, [False], role="tool")
    with pytest.raises(ValueError, match="same length"):
        segment(0, 0, [False, True], logprobs=[0.0])
    with pytest.raises(ValueError, match="at least one token"):
        segment(0, 0, [], token_ids=[], logprobs=[])


def test_segment_num_trainable():
    assert segment(0, 0, [False, True, True]).num_trainable == 2


def test_the_opening_context_ends_with_the_first_assistant_header():
    header = [7, 8]
    ids = torch.tensor(
        [
            [1, 2, 7, 8, 5, 7, 8, 6],  # the header twice: the first counts
            [1, 7, 2, 8, 7, 8, 0, 0],  # 7 then 8 apart is no header; padded
            [1, 2, 3, 4, 5, 6, 0, 0],  # no header: the whole row
        ]
    )
    attention = ids != 0
    context = opening_context(ids, attention, header)
    assert context.int().tolist() == [
        [1, 1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 1, 0, 0],
    ]
    assert torch.equal(opening_context(ids, attention, []), attention)
    batch = pack_segments(
        [Segment("execution", [1, 2, 7, 8, 5], [False] * 4 + [True], [0.0] * 5, 0, 0)]
    ).with_opening_context(header)
    assert batch.extras[OPENING_CONTEXT].int().tolist() == [[1, 1, 1, 1, 0]]
