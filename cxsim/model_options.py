"""How a policy is placed and rendered: device names, precisions and chat-template options.

Plain config types with their checks and no torch or transformers import, so that
every entry point can offer ``--device``, ``--precision`` and ``--chat.*`` and
still answer ``--help`` at once. ``cxsim.devices`` resolves the names on a real
machine; ``cxsim.agents.chat`` renders turns with the options.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

Precision = Literal["fp32", "bf16"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "bf16")

CUDA_INDEX = re.compile(r"cuda:(\d+)")
"""``cuda:N``: the N-th GPU."""

SystemRole = Literal["auto", "native", "merge"]


def check_device_name(name: str) -> None:
    """Config-time check of a device: its form, and for ``cuda`` / ``cuda:N`` that this
    machine has that GPU, so that a command fails before any stage starts (no output, no
    run folder). ``auto`` and ``cpu`` need no torch; a CUDA name imports it to ask."""
    if name not in ("auto", "cpu", "cuda") and CUDA_INDEX.fullmatch(name) is None:
        raise ValueError(f"device must be auto, cpu, cuda or cuda:N; got {name!r}")
    if name.startswith("cuda"):
        check_cuda_device(name)


def check_cuda_device(name: str) -> None:
    """``cuda`` or ``cuda:N`` is usable here: CUDA is available (the only ``torch.cuda``
    call on a machine without it) and, for ``cuda:N``, there is an N-th GPU."""
    import torch

    if not torch.cuda.is_available():
        raise ValueError(f"device {name!r} asked for, but CUDA is not available: use --device cpu")
    match = CUDA_INDEX.fullmatch(name)
    count = torch.cuda.device_count()
    if match is not None and int(match.group(1)) >= count:
        raise ValueError(
            f"device {name!r}: this machine has {count} GPU(s) (cuda:0..cuda:{count - 1}); "
            "pass one of them, or --device cuda"
        )


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}; got {precision!r}")


@dataclass(frozen=True)
class ChatOptions:
    """How a Hugging Face chat template renders the turns (the word format ignores these)."""

    observation_role: Literal["user", "tool"] = "user"
    """Role of environment observations: ``user`` or ``tool`` (templates with a tool role)."""
    system_role: SystemRole = "auto"
    """``native``: a system message; ``merge``: the system text opens the first user turn
    (``system + "\\n\\n" + task``), as templates without a system role (Gemma) ask;
    ``auto``: native when the template renders a system message, else merge."""
    enable_thinking: bool | None = None
    """Passed to the template as ``enable_thinking`` (Qwen3-style); None: not passed."""
    template_args: tuple[str, ...] = ()
    """More template arguments as ``KEY=VALUE`` (VALUE read as JSON when it parses:
    true, 3, "x"; else as a string)."""

    def __post_init__(self) -> None:
        if self.observation_role not in ("user", "tool"):
            raise ValueError(
                f"observation_role must be user or tool; got {self.observation_role!r}"
            )
        if self.system_role not in ("auto", "native", "merge"):
            raise ValueError(f"system_role must be auto, native or merge; got {self.system_role!r}")
        bad = [a for a in self.template_args if "=" not in a or not a.split("=", 1)[0]]
        if bad:
            raise ValueError(f"template_args must be KEY=VALUE; got {bad}")

    def template_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``apply_chat_template``."""
        kwargs: dict[str, Any] = {}
        for arg in self.template_args:
            key, value = arg.split("=", 1)
            try:
                kwargs[key] = json.loads(value)
            except json.JSONDecodeError:
                kwargs[key] = value
        if self.enable_thinking is not None:
            kwargs["enable_thinking"] = self.enable_thinking
        return kwargs
