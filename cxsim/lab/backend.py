"""Array backend of the lab: NumPy on CPU, CuPy on a GPU, one code path.

Simulation and measurement take an array module ``xp`` and call only functions
that NumPy and CuPy share. Estimators are the torch functions of
:mod:`cxsim.advantages`; arrays cross over with ``torch.from_numpy`` on CPU and
DLPack on the GPU, both without copying.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Literal

import numpy as np
import torch

Device = Literal["cpu", "cuda", "auto"]


def cupy_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        import cupy
    except ImportError:
        return False
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except cupy.cuda.runtime.CUDARuntimeError:
        return False


def array_module(device: Device) -> ModuleType:
    """``numpy`` for ``cpu``; ``cupy`` for ``cuda``; ``auto`` takes CuPy when a GPU is present."""
    if device == "cpu" or (device == "auto" and not cupy_available()):
        return np
    if device not in ("cuda", "auto"):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'auto', got {device!r}")
    if not cupy_available():
        raise RuntimeError("device='cuda' needs CuPy and a CUDA device; use device='cpu'")
    import cupy

    return cupy


def to_torch(x: Any) -> torch.Tensor:
    """A torch view of a NumPy or CuPy array (no copy, except CuPy bool masks)."""
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    if x.dtype == bool:
        # DLPack bool support differs across CuPy/torch versions; a byte view always works.
        return torch.from_dlpack(x.view("uint8")).to(torch.bool)
    return torch.from_dlpack(x)


def from_torch(t: torch.Tensor, xp: ModuleType) -> Any:
    """The array of ``xp`` viewing ``t`` (no copy)."""
    if xp is np:
        return t.numpy()
    return xp.from_dlpack(t)
