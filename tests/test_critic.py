"""Critic: independent copy of the policy backbone, value alignment, save/load."""

import pytest
import torch
from torch import nn

from cxsim.agents.critic import Critic
from cxsim.agents.models import build_policy
from cxsim.agents.tokenizer import build_tokenizer


@pytest.fixture
def policy():
    return build_policy("tiny", build_tokenizer([f"w{i}" for i in range(50)]), max_positions=32)


def _randomise_head(critic: Critic) -> None:
    with torch.no_grad():
        critic.head.weight.normal_(generator=torch.Generator().manual_seed(0))
        critic.head.bias.fill_(0.5)


def test_from_policy_shares_no_parameters(policy):
    critic = Critic.from_policy(policy)
    policy_ptrs = {p.data_ptr() for p in policy.parameters()}
    assert not policy_ptrs & {p.data_ptr() for p in critic.parameters()}
    ids = torch.tensor([[3, 10, 11, 4, 12]])
    _randomise_head(critic)
    before_policy = policy(ids).logits.detach().clone()
    before_values = critic(ids, torch.ones_like(ids)).detach().clone()
    with torch.no_grad():
        for p in critic.backbone.parameters():
            p.add_(1.0)
    assert torch.equal(policy(ids).logits, before_policy)
    with torch.no_grad():
        for p in policy.parameters():
            p.mul_(-1.0)
    critic_after = critic(ids, torch.ones_like(ids))
    assert not torch.equal(critic_after, before_values)  # the backbone change did act
    with torch.no_grad():
        for p in critic.backbone.parameters():
            p.sub_(1.0)
    torch.testing.assert_close(critic(ids, torch.ones_like(ids)), before_values)


def test_fresh_critic_learns_through_its_head_first(policy):
    """From the policy, the critic values everything at 0; the first step on a value loss
    moves only the head (the backbone's gradient passes through the zero head), the second
    reaches the backbone, and the values move toward the target."""
    critic = Critic.from_policy(policy)
    ids = torch.tensor([[3, 10, 11, 4]])
    opt = torch.optim.SGD(critic.parameters(), lr=0.1)
    backbone = [p.detach().clone() for p in critic.backbone.parameters()]

    def step() -> None:
        opt.zero_grad()
        ((critic(ids, torch.ones_like(ids))[:, 1:] - 1.0) ** 2).mean().backward()
        opt.step()

    step()
    assert all(
        torch.equal(a, b) for a, b in zip(backbone, critic.backbone.parameters(), strict=True)
    )
    assert critic.head.weight.abs().sum() > 0
    step()
    assert any(
        not torch.equal(a, b) for a, b in zip(backbone, critic.backbone.parameters(), strict=True)
    )
    assert (critic_values(critic, ids)[:, 1:] > 0.1).all()  # toward the target 1


def critic_values(critic: Critic, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return critic(ids, torch.ones_like(ids))


def test_values_align_with_prefixes(policy):
    """values[:, t] = head(hidden after tok_<t); 0 at position 0 and on padding."""
    critic = Critic.from_policy(policy)
    _randomise_head(critic)
    row = [3, 10, 11, 4, 12, 13]
    ids = torch.tensor([row, [3, 10, 11, 0, 0, 0]])
    mask = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0]])
    with torch.no_grad():
        values = critic(ids, mask)
        for t in range(1, len(row)):
            hidden = critic.backbone(torch.tensor([row[:t]])).last_hidden_state[0, -1]
            torch.testing.assert_close(values[0, t], critic.head(hidden)[0], atol=1e-5, rtol=0)
    assert values.shape == (2, 6) and values.dtype == torch.float32
    assert (values[:, 0] == 0).all() and (values[1, 3:] == 0).all()
    torch.testing.assert_close(values[1, :3], values[0, :3], atol=1e-5, rtol=0)
    # A token's value does not depend on the token itself, only on what precedes it.
    changed = torch.tensor([[3, 10, 11, 4, 12, 20]])
    torch.testing.assert_close(critic(changed, torch.ones_like(changed))[0], values[0])


def test_save_load_roundtrip(policy, tmp_path):
    critic = Critic.from_policy(policy)
    _randomise_head(critic)
    critic.save_pretrained(tmp_path)
    loaded = Critic.from_pretrained(tmp_path)
    ids = torch.tensor([[3, 10, 11, 4, 12], [3, 14, 15, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        assert torch.equal(loaded.eval()(ids, mask), critic.eval()(ids, mask))


def test_load_missing_and_bad_head(policy, tmp_path):
    with pytest.raises(FileNotFoundError, match="no critic"):
        Critic.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="head must be"):
        Critic(policy.get_decoder(), nn.Linear(8, 1))
