"""``cxsim eval``: Pass@1 with a 95% interval under the Single and Compacted protocols.

Evaluates a policy checkpoint (``--policy PATH``) or a scripted agent
(``--agent oracle`` / ``--agent random``, with ``--omission-rate`` for the
scripted summarizer) on N tasks x M repeats per protocol, prints a table and
writes the results as JSON (``--out``). The interval is a Wilson score
interval over tasks (cxsim/evaluation.py explains why). The protocols are
``--eval.protocols`` (any context strategy); left at their default, single and
compacted, or single and ``--compaction.protocol`` when that is another one.

    cxsim eval --policy runs/main/train/checkpoints/iter-000040/policy --out eval.json
    cxsim eval --agent oracle --omission-rate 0.5 --eval.episodes 200
    cxsim eval --agent oracle --compaction.protocol observation-masking
    cxsim eval --policy path/to/hf-model --device cuda --precision bf16 --chat.system-role merge
    cxsim eval --agent oracle --tokenizer path/to/hf-model   # the oracle in that chat format
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import tyro

from cxsim.compaction import CompactionConfig
from cxsim.compute import FLAT, ComputeFlags, SamplingCompute
from cxsim.config import DEFAULT_COMPACTION, EnvConfig, EvalConfig, check_policy_dir
from cxsim.model_group import Model
from cxsim.model_options import ChatOptions
from cxsim.pretrained import policy_path
from cxsim.strategies import RolloutAgents, ScriptedOptions
from cxsim.tracking import say, write_json

if TYPE_CHECKING:  # torch-heavy; imported where used, so that --help is fast
    from cxsim.agent_api import Agent
    from cxsim.agents.chat import ChatFormat


@dataclass(frozen=True)
class Config:
    """Evaluate one agent under each protocol."""

    model: Model = field(default_factory=lambda: Model(policy=None), metadata=FLAT)
    """The policy to evaluate (``--policy``, or an ``--agent``), and how a chat template renders
    turns (the policy's, or ``--tokenizer``'s for a scripted agent)."""
    agent: Literal["oracle", "random"] | None = None
    """A scripted agent instead of a policy: the oracle (with the scripted summarizer) or random."""
    omission_rate: float = 0.0
    """Scripted summarizer's omission rate (scripted agents, and the summarizer of a protocol
    whose summaries another agent writes, e.g. external-summarizer)."""
    env: EnvConfig = field(default_factory=EnvConfig)
    compaction: CompactionConfig = field(default_factory=lambda: DEFAULT_COMPACTION)
    """Context budget and compaction, sized under ``--compaction.protocol`` (every protocol
    evaluated uses the same budget). ``--eval.protocols`` left at its default (single,
    compacted) becomes single and ``--compaction.protocol`` when that is another one."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    out: str | None = None
    """Write the results here as JSON."""
    tokenizer: str | None = None
    """Scripted agents only: a directory with a Hugging Face tokenizer and chat template whose
    chat format they act in (as a policy from that directory would); None: the word tokenizer."""
    compute: ComputeFlags[SamplingCompute] = field(default_factory=SamplingCompute, metadata=FLAT)

    def __post_init__(self) -> None:
        object.__setattr__(self, "eval", self.eval.seeded(0))
        protocol = self.compaction.protocol
        if self.eval.protocols == EvalConfig().protocols and protocol not in self.eval.protocols:
            protocols = ("single", protocol)  # the run's strategy, beside Single
            object.__setattr__(self, "eval", replace(self.eval, protocols=protocols))
        if (self.model.policy is None) == (self.agent is None):
            raise ValueError("pass exactly one of --policy PATH or --agent {oracle,random}")
        if self.model.policy is not None:
            check_policy_dir(self.model.policy)
        if self.tokenizer is not None:
            if self.agent is None:
                raise ValueError("--tokenizer is for --agent (a --policy brings its own tokenizer)")
            check_tokenizer_dir(self.tokenizer)
        if not 0.0 <= self.omission_rate <= 1.0:
            raise ValueError(f"omission_rate={self.omission_rate} must lie in [0, 1]")


def check_tokenizer_dir(path: str) -> None:
    """Raises FileNotFoundError unless ``path`` (or the shipped checkpoint it names, such as
    ``pretrained-chat``) holds a saved tokenizer."""
    if not (policy_path(path) / "tokenizer_config.json").is_file():
        raise FileNotFoundError(
            f"--tokenizer {path!r} holds no tokenizer (no tokenizer_config.json); pass a "
            "directory saved with save_pretrained (a `cxsim sft` policy or a Hugging Face model)"
        )


def chat_options_given(options: ChatOptions) -> ChatOptions | None:
    """``options``, or None when they are the defaults (a policy then keeps its saved ones)."""
    return None if options == ChatOptions() else options


def scripted_chat(cfg: Config) -> ChatFormat:
    """The chat format a scripted agent acts in: ``--tokenizer``'s, else the word format."""
    from transformers import AutoTokenizer

    from cxsim.agents import HFChatFormat, WordChatFormat, default_tokenizer
    from cxsim.agents.models import MARKER_FILE

    if cfg.tokenizer is None:
        return WordChatFormat(default_tokenizer())
    folder = policy_path(cfg.tokenizer)  # a shipped checkpoint's name, or a folder
    marker = folder / MARKER_FILE
    tokenizer = AutoTokenizer.from_pretrained(
        folder, local_files_only=True, trust_remote_code=False
    )
    saved = json.loads(marker.read_text()) if marker.is_file() else {}
    if saved.get("chat_format") == "word":  # a cxsim policy over the word tokenizer
        return WordChatFormat(tokenizer)
    return HFChatFormat(tokenizer, cfg.model.chat)


