"""Which policy a command runs and how its chat template renders turns: ``--policy`` and
``--chat.*``, one settings group every command that takes a policy embeds.

:class:`Model` holds the two fields with their one docstring each; the chat options check
themselves when made (:class:`cxsim.model_options.ChatOptions`), so a bad one stops a
command before any stage starts; whether ``--policy`` names a saved model is the command's
check (``cxsim sft``'s ``check_starting_policy``, ``cxsim eval``'s ``check_policy_dir``): a
study builds the configs of policies it has not made yet. A command config holds it as

    model: Model = field(default_factory=Model, metadata=FLAT)

beside its :class:`cxsim.compute.Compute`. The group's fields carry no prefix of their own
(``--policy`` and ``--chat.system-role``, not ``--model.policy``), and it is recorded flat
(:data:`cxsim.compute.FLAT`): a results.json ``config``, the TensorBoard config table and
``cxsim study --print-commands`` spell ``policy`` and ``chat`` as the command's own, as
before the group existed. The commands differ in their starting policy: ``cxsim run`` and
``sft`` start from the shipped checkpoint (:class:`Model`), ``train`` from ``cxsim sft``'s
(:class:`SavedModel`: a saved policy, never None), ``eval`` and ``tables`` from none
(``Model(policy=None)``: ``--agent``, a fresh model); ``calibrate`` (:class:`PolicyOnly`)
and ``critic-probe`` (:class:`SavedPolicyOnly`) offer ``--policy`` alone, their runs
rendered with the policy's saved or default chat options. ``cxsim verdicts`` keeps its own
fields. No torch import (``--help`` stays fast).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

import tyro

from cxsim.compute import HIDDEN
from cxsim.model_options import ChatOptions
from cxsim.pretrained import PRETRAINED

UNPREFIXED = tyro.conf.arg(prefix_name=False)
"""A group field's flag without the group's name: ``--policy``, and the chat options'
``--chat.*`` (their own group's prefix kept)."""

SFT_POLICY = "runs/sft/policy"
"""Where ``cxsim sft`` saves its policy by default: what ``train`` and ``critic-probe`` read."""


@dataclass(frozen=True)
class Model:
    """The policy and how its chat template renders turns."""

    policy: Annotated[str | None, UNPREFIXED] = PRETRAINED
    """``pretrained`` (the shipped starting checkpoint, the tiny model that copies),
    ``pretrained-chat`` (its chat-templated sibling: a Llama over a BPE tokenizer with
    ChatML), a policy saved by ``cxsim sft`` or ``train``, or a local Hugging Face causal-LM
    directory (model, tokenizer and chat template from it); None, where a command takes it:
    a fresh ``--sft.model`` preset over the word tokenizer (``run``, ``sft``, ``calibrate``,
    ``tables``; give it ``--sft.epochs 12`` or more), or a scripted ``--agent`` (``eval``)."""
    chat: Annotated[ChatOptions, UNPREFIXED] = field(default_factory=ChatOptions)
    """How the policy's chat template renders turns (a policy with a template only); left at
    the defaults, ``train`` and ``eval`` use the options the policy was saved with (by
    ``cxsim sft``)."""


@dataclass(frozen=True)
class SavedModel(Model):
    """A saved policy and how its chat template renders turns."""

    policy: Annotated[str, UNPREFIXED] = SFT_POLICY


@dataclass(frozen=True)
class PolicyOnly(Model):
    """The policy (its chat options the defaults: no ``--chat.*``)."""

    chat: tyro.conf.Suppress[ChatOptions] = field(default_factory=ChatOptions, metadata=HIDDEN)


@dataclass(frozen=True)
class SavedPolicyOnly(SavedModel):
    """A saved policy (rendered with the chat options it was saved with: no ``--chat.*``)."""

    chat: tyro.conf.Suppress[ChatOptions] = field(default_factory=ChatOptions, metadata=HIDDEN)
