"""What an estimator returns, checked in one place for the trainer, the lab and conform.

An estimator of :data:`cxsim.estimators.ESTIMATORS` (cxsim's own or a plug-in) returns
(S, T) advantages: a floating-point ``torch.Tensor`` of the mask's shape, finite, and 0
where the mask is False. :func:`check_advantages` says, in one line that names the
estimator, which of these an output breaks, instead of an ``AttributeError`` deep in the
trainer, a traceback in ``cxsim lab`` or hundreds of lines of "largest difference inf"
from ``cxsim conform``. The caller adds where it ran (:func:`within`): a study's setting,
arm and seed; conform's case.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import torch

T = TypeVar("T")


class PluginOutputError(RuntimeError):
    """A plug-in returned what cxsim cannot use; its text is one line that names the plug-in.

    A failed run or check (``cxsim`` exits 1), not a usage error."""

    def within(self, where: str) -> PluginOutputError:
        """The same error with ``where`` (``study arm 'a', seed 3``) said after it."""
        return PluginOutputError(f"{self} ({where})")


def within(where: str, compute: Callable[[], T]) -> T:
    """``compute()``; a :class:`PluginOutputError` it raises says ``where`` it ran (a study's
    setting, arm and seed)."""
    try:
        return compute()
    except PluginOutputError as error:
        raise error.within(where) from None


def _position(index: torch.Tensor) -> str:
    """``row 2, token 5`` for the first (row, token) of a ``nonzero()`` result."""
    row, token = (int(i) for i in index[0])
    return f"row {row}, token {token}"


def check_advantages(name: str, advantages: Any, mask: torch.Tensor) -> torch.Tensor:
    """``advantages`` as estimator ``name`` returned them, when they are what the trainer
    takes: a floating-point ``torch.Tensor`` of ``mask``'s (S, T) shape, finite, 0 where
    ``mask`` is False. Raises :class:`PluginOutputError` (one line) otherwise."""
    import torch

    said = f"estimator {name!r} returned"
    shape = tuple(mask.shape)
    if not isinstance(advantages, torch.Tensor):
        raise PluginOutputError(
            f"{said} a {type(advantages).__name__}, not a torch.Tensor of shape (S, T) = "
            f"{shape} (one advantage per token, like inputs.mask)"
        )
    if tuple(advantages.shape) != shape:
        raise PluginOutputError(
            f"{said} advantages of shape {tuple(advantages.shape)}; it must return one per "
            f"token, shape (S, T) = {shape} like inputs.mask"
        )
    if not advantages.is_floating_point():
        raise PluginOutputError(f"{said} a {advantages.dtype} tensor; advantages are floats")
    bad = ~torch.isfinite(advantages)
    if bool(bad.any()):
        where = bad.nonzero()
        raise PluginOutputError(
            f"{said} {len(where)} advantages that are nan or inf, the first at "
            f"{_position(where)}: {float(advantages[tuple(where[0])])}"
        )
    off = (advantages != 0) & ~mask.bool()
    if bool(off.any()):
        where = off.nonzero()
        raise PluginOutputError(
            f"{said} {len(where)} nonzero advantages off the mask, the first at "
            f"{_position(where)}: {float(advantages[tuple(where[0])]):g}; they must be 0 where "
            "inputs.mask is False"
        )
    return advantages
