"""GAE as one scan: the recurrence every advantage estimator (``cxsim.advantages``) solves.

Along the last dim of a batch, over trainable tokens only: untrainable positions (prompt,
observations, padding) pass the next value and the running advantage through unchanged and
get advantage 0, so their values never enter any output. The recurrence
``A_t = d_t + c_t A_{t+1}`` (``c_t = 1, d_t = 0`` at untrainable positions) is solved by the
log-depth reverse linear scan of ``cxsim.scans``: no Python loop over tokens or rows, no host
synchronisation.
"""

from __future__ import annotations

import torch

from cxsim.scans import next_index, reverse_linear_scan


def gae_scan(
    values: torch.Tensor,
    trainable: torch.Tensor,
    seq_id: torch.Tensor | None,
    terminal_reward: torch.Tensor,
    gamma: float,
    lam_tok: torch.Tensor,
    step_reward: torch.Tensor | None = None,
) -> torch.Tensor:
    """GAE along the last dim over trainable tokens. All inputs (B, L) (``seq_id`` and
    ``step_reward`` may be None).

    ``seq_id`` cuts the last dim into independent sequences: a trainable token
    bootstraps from the next trainable token only if it has the same seq_id;
    otherwise it is terminal and gets ``terminal_reward``. ``step_reward`` is added
    to the reward of every trainable token.
    """
    length = values.shape[-1]
    nxt = next_index(trainable)
    safe = nxt.clamp(max=length - 1)
    has_next = nxt < length
    if seq_id is not None:
        has_next = has_next & (seq_id.gather(-1, safe) == seq_id)
    zero = values.new_zeros(())
    bootstrap = torch.where(has_next, values.gather(-1, safe), zero)
    reward = torch.where(has_next, zero, terminal_reward)
    if step_reward is not None:
        reward = reward + step_reward
    delta = torch.where(trainable, reward + gamma * bootstrap - values, zero)
    if seq_id is None:
        # Everything after a row's last trainable token has delta 0, so only the
        # row's last column needs to cut the chain (rows share one flat scan).
        coef = torch.where(trainable, gamma * lam_tok, 1.0)
        coef[..., -1] = 0.0
    else:
        coef = torch.where(trainable, torch.where(has_next, gamma * lam_tok, zero), 1.0)
    # a flat contiguous scan: shifting a (B, L) tensor row by row is much slower
    adv = reverse_linear_scan(coef.reshape(-1), delta.reshape(-1), span=length)
    return torch.where(trainable, adv.reshape(values.shape), zero)
