"""Critic probe: is a rollout's outcome in its context, and do the critic's features carry it?

Reads top to bottom. For one policy (``--policy``):

1. roll out ``--episodes`` tasks under Compacted (task seeds from ``--first-seed``, away
   from training and evaluation seeds), as training does (temperature 1);
2. **the ceiling**: success split by whether the last summary kept every needed fact, and
   the explained variance a value that knew only that fact would reach;
3. **the features**: a critic made from the policy as training makes it
   (``Critic.from_policy``), frozen; per segment index, a ridge probe from its features at
   the segment's first trainable token (where ``critic/mc_ev_seg{k}`` reads the value) to
   the outcome, fit on the first ``--fit-share`` of the rollouts, its explained variance
   on the rest. Two feature sets: the last hidden state (what the value head reads) and
   the mean hidden state over the prefix;
4. **the critic's own training** (``--critic-iterations N``): a fresh critic made from the
   policy, trained by the trainer's own critic step (``score_batch`` then ``critic_update``,
   ``--ppo.*`` settings) on the fit rollouts, ``rollouts_per_batch`` at a time with the
   policy fixed; after each iteration its explained variance of the held-out outcome at
   each segment's first trainable token.

Why: on the verdict run the critic's explained variance stayed near 0 at every segment
(docs/results.md, "The critic by segment"); this separates "the outcome is not
predictable from the context" from "the value head's features do not carry it".

    cxsim critic-probe --policy runs/sft/policy --out probe.json
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import tyro

from cxsim.compaction import CompactionConfig
from cxsim.config import DEFAULT_COMPACTION, EnvConfig, PPOConfig

FEATURES = ("last", "prefix-mean")
"""Feature sets of the probe: the hidden state at the value's position, and the mean of the
hidden states over the prefix up to it."""


@dataclass(frozen=True)
class Config:
    """Critic probe: outcome predictability and the critic's features, by segment."""

    policy: str = "runs/sft/policy"
    """Policy checkpoint (``cxsim sft``); the probed critic is made from it."""
    episodes: int = 256
    """Rollouts (one task each)."""
    first_seed: int = 777_000_000
    """Task seeds ``first_seed + i``: between training seeds (below 1e9, by stride 1e6 per
    run seed, so run seeds up to 776 never reach it) and evaluation seeds (from 1e9)."""
    fit_share: float = 0.75
    """Share of the rollouts the probe is fit on; the rest are held out."""
    ridges: tuple[float, ...] = (1.0, 10.0, 100.0)
    """Ridge penalties tried (on standardised features); each is reported."""
    env: EnvConfig = field(default_factory=EnvConfig)
    compaction: CompactionConfig = field(default_factory=lambda: DEFAULT_COMPACTION)
    critic_iterations: int = 0
    """Then train a critic from the policy for this many iterations with the trainer's own
    critic step on the fit rollouts (0: skip)."""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """The critic step's settings (rollouts per iteration, critic ratio, lr, estimator)."""
    out: str | None = None
    """Write the figures here as JSON (None: print only)."""
    threads: int = 1
    """torch threads."""

    def __post_init__(self) -> None:
        if self.episodes < 8:
            raise ValueError(f"--episodes {self.episodes}: the probe needs at least 8 rollouts")
        if not 0.0 < self.fit_share < 1.0:
            raise ValueError(f"--fit-share {self.fit_share} must lie strictly between 0 and 1")
        if not self.ridges or min(self.ridges) <= 0:
            raise ValueError(f"--ridges {self.ridges}: pass positive penalties")
        if self.critic_iterations < 0:
            raise ValueError(f"--critic-iterations {self.critic_iterations} must be >= 0")
        if self.critic_iterations and not self.ppo.uses_critic:
            raise ValueError(f"--ppo.estimator {self.ppo.estimator!r} has no critic to train")


def explained_variance(pred: Any, real: Any) -> float:
    """``1 - Var(real - pred) / Var(real)``; nan when ``real`` is constant."""
    var = float(real.var(unbiased=False))
    return float("nan") if var == 0.0 else 1.0 - float((real - pred).var(unbiased=False)) / var


