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
   on the rest. Three feature sets: the last hidden state (what the value head reads),
   the mean hidden state over the prefix, and the mean input embedding over the prefix
   (what the prefix's words alone say, before any layer);
4. **the critic's own training** (``--critic-iterations N``): a fresh critic made from the
   policy, trained by the trainer's own critic step (``score_batch`` then ``critic_update``,
   ``--ppo.*`` settings) on the fit rollouts, ``rollouts_per_batch`` at a time with the
   policy fixed; after each iteration its explained variance of the held-out outcome at
   each segment's first trainable token;
5. **critic variants** (``--variants``, with ``--critic-iterations N``): for each value head
   (``last``, ``prefix-mean``, ``attention-pool``, ``words-pool``, ``words-max``,
   ``words-seen``, ``context-ridge``; cxsim/critics.py), optionally with a value loss (``+mse``,
   ``+hl-gauss``; else ``--ppo.value-loss``): a ridge probe of the features
   that head reads, fresh from the policy (for a pooled head, the pooled features), and the
   learning curve of a critic of that variant (``cxsim.critics.build_critic``) trained by
   the trainer's own critic step as in step 4, on the same fit rollouts and the same
   minibatch order. Both are measured where the ceiling of step 2 applies: the held-out
   explained variance of the outcome at the first trainable token of each rollout's last
   segment (whose window holds the last summary). One row per variant: the probe's
   explained variance (ridge penalty chosen on a validation quarter of the fit rollouts),
   the critic's after its N iterations, and the optimiser steps it took to reach half the
   ceiling. The JSON also holds each variant's curve by segment index and its head's probe
   at every segment's first trainable token (``probe_by_segment``, as in step 3). With
   ``--out X.json`` the rows also go to ``X.md`` as a Markdown table.

Why: on the verdict run the critic's explained variance stayed near 0 at every segment
(docs/results.md, "The critic by segment"); this separates "the outcome is not
predictable from the context" from "the value head's features do not carry it".

    cxsim critic-probe --policy runs/sft/policy --out probe.json
    cxsim critic-probe --policy runs/sft/policy --critic-iterations 16 --out probe.json \
      --variants last prefix-mean attention-pool last+hl-gauss prefix-mean+hl-gauss
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import tyro

from cxsim.compaction import CompactionConfig
from cxsim.compute import FLAT, ComputeFlags, CPUCompute
from cxsim.config import DEFAULT_COMPACTION, EnvConfig, PPOConfig
from cxsim.critics import VALUE_HEADS, VALUE_LOSSES
from cxsim.model_group import SavedPolicyOnly
from cxsim.pipeline.critic_probe_measures import (
    first_token_ev,
    last_segment_ev,
    last_segment_rows,
    ridge_heldout_ev,
    ridge_probe,
    steps_to_reach,
)

FEATURES = ("last", "prefix-mean", "embedding-mean")
"""Feature sets of the probe: the hidden state at the value's position, the mean of the
hidden states over the prefix up to it, and the mean of the prefix's input embeddings (a
bag of its words: what the last layer would carry if it kept every word it read)."""


