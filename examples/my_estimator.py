"""A GAE variant to study: CompactionRL's cross-segment correction with a floor.

Segment s of a rollout gets ``max((gamma lam_s)^N_>s, floor) * A_loc``: local GAE scaled as
the paper scales it (docs/method.md, section 3), but never by less than ``floor``, so early
segments keep more of their credit. ``floor_0`` is the same code with the floor at 0: it
must equal cxsim's ``cross-segment`` estimator, which ``cxsim conform`` checks.
"""

from functools import partial

import torch

from cxsim.advantages import segment_gae
from cxsim.estimators import Estimator, EstimatorInputs


def floored_correction(x: EstimatorInputs, floor: float) -> torch.Tensor:
    local = segment_gae(x.values, x.mask, x.rewards, x.gamma, x.lam, step_rewards=x.step_rewards)
    lam = torch.as_tensor(x.lam, dtype=x.values.dtype, device=x.values.device).expand(len(x.values))
    same_rollout = x.rollout_id[:, None] == x.rollout_id[None, :]
    later = x.segment_index[None, :] > x.segment_index[:, None]
    tokens_after = (same_rollout & later).to(x.values.dtype) @ x.mask.sum(1).to(x.values.dtype)
    scale = torch.pow(x.gamma * lam, tokens_after).clamp(min=floor)
    return scale[:, None] * local


floored = Estimator(partial(floored_correction, floor=0.8), True, "cross-segment GAE, scale >= 0.8")
floor_0 = Estimator(partial(floored_correction, floor=0.0), True, "the same with floor 0")
