"""The stabilisers' settings and their check, without torch (``--help`` stays fast): the
choices of ``--ppo.kl-estimator``, ``--ppo.kl-in`` and ``--ppo.lr-schedule``, and
:func:`check_stability_settings`, which ``PPOConfig`` calls when it is built. What each
does: cxsim/stabilisers.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from cxsim.config import PPOConfig

KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")
KLEstimator = Literal["k1", "k2", "k3"]
KL_PLACES: tuple[str, ...] = ("loss", "reward")
KLPlace = Literal["loss", "reward"]
LR_SCHEDULES: tuple[str, ...] = ("constant", "linear")
LRSchedule = Literal["constant", "linear"]


def check_stability_settings(cfg: PPOConfig) -> None:
    """Raises ValueError naming the flag to change when a stabiliser's setting is invalid."""
    if cfg.kl_estimator not in KL_ESTIMATORS:
        raise ValueError(
            f"--ppo.kl-estimator {cfg.kl_estimator!r} is unknown; choose one of: "
            f"{', '.join(KL_ESTIMATORS)}"
        )
    if cfg.kl_in not in KL_PLACES:
        raise ValueError(f"--ppo.kl-in {cfg.kl_in!r} is unknown; choose loss or reward")
    if not cfg.kl_coef >= 0:
        raise ValueError(f"--ppo.kl-coef {cfg.kl_coef} must be >= 0 (0: no penalty)")
    if cfg.kl_in == "reward" and cfg.kl_estimator != "k1" and cfg.kl_coef > 0:
        raise ValueError(
            f"--ppo.kl-in reward takes the k1 estimator (a reward per token, log pi - log ref), "
            f"not {cfg.kl_estimator}: set --ppo.kl-estimator k1, or --ppo.kl-in loss"
        )
    if cfg.target_kl is not None and not cfg.target_kl > 0:
        raise ValueError(f"--ppo.target-kl {cfg.target_kl} must be positive (or None: no stop)")
    if not cfg.whiten_std_floor >= 0:
        raise ValueError(f"--ppo.whiten-std-floor {cfg.whiten_std_floor} must be >= 0")
    if cfg.lr_schedule not in LR_SCHEDULES:
        raise ValueError(
            f"--ppo.lr-schedule {cfg.lr_schedule!r} is unknown; choose constant or linear"
        )
