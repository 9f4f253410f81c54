"""Frozen dataclass configs shared by the entry points (parsed by ``tyro.cli``).

Each field's docstring is its ``--help`` text. Every config validates itself in
``__post_init__`` and says what to change, so a bad command fails before any
model is built or any rollout is collected.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import gymnasium as gym
import tyro

from cxsim.best_policy import KEEP_BEST_RULES, KeepBestRule
from cxsim.compaction import PROTOCOLS, CompactionConfig
from cxsim.compaction import Protocol as TrainProtocol
from cxsim.critics import VALUE_HEADS, VALUE_LOSSES, check_critic_settings
from cxsim.env_kwargs import EnvKwargs
from cxsim.envs.defaults import DEFAULT_KWARGS, DefaultKwargs, default_kwargs
from cxsim.estimators import ESTIMATORS
from cxsim.loss_modes import LOSS_MODES
from cxsim.pretrained import policy_path
from cxsim.stability_settings import KLEstimator, KLPlace, LRSchedule, check_stability_settings
from cxsim.strategies import STRATEGIES
from cxsim.tracking import RECORDED_WHEN_SET

# The choices are the registries' (cxsim/estimators.py, cxsim/loss_modes.py): a name they
# hold, an installed plug-in's name, or module:name for the user's own (cxsim/plugins.py);
# PPOConfig checks the name when it is built.
EstimatorName = Annotated[str, tyro.conf.arg(metavar="{" + ",".join(ESTIMATORS) + "}|MODULE:NAME")]
LossMode = Annotated[str, tyro.conf.arg(metavar="{" + ",".join(LOSS_MODES) + "}|MODULE:NAME")]
ValueHeadName = Annotated[str, tyro.conf.arg(metavar="{" + ",".join(VALUE_HEADS) + "}|MODULE:NAME")]
ValueLossName = Annotated[
    str, tyro.conf.arg(metavar="{" + ",".join(VALUE_LOSSES) + "}|MODULE:NAME")
]
ADAPTIVE_SCOPES: tuple[str, ...] = ("segment", "rollout")  # cxsim.advantages.ADAPTIVE_SCOPES
LAMBDA_SCOPES: tuple[str, ...] = ("fixed", *ADAPTIVE_SCOPES)
LambdaScope = Literal[LAMBDA_SCOPES]  # type: ignore[valid-type]
EvalProtocols = Annotated[
    tuple[str, ...], tyro.conf.arg(metavar="{" + ",".join(PROTOCOLS) + "}|MODULE:NAME ...")
]
PolicySize = Literal["tiny", "small", "base"]

DEFAULT_ENV = "cxsim/KeyRecall-v0"
DEFAULT_ENV_KWARGS: dict[str, int | float | bool] = dict(DEFAULT_KWARGS[DEFAULT_ENV])
"""The default task's kwargs (every id's own defaults: cxsim.envs.defaults.DEFAULT_KWARGS)."""
DEFAULT_COMPACTION = CompactionConfig(
    budget=None, threshold=None, max_summary_tokens=None, max_response_tokens=None
)
"""Sizes derived per environment and chat format before any work (cxsim.preflight): the
oracle's longest action and perfect summary, the threshold one step needs, and the smallest
budget whose 4 windows hold the sampled episodes; the main job's KeyRecall keeps its
published 200 / 72 / 32 / 8 (cxsim.envs.defaults.PUBLISHED_SIZES)."""


def _one_of(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is unknown; choose one of: {', '.join(choices)}")


def check_env_id(env_id: str) -> None:
    """Raises ValueError unless ``env_id`` is registered with gymnasium (cxsim ids included).

    ``module:id`` (gymnasium's own form) imports ``module`` first, so that a user's module
    registers its ids; ``gymnasium.make`` accepts the same string. The module is searched in
    the current working folder too (``cxsim.user_modules``), as ``python -m`` would.
    """
    import cxsim.envs  # noqa: F401  (registers the cxsim ids)
    from cxsim.user_modules import import_user_module

    module, _, name = env_id.rpartition(":")
    if module:
        try:
            import_user_module(module)
        except ImportError as error:
            raise ValueError(
                f"--env.env-id {env_id!r}: cannot import module {module!r} ({error}); run "
                "cxsim from the folder that holds it, put it on PYTHONPATH or install it"
            ) from error
        env_id = name
    if env_id not in gym.registry:
        cxsim_ids = sorted(k for k in gym.registry if k.startswith("cxsim/"))
        raise ValueError(
            f"unknown environment id {env_id!r}; set --env.env-id to one of: {', '.join(cxsim_ids)}"
        )


def when_set(default: Any, *, recorded_default: Any = MISSING) -> Any:
    """A field with this default, recorded in settings and cache tags only when set to
    something else (``cxsim.tracking.RECORDED_WHEN_SET``): for settings added after runs
    were recorded, so those runs resume and their caches stay valid. ``recorded_default``:
    the field's old default, when the default changed since runs were recorded; a run at
    the old default is recorded as before, one at the new default with the field."""
    marked = True if recorded_default is MISSING else (recorded_default,)
    return field(default=default, metadata={RECORDED_WHEN_SET: marked})


def check_policy_dir(path: str | Path, flag: str = "--policy") -> None:
    """Raises FileNotFoundError unless ``path`` holds a saved model (config.json);
    ``pretrained`` names the shipped starting checkpoint (cxsim/pretrained.py)."""
    if not (policy_path(path) / "config.json").is_file():
        raise FileNotFoundError(
            f"{flag} {str(path)!r} holds no policy checkpoint (no config.json); run "
            f"`cxsim sft` to make one, or pass {flag} PATH to a directory saved by cxsim"
        )


@dataclass(frozen=True)
class EnvConfig:
    """Which environment, and its keyword arguments."""

    env_id: str = DEFAULT_ENV
    """Gymnasium id (``cxsim/KeyRecall-v0``, ``cxsim/FactUpdate-v0``, ``cxsim/SimRepo-v0``, presets),
    or ``my_module:my/Env-v0`` for your own Text-in/Text-out env (the module is imported first)."""
    kwargs: EnvKwargs = field(default_factory=lambda: default_kwargs(DEFAULT_ENV))
    """Keyword arguments for ``gymnasium.make`` (e.g. ``--env.kwargs memory_length 12 num_values 4``;
    they replace the id's own defaults, listed in docs/environments.md; the default shown is
    the default id's, and another ``--env.env-id`` brings its own)."""

    def __post_init__(self) -> None:
        check_env_id(self.env_id)
        if isinstance(self.kwargs, DefaultKwargs) and self.kwargs.env_id != self.env_id:
            # another id's defaults (the default instance's): use this id's own
            object.__setattr__(self, "kwargs", default_kwargs(self.env_id))

    @property
    def system_prompt(self) -> str:
        """The environment's system prompt (builds one instance; checks the kwargs too)."""
        from cxsim.runtime import check_text_env, env_system_prompt

        env = gym.make(self.env_id, **self.kwargs)
        check_text_env(env, self.env_id)
        prompt = env_system_prompt(env)
        env.close()
        return prompt


@dataclass(frozen=True)
class SFTConfig:
    """Behaviour cloning from scripted rollouts under compaction."""

    episodes: int = 256
    """Oracle episodes collected (each gives its execution and summary segments)."""
    heldout_episodes: int = 32
    """More episodes, kept aside for the held-out loss."""
    omission_rate: float = 0.5
    """Probability that the scripted summarizer drops each needed fact it could keep.
    The cloned policy inherits it: an imperfect base, like the paper's SFT model."""
    skip_rate: float = 0.0
    """Probability that the scripted executor skips an optional action (KeyRecallActive's
    ``open box``: the key is then never shown). The cloned base inherits it, so credit
    must reach that first action, compactions before the reward (``cxsim verdicts``)."""
    model: PolicySize = "tiny"
    """Policy size preset (agents.models.POLICY_PRESETS)."""
    epochs: int = 4
    """Passes over the demonstrations. 4 from the shipped starting checkpoint, which already
    copies (``--policy pretrained``); a fresh tiny model (``--policy None``) starts copying the
    key into summaries after ~6 and into answers after ~8, and only on some seeds: give it 12
    or more (docs/results.md, "Independent seeds")."""
    lr: float = 3e-3
    """Adam learning rate."""
    batch_rows: int = 16
    """Segments per optimiser step."""
    bucket_by_length: bool = True
    """Draw each step from segments of similar length: on the default data the padded
    tokens per real token go from 1.26 (shuffled 16-row steps) to 1.002. Off: uniformly
    shuffled steps (how the bases of docs/results/tables.md were made)."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.omission_rate <= 1.0:
            raise ValueError(f"omission_rate={self.omission_rate} must lie in [0, 1]")
        if not 0.0 <= self.skip_rate <= 1.0:
            raise ValueError(f"skip_rate={self.skip_rate} must lie in [0, 1]")
        if min(self.episodes, self.heldout_episodes, self.epochs, self.batch_rows) < 1:
            raise ValueError("episodes, heldout_episodes, epochs and batch_rows must be >= 1")
        if self.lr <= 0:
            raise ValueError(f"lr={self.lr} must be positive")


@dataclass(frozen=True)
class PPOConfig:
    """PPO with context compaction (docs/method.md sections 3-5); defaults are CompactionRL's."""

    protocol: TrainProtocol = "compacted"
    """Context strategy of the training rollouts (cxsim/strategies/): ``compacted`` (CompactionRL),
    ``single`` (no compaction, an episode fails when its window fills: "PPO without compaction"),
    any other ``--compaction.protocol`` value, or module:name. ``cxsim train`` sets it to
    ``--compaction.protocol`` when only that is given; the window sizes always come from
    ``--compaction.protocol``."""
    estimator: EstimatorName = "cross-segment"
    """Advantage estimator (cxsim/estimators.py): ``cross-segment`` (the paper: local GAE times
    (gamma lambda)^N_{>s}), ``local`` (no correction), ``stitched`` (exact GAE across
    boundaries), ``group-broadcast`` (SUPO/GRPO; no critic), any name registered there or by
    an installed plug-in, or ``my_module:my_gae`` for an ``Estimator`` of your own
    (docs/training.md, "Your own estimator or loss mode")."""
    gamma: float = 1.0
    """Discount per trainable token."""
    lam: float = 0.95
    """GAE lambda, used only with ``--ppo.lambda-scope fixed``: at the default scope (rollout)
    and at segment, lambda is length-adaptive and this value has no effect."""
    lambda_scope: LambdaScope = "rollout"
    """``fixed`` uses ``lam``; ``segment``/``rollout``: length-adaptive lambda = 1 - 1/(alpha l) with
    l the trainable tokens of the segment / of the rollout (under the policy mask)."""
    alpha: float = 1.5
    """Length-adaptive lambda coefficient."""
    loss_mode: LossMode = "token-mean"
    """Policy-loss reduction (cxsim/loss_modes.py): ``token-mean`` (paper; global token count),
    ``segment-mean``, ``rollout-mean``, ``seq-mean-token-sum``, any name registered there or by
    an installed plug-in, or ``my_module:my_mode`` for a ``LossModeSpec`` of your own."""
    critic_loss_mode: LossMode = when_set("token-mean")
    """Value-loss reduction, a loss mode of the same registry: ``token-mean`` (every token the
    same weight), or ``thread-mean``: each compaction thread (a rollout's chain of windows) the
    same total critic weight, however many windows and tokens it has."""
    train_summaries: bool = True
    """Train the summary tokens too (False: the "w/o summary training" ablation)."""
    bootstrap_truncated: bool = False
    """At an episode the environment truncated (its time limit), add ``gamma V`` of the state it
    was cut in to the terminal reward. False (the method): every ending is a failure, never
    bootstrapped. Endings by the runtime (window full, turn cap) and compaction boundaries are
    never bootstrapped."""
    ratio_check_atol: float | None = 1e-3
    """Before the first actor step, every |log ratio| must be at most this (the policy has not
    moved since it sampled): a larger one means sampling and scoring disagree (e.g. another
    temperature) and training stops. None: no check. Under ``--precision bf16`` it is at least
    0.1 (``cxsim.ratio_check``: bf16 rounding moves log-probs by 0.017, a wrong temperature
    by tenths)."""
    whiten: bool = True
    """Whiten advantages over the batch's policy tokens before the policy loss."""
    group_size: int = 1
    """Rollouts per task (the same env seed); > 1 for group-broadcast."""
    rollouts_per_batch: int = 32
    """Rollouts per iteration (a multiple of group_size)."""
    iterations: int = 16
    """PPO iterations (after the critic warm-up). 16 with the KL penalty, chosen on the tuning
    seeds 0-3 and 40-45 (docs/results/stability.md); 12 before."""
    critic_warmup: int = 2
    """Value-only iterations before RL (paper: 50 steps); each collects a batch and trains
    the critic only."""
    epochs: int = 1
    """Actor passes over each batch."""
    critic_ratio: int = 2
    """Critic passes per actor pass (paper: 2 critic updates per actor update)."""
    minibatches: int = 4
    """Optimiser steps per pass, rollouts kept whole (4: 0.85 on 5 of 6 seeds, 2: 4 of 6)."""
    micro_batch_rows: int = 16
    """Segments per forward pass inside a minibatch (gradient accumulation; the loss
    denominator is still the whole minibatch's)."""
    micro_batch_tokens: int | None = None
    """Token budget of one forward pass: a micro-batch holds at most this many tokens, padding
    counted (rows x its longest row), and at most ``micro_batch_rows`` rows; a longer row goes
    alone. None: rows only. Results do not depend on it (global denominators)."""
    clip_eps: float = 0.2
    """PPO ratio clip range."""
    value_clip_eps: float | None = None
    """Value clip range around the old values (None: unclipped value loss)."""
    actor_lr: float = 1e-3
    """Actor Adam learning rate (tiny models; the paper's 2e-6 is for 30B-106B)."""
    critic_lr: float = 2e-3
    """Critic Adam learning rate."""
    value_head_lr: float | None = when_set(None)
    """Adam learning rate of the value head and its pool (cxsim/critics.py), apart from the
    critic's backbone; None: --ppo.critic-lr for every critic parameter."""
    value_head_lr_after_warmup: float | None = when_set(None)
    """The value head's Adam rate once the actor moves (after --ppo.critic-warmup): a head
    that learned fast in the warm-up then follows slowly, so one batch at near-constant return
    does not overwrite what it reads; None: --ppo.value-head-lr throughout. Needs
    --ppo.value-head-lr."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip for actor and critic."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (0: none, as in the paper)."""
    temperature: float = 1.0
    """Sampling temperature for training rollouts (log-probs are under this distribution)."""
    kl_coef: float = when_set(0.1, recorded_default=0.0)
    """Weight of a KL penalty to the reference policy, the one training started from
    (cxsim/stabilisers.py); 0: none (the recipe before, which collapsed on 1 of 10 tuning
    seeds; docs/results/stability.md)."""
    kl_estimator: KLEstimator = when_set("k3")
    """The penalty's per-token estimate of KL(pi || ref) at sampled tokens: k1 (log pi -
    log ref), k2 (half its square) or k3 (ref/pi - 1 - log(ref/pi), never negative)."""
    kl_in: KLPlace = when_set("loss")
    """Where the penalty goes: ``loss`` (added to the policy loss, reduced as it is) or
    ``reward`` (k1 of the sampling policy taken off every policy token's reward before the
    advantages)."""
    target_kl: float | None = when_set(None)
    """Stop an iteration's actor steps when a minibatch's approximate KL to the sampling
    policy exceeds this, before its step; None: take every step."""
    whiten_std_floor: float = when_set(0.0)
    """Whitening divides by max(std, this): advantages that barely differ (an all-success
    batch: the critic's errors) are centred, not scaled up to unit variance. 0: no floor."""
    skip_uniform_batches: bool = when_set(True, recorded_default=False)
    """No actor step from a batch whose rollouts all ended alike: whitening would scale the
    critic's errors to unit variance (docs/results/stability.md). False: the old default."""
    keep_best: bool = when_set(True, recorded_default=False)
    """Score each policy version on its own batches (unseen tasks) and end with the one
    --ppo.keep-best-rule picks (cxsim/best_policy.py); results.json names it, and the
    evaluation uses it. --ppo.no-keep-best: the last version (the default before)."""
    keep_best_rule: KeepBestRule = when_set("unless-worse", recorded_default="highest-bound")
    """``unless-worse``: the last version, unless the best-scored one did better beyond
    chance; ``highest-bound``: the version with the highest lower 95% bound (the rule
    before). Recorded as highest-bound under --ppo.no-keep-best, where it picks nothing."""
    track_reference: bool = when_set(True)
    """Keep a frozen copy of the starting policy to log the KL to it every iteration
    (stability/kl_to_reference); False saves its memory (a --ppo.kl-coef above 0 keeps it)."""
    lr_schedule: LRSchedule = when_set("constant")
    """The actor's rate over the PPO iterations: ``constant``, or ``linear`` down to
    actor_lr / iterations at the last."""
    value_head: ValueHeadName = when_set("context-ridge", recorded_default="last")
    """What the critic's value of a prefix reads (cxsim/critics.py): ``context-ridge`` (the
    default, the tracking critic: its last hidden state's value plus a ridge regression on
    the words of the row's opening context, refit before each critic update), ``last`` (its
    last hidden state; the default before, explaining about nothing of the main task's
    outcome at the last window), ``prefix-mean`` (the mean of its hidden states),
    ``attention-pool`` (its hidden states pooled by a learned query), ``words-pool`` /
    ``words-max`` (its last hidden state plus the prefix's input embeddings, pooled by a
    learned query / by a running maximum), ``words-seen`` (its last hidden state plus a
    learned vector per distinct word of the prefix), or ``my_module:my_head`` for a
    ``ValueHead`` of your own. Every one reads the prefix only. Runs recorded before the
    default changed name no head: they were made with ``last``."""
    value_loss: ValueLossName = when_set("mse")
    """Critic loss (cxsim/critics.py): ``mse`` (0.5 (V - G)^2), ``hl-gauss`` (cross-entropy
    of logits over value bins to a Gaussian around the return; the value is the expectation
    over the bins), or ``my_module:my_loss`` for a ``ValueLoss`` of your own."""
    value_bins: int = when_set(32)
    """hl-gauss: number of equal value bins on [value_min, value_max]."""
    value_min: float = when_set(-0.1)
    """hl-gauss: low end of the value bins (returns lie in [0, 1] here; a margin below)."""
    value_max: float = when_set(1.1)
    """hl-gauss: high end of the value bins (a margin above 1); returns outside are clamped."""
    value_sigma: float | None = when_set(None)
    """hl-gauss: width of the Gaussian around each return; None: 0.75 bin widths."""
    critic_lam: float | None = when_set(1.0, recorded_default=None)
    """Lambda of the critic's targets: a float, the same estimator over the same segments at
    this lambda (1.0, the default: Monte-Carlo-like targets), whatever lambda the actor uses;
    None, the actor's (targets A + V from the estimator's advantages; the default before, and
    what runs recorded without it used). The default head, ``context-ridge``, fits these
    targets: at the actor's lambda it left the main job at Compacted Pass@1 0.78 over 8
    seeds, against 0.95 at 1.0 (docs/results.md, "The tracking critic is the default")."""
    value_pretrain_steps: int = when_set(0)
    """Value-only optimiser steps before the first iteration, each on the whole fit share of
    a fixed set of the starting policy's rollouts (collected once); the held-out share's
    explained variance goes to TensorBoard (critic/pretrain_heldout_ev) and results.json.
    0: none."""
    value_pretrain_rollouts: int = when_set(64)
    """Rollouts collected once for --ppo.value-pretrain-steps."""
    value_pretrain_heldout: float = when_set(0.25)
    """Share of those rollouts held out (whole rollouts) to measure explained variance on."""

    def __post_init__(self) -> None:
        ESTIMATORS.check("estimator", self.estimator)  # plug-ins: imported and validated
        LOSS_MODES.check("loss_mode", self.loss_mode)
        LOSS_MODES.check("critic_loss_mode", self.critic_loss_mode)
        VALUE_HEADS.check("value_head", self.value_head)
        VALUE_LOSSES.check("value_loss", self.value_loss)
        check_critic_settings(self)  # cxsim/critics.py: the critic variants' settings
        check_stability_settings(self)  # cxsim/stability_settings.py
        _one_of("keep_best_rule", self.keep_best_rule, KEEP_BEST_RULES)
        if not self.keep_best:  # no rule applies: recorded as runs before the rule were
            object.__setattr__(self, "keep_best_rule", "highest-bound")
        _one_of("lambda_scope", self.lambda_scope, LAMBDA_SCOPES)
        STRATEGIES.check("--ppo.protocol", self.protocol)
        if self.ratio_check_atol is not None and self.ratio_check_atol <= 0:
            raise ValueError(f"ratio_check_atol={self.ratio_check_atol} must be positive (or None)")
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"gamma={self.gamma} and lam={self.lam} must lie in [0, 1]")
        if self.alpha <= 0:
            raise ValueError(f"alpha={self.alpha} must be positive")
        if self.group_size < 1 or self.rollouts_per_batch % self.group_size:
            raise ValueError(
                f"rollouts_per_batch={self.rollouts_per_batch} must be a positive multiple of "
                f"group_size={self.group_size}: change --ppo.rollouts-per-batch or --ppo.group-size"
            )
        if ESTIMATORS[self.estimator].needs_groups and self.group_size < 2:
            raise ValueError(
                f"estimator={self.estimator!r} reads groups of rollouts of one task (its "
                "needs_groups): set --ppo.group-size to 2 or more"
            )
        if self.bootstrap_truncated and not self.uses_critic:
            raise ValueError(
                f"--ppo.bootstrap-truncated bootstraps from the critic's value, and estimator="
                f"{self.estimator!r} has no critic: drop the flag or choose a critic estimator"
            )
        for name in ("iterations", "critic_warmup"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 0")
        for name in ("epochs", "critic_ratio", "minibatches", "micro_batch_rows"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.micro_batch_tokens is not None and self.micro_batch_tokens < 1:
            raise ValueError(
                f"micro_batch_tokens={self.micro_batch_tokens} must be >= 1 (or None: rows only)"
            )
        if self.minibatches > self.rollouts_per_batch // self.group_size:
            raise ValueError(
                f"minibatches={self.minibatches} exceeds the number of groups per batch "
                f"({self.rollouts_per_batch // self.group_size}); lower --ppo.minibatches"
            )
        if self.actor_lr <= 0 or self.critic_lr <= 0:
            raise ValueError("actor_lr and critic_lr must be positive")
        if self.value_head_lr is not None and not self.value_head_lr > 0:
            raise ValueError(
                f"--ppo.value-head-lr {self.value_head_lr} must be positive (or None: critic_lr)"
            )
        if self.value_head_lr_after_warmup is not None:
            if self.value_head_lr is None:
                raise ValueError(
                    "--ppo.value-head-lr-after-warmup changes the value head's own rate: set "
                    "--ppo.value-head-lr too (the head's rate in the warm-up)"
                )
            if not self.value_head_lr_after_warmup > 0:
                raise ValueError(
                    f"--ppo.value-head-lr-after-warmup {self.value_head_lr_after_warmup} must "
                    "be positive"
                )
        if self.clip_eps <= 0 or (self.value_clip_eps is not None and self.value_clip_eps <= 0):
            raise ValueError("clip_eps and value_clip_eps must be positive")
        if self.temperature <= 0:
            raise ValueError(f"temperature={self.temperature} must be positive")

    @property
    def uses_reference(self) -> bool:
        """Training keeps a frozen copy of the starting policy (the KL penalty, or its log)."""
        return self.kl_coef > 0 or self.track_reference

    @property
    def uses_critic(self) -> bool:
        """The estimator needs a critic (its ``needs_critic`` in cxsim/estimators.py, or the
        plug-in's own)."""
        return ESTIMATORS[self.estimator].needs_critic

    @property
    def histogram_sigma(self) -> float:
        """hl-gauss's Gaussian width: ``value_sigma``, or 0.75 bin widths."""
        if self.value_sigma is not None:
            return self.value_sigma
        return 0.75 * (self.value_max - self.value_min) / self.value_bins

    @property
    def pretrain_heldout_rollouts(self) -> int:
        """How many of the value-pretraining rollouts are held out (at least 1)."""
        return max(1, round(self.value_pretrain_heldout * self.value_pretrain_rollouts))


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation under the Single and Compacted protocols (or any context strategy)."""

    episodes: int = 64
    """Distinct tasks (episode seeds), disjoint from training seeds."""
    repeats: int = 1
    """Samples per task; Pass@1 averages them, the CI counts tasks (see cxsim.evaluation)."""
    protocols: EvalProtocols = ("single", "compacted")
    """Protocols to run: context strategies (cxsim/strategies/) by name, or module:name. Left at
    the default, ``cxsim eval`` runs single and ``--compaction.protocol`` when that is not
    compacted."""
    temperature: float = 1.0
    """Sampling temperature of an LM agent."""
    seed: int | None = None
    """Seed of the evaluation tasks and of the sampling RNG; None: the run's own seed
    (``cxsim run``: its first training seed, so ``--seeds N`` alone is an independent
    replicate; elsewhere 0)."""

    def seeded(self, seed: int) -> EvalConfig:
        """This config with ``seed`` where no seed was given."""
        return self if self.seed is not None else replace(self, seed=seed)

    def __post_init__(self) -> None:
        if self.episodes < 1 or self.repeats < 1:
            raise ValueError("episodes and repeats must be >= 1")
        if not self.protocols:
            raise ValueError("--eval.protocols is empty: name at least one protocol")
        for p in self.protocols:
            STRATEGIES.check("--eval.protocols", p)
        if self.temperature <= 0:
            raise ValueError(f"temperature={self.temperature} must be positive")