def build_agent(cfg: Config) -> tuple[Agent | None, ChatFormat, str]:
    """The agent to evaluate (None for the oracle: each protocol's own, ``protocol_agents``),
    its chat format, and a label for tables."""
    from cxsim.agents import load_policy
    from cxsim.agents.lm_agent import LMAgent
    from cxsim.agents.scripted import RandomAgent
    from cxsim.devices import resolve_device
    from cxsim.envs.family import family_of_id
    from cxsim.generation import SamplingConfig

    if cfg.model.policy is not None:
        device = resolve_device(cfg.compute.device)
        policy, _, chat = load_policy(cfg.model.policy, device, chat_options_given(cfg.model.chat))
        sampling = SamplingConfig(temperature=cfg.eval.temperature)
        agent = LMAgent(policy, chat, sampling, device=device, precision=cfg.compute.precision)
        return agent, chat, cfg.model.policy
    chat = scripted_chat(cfg)
    if cfg.agent == "oracle":
        return None, chat, f"oracle (omission {cfg.omission_rate})"
    family = family_of_id(cfg.env.env_id)
    return RandomAgent(chat, seed=cfg.eval.seed, family=family), chat, "random"


def protocol_agents(
    cfg: Config, protocol: str, chat: ChatFormat, agent: Agent | None
) -> RolloutAgents:
    """Who plays under ``protocol`` (``cfg.compaction`` sized): the evaluated agent (the
    oracle: the protocol's scripted actor for these sizes) and, where another agent writes
    the summaries (``summary_by="summarizer"``), the protocol's scripted summarizer, with
    --omission-rate."""
    runtime = cfg.compaction.for_protocol(protocol)
    strategy = runtime.strategy
    if agent is not None and strategy.summary_by != "summarizer":
        return RolloutAgents(agent)
    options = ScriptedOptions(omission_rate=cfg.omission_rate, seed=cfg.eval.seed)
    scripted = strategy.scripted_agents(cfg.env.env_id, chat, options, config=runtime)
    return RolloutAgents(scripted.actor if agent is None else agent, scripted.summarizer)


def evaluate(
    cfg: Config,
    label: str | None = None,
    summarizer_policy: str | None = None,
    sized_on: EnvConfig | None = None,
) -> dict[str, Any]:
    """Runs every protocol of ``cfg.eval``; returns the JSON payload (also written to --out).
    With ``summarizer_policy``, the policy saved there writes every summary that the
    protocol has another agent write (the Table 1 swap), beside a policy or the oracle
    acting, and the payload names it. ``sized_on``: the env whose oracle episodes size the
    window (the one the policies were trained on), when ``cfg.env`` is another. Each result
    holds its records' summary omission (``cxsim.diagnostics.summary_omission``)."""
    from cxsim.diagnostics import summary_omission
    from cxsim.evaluation import evaluate_protocol
    from cxsim.preflight import preflight

    began = time.perf_counter()
    agent, chat, default_label = build_agent(cfg)
    summarizer = None
    if summarizer_policy is not None:
        writer = replace(cfg, model=replace(cfg.model, policy=summarizer_policy), agent=None,
                         tokenizer=None)  # fmt: skip
        summarizer, _, _ = build_agent(writer)
    cfg = replace(cfg, compaction=preflight(sized_on or cfg.env, cfg.compaction, chat))
    results = []
    for protocol in cfg.eval.protocols:
        if summarizer is not None and agent is not None:
            agents = RolloutAgents(agent, summarizer)
        else:  # the oracle (the protocol's scripted actor) acts, or the policy alone
            agents = protocol_agents(cfg, protocol, chat, agent)
            agents = agents if summarizer is None else RolloutAgents(agents.actor, summarizer)
        result, records = evaluate_protocol(
            cfg.env.env_id,
            cfg.env.kwargs,
            agents.actor,
            chat,
            cfg.compaction,
            protocol,
            cfg.eval.episodes,
            cfg.eval.repeats,
            cfg.eval.seed,
            threads=cfg.compute.threads,
            summarizer_agent=agents.summarizer,
        )
        results.append(result | {"omission": summary_omission(records)})
    payload = {
        "label": label or default_label,
        "env_id": cfg.env.env_id,
        "env_kwargs": cfg.env.kwargs,
        "results": results,
        "wall_time_s": time.perf_counter() - began,
        "config": cfg,
    }
    if summarizer_policy is not None:
        payload["summarizer"] = summarizer_policy
    if cfg.out is not None:
        write_json(cfg.out, payload)
    return payload


def main(argv: list[str] | None = None) -> None:
    cfg = tyro.cli(Config, args=argv)
    from cxsim.evaluation import format_table

    payload = evaluate(cfg)
    say(format_table([(payload["label"], r) for r in payload["results"]]))
    say(f"({payload['wall_time_s']:.0f}s; 95% CI: Wilson interval over tasks)")


if __name__ == "__main__":
    main()