def ridge_heldout_ev(x: Any, y: Any, fit: Any, ridge: float) -> float:
    """Ridge regression of ``y`` on ``x`` (standardised on the fit rows, with an intercept)
    fit on rows ``fit``; explained variance on the other rows."""
    import torch

    mean, std = x[fit].mean(0), x[fit].std(0) + 1e-6
    z = torch.cat([(x - mean) / std, torch.ones(len(x), 1, dtype=x.dtype)], dim=1)
    gram = z[fit].T @ z[fit] + ridge * torch.eye(z.shape[1], dtype=x.dtype)
    weights = torch.linalg.solve(gram, z[fit].T @ y[fit])
    return explained_variance(z[~fit] @ weights, y[~fit])


def outcome_ceiling(records: list[Any]) -> dict[str, float]:
    """Success with and without the needed facts in the last summary, and the explained
    variance of a value that knows only that."""
    import torch

    success = torch.tensor([float(r.success) for r in records], dtype=torch.float64)
    kept = torch.tensor(
        [
            bool(r.summary_recall and r.summary_recall[-1]) and all(r.summary_recall[-1].values())
            for r in records
        ]
    )
    out = {"success": float(success.mean()), "kept_share": float(kept.double().mean())}
    pred = torch.full_like(success, float(success.mean()))
    for flag, name in ((True, "kept"), (False, "lost")):
        if bool((kept == flag).any()):
            out[f"success_if_{name}"] = float(success[kept == flag].mean())
            pred[kept == flag] = success[kept == flag].mean()
    out["ev_ceiling"] = explained_variance(pred, success)
    return out


def value_features(critic: Any, batch: Any, rows: int = 16) -> dict[str, Any]:
    """(S, H) features per row at the position whose hidden state gives the value of the
    row's first trainable token: the last hidden state there and the prefix mean."""
    import torch

    first = batch.trainable.long().argmax(dim=1)  # the first trainable token of each row
    out: dict[str, list[Any]] = {name: [] for name in FEATURES}
    with torch.no_grad():
        for start in range(0, len(batch), rows):
            ids = batch.token_ids[start : start + rows]
            mask = batch.attention[start : start + rows].long()
            position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
            hidden = critic.backbone(
                input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=False
            ).last_hidden_state.double()  # (s, T, H)
            at = first[start : start + rows] - 1  # values[t] = head(hidden[t - 1])
            picked = torch.arange(len(ids))
            running = (hidden * mask[..., None]).cumsum(1) / mask.cumsum(1).clamp(min=1)[..., None]
            out["last"].append(hidden[picked, at])
            out["prefix-mean"].append(running[picked, at])
    return {name: torch.cat(parts) for name, parts in out.items()}


def first_token_ev(values: Any, batch: Any) -> dict[str, float]:
    """Explained variance of the outcome by the value at each segment's first trainable
    token, per segment index (``seg{k}``; left out where the outcome does not vary)."""
    first = batch.trainable.long().argmax(dim=1)
    out = {}
    for k in range(int(batch.segment_index.max()) + 1):
        rows = (batch.segment_index == k).nonzero().squeeze(1)
        real = batch.rewards[rows].double()
        if len(rows) > 1 and float(real.var()) > 0:
            out[f"seg{k}"] = explained_variance(values[rows, first[rows]].double(), real)
    return out


def critic_training(cfg: Config, segments: list[Any], policy: Any, chat: Any) -> list[dict]:
    """Step 4: the trainer's critic step on fixed rollouts; held-out figures per iteration."""
    import torch

    from cxsim.agents.critic import Critic
    from cxsim.ppo import critic_update, critic_values, score_batch
    from cxsim.segments import pack_segments

    cut, per = int(cfg.fit_share * cfg.episodes), cfg.ppo.rollouts_per_batch
    batches = [
        pack_segments([s for s in segments if lo <= s.rollout_id < min(lo + per, cut)], chat.pad_id, 1.0)
        for lo in range(0, cut, per)
    ]  # fmt: skip
    held = pack_segments([s for s in segments if s.rollout_id >= cut], chat.pad_id, 1.0)
    critic = Critic.from_policy(policy)
    optimizer = torch.optim.Adam(critic.parameters(), lr=cfg.ppo.critic_lr)
    history = []
    for iteration in range(cfg.critic_iterations):
        batch = batches[iteration % len(batches)]
        scored, _ = score_batch(batch, critic, cfg.ppo, continuation=chat.assistant_prefix())
        critic_update(critic, optimizer, scored, cfg.ppo, cfg.ppo.critic_ratio * cfg.ppo.epochs)
        values = critic_values(critic, held, cfg.ppo.micro_batch_rows)
        history.append(first_token_ev(values, held))
    return history


