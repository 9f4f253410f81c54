"""How a command's models compute: ``--device``, ``--precision``, ``--gradient-checkpointing``
and ``--threads``, one settings group every command embeds.

:class:`Compute` holds the four fields with their one docstring each and checks them when
made (device and precision: :mod:`cxsim.model_options`), so a bad value stops a command
before any stage starts. A command config holds it as

    compute: ComputeFlags[Compute] = field(default_factory=Compute, metadata=FLAT)

tyro offers its fields without a prefix (``--device``, not ``--compute.device``), and the
group is recorded flat (``cxsim.tracking.RECORDED_FLAT``): a results.json ``config``, the
TensorBoard config table and ``cxsim study --print-commands`` spell its fields as the
command's own, as before the group existed. A command that offers only some of the flags
embeds a subclass that hides the others, left out of its records: :class:`SamplingCompute`
(``eval``), :class:`OneThreadCompute` (``tables``), :class:`DeviceCompute` (only
``--device``, cpu by default: ``pretrain``, and ``calibrate``, whose device is part of its
cache keys), :class:`StudyCompute` (``study`` and ``verdicts``: the same, checked by the command for
where its runs compute, which with ``--executor ray`` is other machines) and
:class:`CPUCompute` (only ``--threads``: ``critic-probe``). Beside it, the commands that take a policy embed
:class:`cxsim.model_group.Model` (``--policy``, ``--chat.*``) the same way.

One command keeps its own field: ``cxsim lab``, whose ``--device`` is not this one: it names the array backend of a simulation (``cpu``: NumPy,
``cuda``: CuPy, ``auto``: CuPy when it sees a GPU), not a torch device (no ``cuda:N``;
its ``auto`` asks CuPy, not torch), so one field would mean two things. No torch import
(``--help`` stays fast).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Annotated, Any, TypeVar

import tyro

from cxsim.model_options import Precision, check_device_name, check_precision
from cxsim.tracking import RECORDED_FLAT, RECORDED_WHEN_SET

ComputeT = TypeVar("ComputeT", bound="Compute")

HIDDEN: Mapping[str, Any] = MappingProxyType({RECORDED_WHEN_SET: True})
"""A field a subclass hides from its command: no flag, and left out of records at its
default (the command's records never held it)."""


@dataclass(frozen=True)
class Compute:
    """Where and how the models compute (speed and memory; ``--precision`` also changes the
    numbers)."""

    device: str = "auto"
    """auto (CUDA when present), cpu, cuda or cuda:N: every model and batch of the command;
    under torchrun (``cxsim train``), cuda is each rank's LOCAL_RANK GPU (NCCL), cpu runs
    every rank on CPU (gloo)."""
    precision: Precision = "fp32"
    """fp32, or bf16: bfloat16 autocast in sampling, scoring and updates, with float32
    weights and Adam state."""
    gradient_checkpointing: bool = False
    """Recompute decoder activations in the backward pass of SFT and PPO, actor and critic
    (less memory, ~1.3x the update time)."""
    threads: int = 1
    """torch intra-op threads of the command's updates (``eval``: of its sampling; 0: torch's
    default). 1 is the safe choice on shared cores: a second thread that must wait for a
    busy core made a tiny-model update 8x slower."""

    def __post_init__(self) -> None:
        check_device_name(self.device)
        check_precision(self.precision)
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0 (0: torch's default); got {self.threads}")


@dataclass(frozen=True)
class SamplingCompute(Compute):
    """Where and how the policy samples (it has no backward pass to checkpoint)."""

    gradient_checkpointing: tyro.conf.Suppress[bool] = field(default=False, metadata=HIDDEN)


@dataclass(frozen=True)
class OneThreadCompute(Compute):
    """Where and how the models compute; each run is one single-threaded process (``--jobs``
    sets how many run at once: no ``--threads``). The command checks ``--device`` for where
    its runs go (this machine: ``check_device_name``; ``--executor ray``: cpu or cuda, the
    cluster's GPUs, which this machine may lack)."""

    threads: tyro.conf.Suppress[int] = field(default=1, metadata=HIDDEN)

    def __post_init__(self) -> None:
        check_precision(self.precision)  # the device: the command checks it where runs go

    def per_run(self, device: str | None = None) -> Compute:
        """What each run computes with: these settings on one thread (on ``device`` instead
        of ``--device`` when given)."""
        return Compute(device or self.device, self.precision, self.gradient_checkpointing, 1)


@dataclass(frozen=True)
class DeviceCompute(Compute):
    """Where the command's runs compute (each a single-threaded process at float32): only
    ``--device``."""

    device: str = "cpu"
    precision: tyro.conf.Suppress[Precision] = field(default="fp32", metadata=HIDDEN)
    gradient_checkpointing: tyro.conf.Suppress[bool] = field(default=False, metadata=HIDDEN)
    threads: tyro.conf.Suppress[int] = field(default=1, metadata=HIDDEN)


@dataclass(frozen=True)
class StudyCompute(DeviceCompute):
    """Where a study's runs compute: only ``--device``, part of the cache's key. The command
    checks it for where its runs compute (this machine's workers: ``check_device_name``;
    ``--executor ray``: cpu or cuda, the cluster's GPUs), so the group checks nothing."""

    def __post_init__(self) -> None:
        pass


@dataclass(frozen=True)
class CPUCompute(Compute):
    """How the command computes, on the CPU: only ``--threads``."""

    device: tyro.conf.Suppress[str] = field(default="cpu", metadata=HIDDEN)
    precision: tyro.conf.Suppress[Precision] = field(default="fp32", metadata=HIDDEN)
    gradient_checkpointing: tyro.conf.Suppress[bool] = field(default=False, metadata=HIDDEN)


ComputeFlags = Annotated[ComputeT, tyro.conf.OmitArgPrefixes]
"""A config field's type for an embedded :class:`Compute` (or subclass): its flags without
the group's prefix."""


FLAT: Mapping[str, Any] = MappingProxyType({RECORDED_FLAT: True})
"""The metadata of a config field that embeds a :class:`Compute`: ``compute:
ComputeFlags[Compute] = field(default_factory=Compute, metadata=FLAT)``, recorded flat
(:data:`cxsim.tracking.RECORDED_FLAT`)."""
