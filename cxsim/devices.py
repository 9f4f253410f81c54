"""Where tensors live and in which precision the models compute.

``resolve_device`` turns ``auto | cpu | cuda | cuda:N`` into a ``torch.device``;
on a machine without CUDA, ``auto`` asks ``torch.cuda.is_available()`` and
nothing else of ``torch.cuda``. ``autocast`` is the one precision switch:
``fp32`` runs as is, ``bf16`` runs forwards under bfloat16 autocast while the
weights (the master copy) and the optimizer state stay float32, because the
model is kept in float32 and autocast only lowers the matmul inputs.
(RNG states, CUDA's only when CUDA is present: ``cxsim.checkpoint.capture_rng``.)
"""

from __future__ import annotations

import contextlib

import torch

# re-exported here, where callers import them; defined torch-free for the entry points' --help
from cxsim.model_options import (  # noqa: F401
    CUDA_INDEX,
    PRECISIONS,
    Precision,
    check_device_name,
    check_precision,
)


def resolve_device(name: str) -> torch.device:
    """``auto`` (CUDA when present, else CPU), ``cpu``, ``cuda`` (the current GPU) or ``cuda:N``
    (checked by :func:`check_device_name`, as every entry point's config already did)."""
    if name == "cpu":
        return torch.device("cpu")
    if name == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    check_device_name(name)  # the form, then CUDA and the GPU's index
    return torch.device(name)


def autocast(precision: Precision, device: torch.device) -> contextlib.AbstractContextManager:
    """The forward-pass context for ``precision`` on ``device`` (a no-op for fp32)."""
    check_precision(precision)
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def master_weights(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with float32 parameters and buffers (a bf16 checkpoint is upcast in place),
    so that optimizer states built from its parameters are float32 too."""
    floating = [p for p in model.parameters() if p.is_floating_point()]
    if any(p.dtype != torch.float32 for p in floating):
        model.float()
    return model