@dataclass(frozen=True)
class Config:
    """Critic probe: outcome predictability and the critic's features, by segment."""

    model: SavedPolicyOnly = field(default_factory=SavedPolicyOnly, metadata=FLAT)
    """The policy checkpoint (``--policy``); the probed critic is made from it."""
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
    variants: tuple[str, ...] | None = None
    """Critic variants to compare (needs --critic-iterations): each a value head (``last``,
    ``prefix-mean``, ``attention-pool``, ``words-pool``, ``words-max``, ``words-seen``,
    ``context-ridge`` or ``module:name``), optionally ``+`` a value loss (``mse``, ``hl-gauss``; else
    --ppo.value-loss), e.g. ``last prefix-mean+hl-gauss``; the other --ppo.* settings are
    shared. None: only the configured --ppo.* critic."""
    out: str | None = None
    """Write the figures here as JSON (None: print only)."""
    compute: ComputeFlags[CPUCompute] = field(default_factory=CPUCompute, metadata=FLAT)
    """How the probe computes (``--threads``: of its sampling, probes and critic training)."""

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
        if self.variants is not None:
            self._check_variants(self.variants)

    def _check_variants(self, variants: tuple[str, ...]) -> None:
        if not variants:
            raise ValueError("--variants: name at least one, e.g. --variants last prefix-mean")
        if not self.ppo.uses_critic:
            raise ValueError(f"--variants: --ppo.estimator {self.ppo.estimator!r} has no critic")
        if not self.critic_iterations:
            raise ValueError(
                "--variants trains a critic of each variant: set --critic-iterations N (e.g. 16)"
            )
        repeated = sorted({v for v in variants if variants.count(v) > 1})
        if repeated:
            raise ValueError(f"--variants names {', '.join(repeated)} twice: name each once")
        for variant in variants:
            variant_ppo(self.ppo, variant)


def variant_ppo(ppo: PPOConfig, variant: str) -> PPOConfig:
    """``ppo`` with the value head and loss ``variant`` names (``head`` or ``head+loss``; the
    loss defaults to ``ppo.value_loss``); a one-line ValueError for a bad variant."""
    head, plus, loss = variant.partition("+")
    if not head or (plus and not loss) or "+" in loss:
        raise ValueError(
            f"--variants {variant!r}: write a value head, optionally +loss (e.g. last+hl-gauss)"
        )
    try:
        VALUE_HEADS.check("--variants head", head)
        if plus:
            VALUE_LOSSES.check("--variants loss", loss)
        return replace(ppo, value_head=head, value_loss=loss or ppo.value_loss)
    except ValueError as error:  # the registries' errors are KeyErrors too: take the text
        text = error.args[0] if error.args else str(error)
        raise ValueError(
            text if text.startswith("--variants") else f"--variants {variant}: {text}"
        ) from None


def _hidden_states(critic: Any, batch: Any, rows: int) -> Any:
    """Per chunk of ``rows`` rows: ``(hidden (s, T, H), mask (s, T) long, at (s,),
    embedded (s, T, H), ids (s, T), context (s, T) bool or None)`` from the critic's backbone
    (its last hidden states and its input embeddings), the rows' token ids and their opening
    context (when the batch holds it: ``SegmentBatch.with_opening_context``), ``at`` the
    position whose features give the value of each row's first trainable token
    (``values[t] = head(features[t - 1])``)."""
    import torch

    from cxsim.segments import OPENING_CONTEXT

    first = batch.trainable.long().argmax(dim=1)  # the first trainable token of each row
    with torch.no_grad():
        for start in range(0, len(batch), rows):
            ids = batch.token_ids[start : start + rows]
            mask = batch.attention[start : start + rows].long()
            position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
            out = critic.backbone(
                input_ids=ids,
                attention_mask=mask,
                position_ids=position_ids,
                use_cache=False,
                output_hidden_states=True,
            )
            at = first[start : start + rows] - 1
            context = batch.extras.get(OPENING_CONTEXT)
            context = None if context is None else context[start : start + rows]
            yield out.last_hidden_state, mask, at, out.hidden_states[0], ids, context


def value_features(critic: Any, batch: Any, rows: int = 16) -> dict[str, Any]:
    """(S, H) features per row at the position whose hidden state gives the value of the
    row's first trainable token: the last hidden state there, the prefix mean of the hidden
    states and the prefix mean of the input embeddings (:data:`FEATURES`)."""
    import torch

    def running_mean(x: Any, mask: Any) -> Any:
        return (x * mask[..., None]).cumsum(1) / mask.cumsum(1).clamp(min=1)[..., None]

    out: dict[str, list[Any]] = {name: [] for name in FEATURES}
    for hidden, mask, at, embedded, *_ in _hidden_states(critic, batch, rows):
        picked = torch.arange(len(hidden))
        out["last"].append(hidden.double()[picked, at])
        out["prefix-mean"].append(running_mean(hidden.double(), mask)[picked, at])
        out["embedding-mean"].append(running_mean(embedded.double(), mask)[picked, at])
    return {name: torch.cat(parts) for name, parts in out.items()}