def probe(cfg: Config) -> dict[str, Any]:
    import torch

    from cxsim.agents.critic import Critic
    from cxsim.agents.lm_agent import LMAgent
    from cxsim.agents.models import load_policy
    from cxsim.generation import SamplingConfig
    from cxsim.preflight import preflight
    from cxsim.runtime import collect_rollouts
    from cxsim.segments import pack_segments

    torch.set_num_threads(cfg.threads)
    torch.manual_seed(0)
    policy, _, chat = load_policy(cfg.policy)
    compaction = preflight(cfg.env, cfg.compaction, chat)
    # 1. rollouts under Compacted, sampled as in training
    agent = LMAgent(policy, chat, SamplingConfig(temperature=1.0), "cpu")
    seeds = [cfg.first_seed + i for i in range(cfg.episodes)]
    with torch.no_grad():
        rollouts = collect_rollouts(cfg.env.env_id, cfg.env.kwargs, agent, compaction, seeds, chat)
    # 2. the ceiling
    result: dict[str, Any] = {"policy": cfg.policy, "episodes": cfg.episodes}
    result |= outcome_ceiling(rollouts.records)
    # 3. the critic's frozen features, by segment
    batch = pack_segments(rollouts.segments, chat.pad_id)
    features = value_features(Critic.from_policy(policy), batch)
    fit_rows = batch.rollout_id < int(cfg.fit_share * cfg.episodes)
    probes = {}
    for k in range(int(batch.segment_index.max()) + 1):
        rows = torch.nonzero(batch.segment_index == k).squeeze(1)
        fit = fit_rows[rows]
        if int(fit.sum()) < 4 or int((~fit).sum()) < 4:
            continue  # too few rollouts reach segment k
        y = batch.rewards[rows].double()
        probes[f"seg{k}"] = {
            name: {f"ridge{r:g}": ridge_heldout_ev(x[rows], y, fit, r) for r in cfg.ridges}
            for name, x in features.items()
        } | {"rollouts": len(rows)}
    result["probe_heldout_ev"] = probes
    # 4. the critic's own training, the policy fixed
    if cfg.critic_iterations:
        result["critic_training"] = critic_training(cfg, rollouts.segments, policy, chat)
    return result


def show(result: dict[str, Any]) -> None:
    print(
        f"{result['episodes']} rollouts: success {result['success']:.3f}; last summary kept "
        f"the facts in {result['kept_share']:.3f} (success "
        f"{result.get('success_if_kept', float('nan')):.3f}), lost them otherwise (success "
        f"{result.get('success_if_lost', float('nan')):.3f}); a value knowing only that "
        f"explains {result['ev_ceiling']:+.3f} of the outcome"
    )
    for seg, cells in result["probe_heldout_ev"].items():
        parts = [
            f"{name} " + " ".join(f"{v:+.3f}" for v in cells[name].values()) for name in FEATURES
        ]
        print(f"  {seg} ({cells['rollouts']} rollouts) held-out EV by ridge: " + "; ".join(parts))
    for i, cells in enumerate(result.get("critic_training", []), start=1):
        shown = " ".join(f"{seg} {ev:+.2f}" for seg, ev in cells.items())
        print(f"  critic iteration {i}: held-out EV at segment starts {shown}")


def main(argv: list[str] | None = None) -> None:
    from cxsim.tracking import write_json

    cfg = tyro.cli(Config, args=list(sys.argv[1:] if argv is None else argv))
    result = probe(cfg)
    show(result)
    if cfg.out:
        write_json(cfg.out, result)


if __name__ == "__main__":
    main()
