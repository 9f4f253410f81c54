"""Estimator lab: advantage estimators against exact ground truth (``cxsim lab``).

Simulates segmented rollouts with known values (``cxsim.lab.process``), runs the
estimators of ``cxsim.advantages`` on them and writes ``estimators.md`` and
``estimators_*.png`` to ``output_dir``: the theory check, bias / noise /
correlation by segment and by distance to the end, the gap between the
cross-segment and stitched estimators as a function of critic error, number of
compactions, lambda, segment length and gamma, and a throughput benchmark. This
module holds the settings; the studies are ``cxsim/lab/lab_studies.py`` (imported
once the flags are parsed, so that ``--help`` does not wait for torch), the page
``cxsim/lab/lab_page.py``.

    cxsim lab                          # full, about 2 minutes on 2 cores, under runs/lab
    cxsim lab --out docs/results       # rewrites the committed page
    cxsim lab --preset smoke --out /tmp/lab
    cxsim lab --estimators my_module:my_gae   # your own estimator beside cxsim's

The estimators are the trainer's registry (cxsim/estimators.py): every estimator it
holds or an installed plug-in declares, plus those ``--estimators`` names.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from cxsim.estimators import ESTIMATORS
from cxsim.lab.process import ProcessSpec

Preset = Literal["smoke", "full"]
Device = Literal["cpu", "cuda", "auto"]
"""As ``cxsim.lab.backend.Device`` (which imports torch; tests/test_lab.py checks they agree)."""


@dataclass(frozen=True)
class Config:
    """Estimator lab: the trainer's estimators (yours too) against exact ground truth."""

    preset: Preset = "full"
    """``smoke``: tiny samples, seconds (CI); ``full``: the committed page, about 2 minutes
    on 2 cores (``cxsim lab --out docs/results`` rewrites it)."""
    output_dir: Annotated[Path, tyro.conf.arg(aliases=("--out",))] = Path("runs/lab")
    """Where estimators.md and the PNGs go (``docs/results`` for the committed page)."""
    device: Device = "cpu"
    """Array backend of the simulation: ``cpu`` (NumPy), ``cuda`` (CuPy) or ``auto``."""
    seed: int = 0
    """Seed of the first sample; every setting gets its own seed from it."""
    threads: int = 1
    """torch intra-op threads (1: on a shared 2-core machine more threads only contend)."""
    chunk_rollouts: int = 256
    """Rollouts per estimator call (cache-sized chunks of one large sample)."""
    estimators: Annotated[
        tuple[str, ...],
        tyro.conf.arg(metavar="NAME|MODULE:NAME ...", help_behavior_hint="(default: none)"),
    ] = ()
    """More estimators to measure beside the registry's (cxsim/estimators.py, which are always
    measured): ``my_module:my_gae`` for an ``Estimator`` of your own, or an installed plug-in's
    name (docs/training.md). They appear in the by-segment and gap tables."""

    def __post_init__(self) -> None:
        for name in self.estimators:
            ESTIMATORS.check("--estimators", name)
        if self.threads < 1 or self.chunk_rollouts < 1:
            raise ValueError("--threads and --chunk-rollouts must be >= 1")

    @property
    def rollouts(self) -> int:
        """Rollouts per setting."""
        return {"smoke": 192, "full": 4096}[self.preset]

    @property
    def gradient_batch(self) -> int:
        """Rollouts per batch of the expected-gradient check (batches are its Monte Carlo
        units)."""
        return {"smoke": 16, "full": 64}[self.preset]

    @property
    def bench_rollouts(self) -> int:
        """Rollouts per throughput repeat."""
        return {"smoke": 256, "full": 4096}[self.preset]

    @property
    def spec(self) -> ProcessSpec:
        """The base process; sweeps change one field at a time."""
        if self.preset == "smoke":
            return ProcessSpec(compactions=2, exec_tokens=(48,), summary_tokens=8, turn_tokens=16)
        return ProcessSpec()

    @property
    def sweeps(self) -> dict[str, list]:
        if self.preset == "smoke":
            return {
                "noise": [0.0, 0.2],
                "compactions": [1, 2],
                "lam": [0.95, 1.0],
                "exec": [32, 64],
                "gamma": [1.0, 0.99],
            }
        return {
            "noise": [0.0, 0.05, 0.1, 0.2, 0.5],
            "compactions": [0, 1, 2, 3, 5, 7],
            "lam": [0.9, 0.99, 0.995, 0.999, 0.9995, 1.0],
            "exec": [64, 128, 256, 512, 1024],
            "gamma": [1.0, 0.9999, 0.9995, 0.999, 0.998],
        }


def main(argv: list[str] | None = None) -> None:
    cfg = tyro.cli(Config, args=argv)
    from cxsim.lab.lab_studies import run_lab

    run_lab(cfg)


if __name__ == "__main__":
    main(sys.argv[1:])