def head_features(critic: Any, head: Any, batch: Any, rows: int = 16) -> Any:
    """(S, H) float64: what a fresh value head of entry ``head`` (a
    ``cxsim.critics.ValueHead``) reads for the value of each row's first trainable token:
    the backbone's hidden states through its pool (the hidden state itself for ``last``)."""
    import torch

    from cxsim.agents.critic import pool_features

    pool = head.pool(critic.backbone.config.hidden_size)
    out = []
    with torch.no_grad():
        for hidden, mask, at, embedded, ids, context in _hidden_states(critic, batch, rows):
            features = pool_features(pool, head.reads, hidden, mask.bool(), embedded, ids, context)
            if head.adds_value:  # (features, the pool's own value): the head reads the first
                features = features[0]
            out.append(features[torch.arange(len(hidden)), at].double())
    return torch.cat(out)


def fit_and_held(cfg: Config, segments: list[Any], chat: Any) -> tuple[list[Any], Any]:
    """The fit rollouts in batches of ``rollouts_per_batch`` (the trainer's iterations) and
    the held-out rollouts in one batch."""
    from cxsim.segments import pack_segments

    cut, per = int(cfg.fit_share * cfg.episodes), cfg.ppo.rollouts_per_batch
    batches = [
        pack_segments([s for s in segments if lo <= s.rollout_id < min(lo + per, cut)], chat.pad_id, 1.0)
        for lo in range(0, cut, per)
    ]  # fmt: skip
    held = pack_segments([s for s in segments if s.rollout_id >= cut], chat.pad_id, 1.0)
    return batches, held


def train_critic(
    ppo: PPOConfig,
    iterations: int,
    batches: list[Any],
    held: Any,
    policy: Any,
    chat: Any,
    measure: Any = None,
) -> list[dict[str, float]]:
    """A fresh critic from ``policy`` (``build_critic``: ``ppo``'s value head and loss) trained
    by the trainer's critic step (``score_batch`` then ``critic_update``, ``ppo``'s settings)
    for ``iterations`` iterations over ``batches``; after each, ``measure(values, held)``
    (default: :func:`first_token_ev`)."""

    from cxsim.critics import build_critic, critic_optimizer
    from cxsim.ppo import critic_update, critic_values, score_batch, with_critic_inputs

    measure = first_token_ev if measure is None else measure
    held = with_critic_inputs(held, ppo, chat.assistant_prefix())
    critic = build_critic(policy, ppo)
    optimizer = critic_optimizer(critic, ppo)
    history = []
    for iteration in range(iterations):
        batch = batches[iteration % len(batches)]
        scored, _ = score_batch(batch, critic, ppo, continuation=chat.assistant_prefix())
        critic_update(critic, optimizer, scored, ppo, ppo.critic_ratio * ppo.epochs)
        values = critic_values(critic, held, ppo.micro_batch_rows)
        history.append(measure(values, held))
    return history


def critic_training(cfg: Config, segments: list[Any], policy: Any, chat: Any) -> list[dict]:
    """Step 4: the trainer's critic step on fixed rollouts; held-out figures per iteration."""
    batches, held = fit_and_held(cfg, segments, chat)
    return train_critic(cfg.ppo, cfg.critic_iterations, batches, held, policy, chat)


def variant_rows(
    cfg: Config, batch: Any, segments: list[Any], policy: Any, chat: Any, ceiling: float
) -> list[dict[str, Any]]:
    """Step 5: for each of ``cfg.variants``, the probe of what its head reads and the
    learning curve of its critic; one row each."""
    import torch

    from cxsim.agents.critic import Critic

    frozen = Critic.from_policy(policy)  # the backbone every fresh head reads
    batch = batch.with_opening_context(chat.assistant_prefix())  # for a head that reads it
    last = last_segment_rows(batch)
    fit = batch.rollout_id[last] < int(cfg.fit_share * cfg.episodes)
    y = batch.rewards[last].double()
    batches, held = fit_and_held(cfg, segments, chat)
    half = 0.5 * ceiling if ceiling > 0 else float("nan")  # no ceiling: nothing to reach
    probes: dict[str, tuple[float, float, dict[str, Any]]] = {}
    rows = []
    for variant in cfg.variants or ():
        ppo = variant_ppo(cfg.ppo, variant)
        if ppo.value_head not in probes:  # the loss does not change what the head reads
            x = head_features(frozen, VALUE_HEADS[ppo.value_head], batch)
            by_segment = segment_probes(cfg, {ppo.value_head: x}, batch)
            probes[ppo.value_head] = (*ridge_probe(x[last], y, fit, cfg.ridges), by_segment)
        torch.manual_seed(0)  # every variant sees the same minibatch order
        per_iteration = ppo.critic_ratio * ppo.epochs * ppo.minibatches
        curve = train_critic(
            ppo, cfg.critic_iterations, batches, held, policy, chat,
            lambda values, held: {"last": last_segment_ev(values, held)} | first_token_ev(values, held),
        )  # fmt: skip
        curve = [{"step": (i + 1) * per_iteration} | p for i, p in enumerate(curve)]
        probe_ev, ridge, by_segment = probes[ppo.value_head]
        rows.append(
            {
                "variant": variant,
                "value_head": ppo.value_head,
                "value_loss": ppo.value_loss,
                "probe_ev": probe_ev,
                "probe_ridge": ridge,
                "probe_by_segment": by_segment,
                "steps": curve[-1]["step"],
                "ev_after": curve[-1]["last"],
                "half_ceiling": half,
                "steps_to_half_ceiling": steps_to_reach(curve, half),
                "curve": curve,
            }
        )
    return rows


def segment_probes(cfg: Config, features: dict[str, Any], batch: Any) -> dict[str, Any]:
    """Per segment index k (``seg{k}``, where at least 4 fit and 4 held-out rollouts reach
    it): each feature set's held-out explained variance under each ridge penalty."""
    import torch

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
    return probes


def probe(cfg: Config) -> dict[str, Any]:
    import torch

    from cxsim.agents.critic import Critic
    from cxsim.agents.lm_agent import LMAgent
    from cxsim.agents.models import load_policy
    from cxsim.diagnostics.omission import outcome_ceiling
    from cxsim.generation import SamplingConfig
    from cxsim.preflight import preflight
    from cxsim.runtime import collect_rollouts
    from cxsim.segments import pack_segments

    if cfg.compute.threads:
        torch.set_num_threads(cfg.compute.threads)
    torch.manual_seed(0)
    policy, _, chat = load_policy(cfg.model.policy, cfg.compute.device)
    compaction = preflight(cfg.env, cfg.compaction, chat)
    # 1. rollouts under Compacted, sampled as in training
    agent = LMAgent(policy, chat, SamplingConfig(temperature=1.0), cfg.compute.device)
    seeds = [cfg.first_seed + i for i in range(cfg.episodes)]
    with torch.no_grad():
        rollouts = collect_rollouts(cfg.env.env_id, cfg.env.kwargs, agent, compaction, seeds, chat)
    # 2. the ceiling
    result: dict[str, Any] = {"policy": cfg.model.policy, "episodes": cfg.episodes}
    result |= outcome_ceiling(rollouts.records)
    # 3. the critic's frozen features, by segment
    batch = pack_segments(rollouts.segments, chat.pad_id)
    features = value_features(Critic.from_policy(policy), batch)
    result["probe_heldout_ev"] = segment_probes(cfg, features, batch)
    # 4. the critic's own training, the policy fixed
    if cfg.critic_iterations:
        result["critic_training"] = critic_training(cfg, rollouts.segments, policy, chat)
    # 5. each critic variant: its head's probe and its critic's learning curve
    if cfg.variants is not None:
        result["variants"] = variant_rows(
            cfg, batch, rollouts.segments, policy, chat, result["ev_ceiling"]
        )
    return result


def variants_table(result: dict[str, Any]) -> str:
    """The variants' rows as a Markdown table."""

    def ev(x: float) -> str:
        return "n/a" if math.isnan(x) else f"{x:+.3f}"

    rows = result["variants"]
    steps = rows[0]["steps"]
    lines = [
        f"| variant | value head | value loss | probe EV (ridge) | EV after {steps} steps | "
        "steps to half the ceiling |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        if math.isnan(row["half_ceiling"]):
            reached = "no ceiling"
        elif row["steps_to_half_ceiling"] is None:
            reached = "not reached"
        else:
            reached = str(row["steps_to_half_ceiling"])
        lines.append(
            f"| {row['variant']} | {row['value_head']} | {row['value_loss']} | "
            f"{ev(row['probe_ev'])} ({row['probe_ridge']:g}) | {ev(row['ev_after'])} | {reached} |"
        )
    return "\n".join(lines) + "\n"


def variants_page(result: dict[str, Any], cfg: Config) -> str:
    """The Markdown page of the variants: the setting, what EV means here, the table."""
    held = cfg.episodes - int(cfg.fit_share * cfg.episodes)
    return (
        f"# Critic variants: {result['policy']}\n\n"
        f"{result['episodes']} rollouts ({result['episodes'] - held} fit, {held} held out); "
        f"success {result['success']:.3f}; ceiling (a value that knows whether the last "
        f"summary kept the facts) {result['ev_ceiling']:+.3f}, "
        f"{result['ev_ceiling_loo']:+.3f} left one out. EV: held-out explained "
        "variance of the outcome at the first trainable token of each rollout's last segment; "
        "the probe is a ridge regression from the features the head reads in a critic fresh "
        "from the policy (penalty in brackets); the critic is trained by the trainer's critic "
        f"step for {cfg.critic_iterations} iterations of {cfg.ppo.rollouts_per_batch} "
        "rollouts.\n\n" + variants_table(result)
    )


def show(result: dict[str, Any]) -> None:
    print(
        f"{result['episodes']} rollouts: success {result['success']:.3f}; last summary kept "
        f"the facts in {result['kept_share']:.3f} (success "
        f"{result.get('success_if_kept', float('nan')):.3f}), lost them otherwise (success "
        f"{result.get('success_if_lost', float('nan')):.3f}); a value knowing only that "
        f"explains {result['ev_ceiling']:+.3f} of the outcome "
        f"({result['ev_ceiling_loo']:+.3f} with each group's rate from the other rollouts)"
    )
    for seg, cells in result["probe_heldout_ev"].items():
        parts = [
            f"{name} " + " ".join(f"{v:+.3f}" for v in cells[name].values()) for name in FEATURES
        ]
        print(f"  {seg} ({cells['rollouts']} rollouts) held-out EV by ridge: " + "; ".join(parts))
    for i, cells in enumerate(result.get("critic_training", []), start=1):
        shown = " ".join(f"{seg} {ev:+.2f}" for seg, ev in cells.items())
        print(f"  critic iteration {i}: held-out EV at segment starts {shown}")
    if "variants" in result:
        print("critic variants, at each rollout's last segment:")
        print(variants_table(result), end="")


def main(argv: list[str] | None = None) -> None:
    from cxsim.tracking import write_json

    cfg = tyro.cli(Config, args=list(sys.argv[1:] if argv is None else argv))
    result = probe(cfg)
    show(result)
    if cfg.out:
        write_json(cfg.out, result)
        if "variants" in result:
            out = Path(cfg.out)
            page = (
                out.with_suffix(".md") if out.suffix != ".md" else out.with_name(out.name + ".md")
            )
            page.write_text(variants_page(result, cfg))


if __name__ == "__main__":
    main()
